"""`python -m apps.check [--out REPORT.md]`: the GPU check, within minutes on one GPU.

1. the GPU-marked tests (Triton kernels vs references, on CUDA tensors), and the decoder smoke:
   every registered decoder on a tiny random model of its modality on CUDA (`--smoke` below);
2. per-step latency of the `ar` step on SmolLM2 and on the vision prior: eager over the dynamic
   cache, eager over the static cache, and compiled over the static cache (CUDA graphs on a
   GPU), each checked token for token against eager;
3. SmolLM2: each decoder's speedup over `ar`, and the achieved memory bandwidth of its steps
   (weight bytes x forwards/s) against a measured device-to-device copy bandwidth.
Writes a markdown report (stdout too). Exits 2 without a CUDA GPU, unless `--device cpu`, which
runs part 2 alone on the CPU. `--overhead`: the loop's own time per step of every text decoder, as
a fraction of its forwards (tiny 2-layer Llama and SmolLM2, CPU); `--cost-curve`: SmolLM2's
cost(N)/cost(1) with plain linear layers and with suite.models.linear_forms (CPU).
`--smoke`: every registered decoder on a tiny random model of its modality, on `--device`
(cuda by default; cpu runs it here): at T = 0 the exact ones equal `ar` token for token, at T = 1
every one runs within its budget.
"""
from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import time
from pathlib import Path

import torch

DECODERS = ["ar", "jacobi", "lookahead", "ngram"]
PROMPT = "Rewrite this function with type hints:\n\ndef add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"


def copy_bandwidth_gbs(size_mb: int = 1024) -> float:
    x = torch.empty(size_mb * 2**20, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    return 2 * 10 * x.numel() / (time.perf_counter() - t) / 1e9   # read + write


def step_ms(model, ids, mask, max_new: int) -> tuple[float, list[int]]:
    """Mean latency of the `ar` steps after the prefill, and the tokens the request made."""
    import suite
    suite.generate(model, ids, mask, max_new_tokens=8)     # warm up (and compile)
    _sync()
    steps = suite.stream(model, ids, mask, max_new_tokens=max_new)
    tokens = list(next(steps).committed[0])
    _sync()
    t, n = time.perf_counter(), 0
    for step in steps:
        tokens += step.committed[0]
        n += 1
    _sync()
    return 1e3 * (time.perf_counter() - t) / max(n, 1), tokens


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def latency_models(device: str):
    """(label, transformers model, prompt ids, mask) for SmolLM2 and the vision prior."""
    import text
    import vision
    gen = text.load(device=device, progress=False)
    ids, mask = gen.encode([PROMPT], chat=True)
    prior = vision.load_image_pipeline().prior
    class_token = torch.tensor([[prior.class_token(0)]], device=device)
    return [("SmolLM2-135M", gen.model, ids.to(device), mask.to(device)),
            ("vision prior", prior.model.to(device), class_token, torch.ones_like(class_token))]


def latency_table(device: str, max_new: int) -> list[str]:
    from suite import HFCausalLM
    from suite.models.static_cache import StaticHFCausalLM
    mode = "reduce-overhead" if device == "cuda" else None
    rows = []
    for label, model, ids, mask in latency_models(device):
        cap = ids.shape[1] + max_new + 16
        variants = [("eager, dynamic cache", HFCausalLM(model)),
                    ("eager, static cache", StaticHFCausalLM(model, cap, compiled_widths=())),
                    (f"compiled ({mode or 'default'}), static cache", StaticHFCausalLM(model, cap, (1,), mode))]
        base_ms, base_tokens = None, None
        for name, adapter in variants:
            ms, tokens = step_ms(adapter, ids, mask, max_new)
            base_ms, base_tokens = base_ms or ms, base_tokens or tokens
            rows.append(f"| {label} | {name} | {ms:.2f} | {base_ms / ms:.2f}x | {'yes' if tokens == base_tokens else 'NO'} |")
    return rows


def decoder_table(max_new: int) -> list[str]:
    import suite
    import text
    gen = text.load(device="cuda")
    ids, mask = gen.encode([PROMPT], chat=True)
    ids, mask = ids.cuda(), mask.cuda()
    rows, base = [], None
    weight_bytes = sum(p.numel() * p.element_size() for p in gen.model.parameters())
    for name in DECODERS:
        suite.generate(gen.model, ids, mask, decoder=name, max_new_tokens=8)   # warm up
        torch.cuda.synchronize()
        out = suite.generate(gen.model, ids, mask, decoder=name, max_new_tokens=max_new)
        torch.cuda.synchronize()
        s = out.stats
        base = base or s.tokens_per_second
        per_forward_ms = 1e3 * s.wall_time_s / s.num_forwards
        bandwidth = weight_bytes * s.num_forwards / s.wall_time_s / 1e9
        rows.append(f"| {name} | {s.num_forwards} | {s.tokens_per_forward:.2f} | {per_forward_ms:.2f} | "
                    f"{s.tokens_per_second:.1f} | {s.tokens_per_second / base:.2f}x | {bandwidth:.0f} |")
    return rows


def tiny_llama(seed: int = 0, vocab: int = 99, sharpen: float = 8.0):
    """A random 2-layer Llama (hidden 32), its logits sharpened so greedy paths are not decided by float noise."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                         eos_token_id=None, pad_token_id=0, bos_token_id=None)).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpen)
    return model


def _sharpened(model, factor: float):
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model.eval()


def smoke_case(name: str, device: str) -> tuple[object, list, int, dict, object]:
    """(adapter, prompt rows, max_new_tokens, decoder options, RequestInputs or None): a tiny random
    model of the decoder's modality (its registry entry), built on the CPU and moved to `device` once."""
    import suite
    from suite.registry import REGISTRY
    entry = REGISTRY[name]
    modality = "text" if entry.modalities == ("any",) else entry.modalities[0]
    if modality in ("text", "document", "asr"):
        model = tiny_llama().to(device)
        options, inputs = {}, None
        rows = [[5, 6, 7, 8, 9, 5, 6, 7], [20, 21, 22, 20, 21]]
        if name == "speculative":
            options = {"draft_model": tiny_llama(seed=1).to(device)}
        elif name == "eagle":
            from suite.decoders.chain.eagle_head import EagleHead
            torch.manual_seed(0)
            head = EagleHead.for_target(model.config, 64)
            with torch.no_grad():
                head.fc.weight.mul_(4.0)
            options = {"draft_head": head.eval().to(device)}
        elif "mask_token_id" in suite.decoder_options(name):
            options = {"mask_token_id": 3}
        if name == "ngram_prior":
            inputs = suite.RequestInputs(prior_tokens=tuple(r + [5, 6, 7] for r in rows))
        elif name == "ctc_speculative":
            inputs = suite.RequestInputs(ctc=tuple(suite.CTCHypothesis([5, 6, 7, 8], torch.ones(6, device=device))
                                                   for _ in rows))
        return suite.as_adapter(model), rows, 12, options, inputs
    if modality == "image":
        from vision.position_queries import add_query_tokens
        from vision.prior import ImagePrior, build_prior
        torch.manual_seed(0)
        model = _sharpened(build_prior(16, 3, (4, 4), hidden=32, layers=2, heads=4), 4.0)
        meta = {"codebook_size": 16, "classes": ["c0", "c1", "c2"], "grid": [4, 4]}
        if name == "lpd":
            meta = add_query_tokens(model, meta)
        prior = ImagePrior(model.to(device), meta)
        return prior, [[prior.class_token(0)], [prior.class_token(2)]], 16, {"steps": 6} if name == "lpd" else {}, None
    if modality == "video":
        from vision.video.prior import VideoLayout, VideoPrior, build_video_prior
        meta = {"codebook_size": 8, "classes": ["a", "b"], "motions": ["m0", "m1"], "frames": 3, "grid": [4, 4],
                "radius": 1}
        torch.manual_seed(0)
        lay = VideoLayout.from_meta(meta)
        video = VideoPrior(_sharpened(build_video_prior(lay, hidden=32, layers=2, heads=4), 4.0).to(device), meta)
        return video, [list(lay.prompt(0, 1)), list(lay.prompt(1, 0))], 3 * 16, {}, None
    if modality == "grounding":
        from vision.grounding import model as g
        torch.manual_seed(0)
        net = g.GroundingModel(g.default_config(8, n_embd=32, n_layer=2, n_head=2))
        with torch.no_grad():
            net.decoder.lm_head.weight.mul_(8.0)
        net = net.eval().to(device)
        features = torch.randn(2, g.GRID_CELLS * g.GRID_CELLS, g.FEATURE_DIM, device=device)
        prompt = [g.BOS, g.TASKS["aabb"][0], g.QUERY0 + 1, g.QUERY0 + 2, g.SEP]
        return g.GroundingAdapter(net).for_images(features), [prompt, prompt], 25, {}, None
    if modality == "speech":
        from speech.alignment import frame_conditioning
        from speech.tts_model import FrameTTSAdapter, TTSConfig, TTSModel
        torch.manual_seed(0)
        cfg = TTSConfig(num_codebooks=4, codebook_size=16, hidden_size=32, num_layers=2, num_heads=2, symbols="a b c",
                        local_layers=1, local_hidden=16, stack_frames=2,
                        local_frames=2 if name == "stack_local" else 1)
        tts = TTSModel(cfg).eval()
        with torch.no_grad():
            tts.local.heads.mul_(8.0)
            for head in list(tts.heads) + list(tts.stack_heads):
                head.weight.mul_(8.0)
        output = {"local_ar": "local", "local_maskgit": "local", "stack_local": "local", "stack": "stack"}.get(name, "frame")
        q = cfg.num_codebooks
        prompt = [(cfg.delay_token if name == "delay" else cfg.parallel_token,) + (cfg.pad,) * (q - 1), (cfg.bos,) * q]
        table = frame_conditioning(cfg.phone_ids("a b c a".split()), [2, 1, 0, 3], 3)
        adapter = FrameTTSAdapter(tts.to(device), output).for_request([len(prompt) - 1], [table])
        return adapter, [prompt], 6, {}, None
    raise ValueError(f"no smoke model for modality {modality!r} of decoder {name!r}: add one to apps.check.smoke_case")


def smoke(device: str, names=None) -> tuple[list[str], int]:
    """Every registered decoder (or `names`) on its tiny model on `device`: T = 0 (greedy; the exact
    and in-distribution ones against `ar`, token for token) and T = 1 (seeded sampling; runs, keeps
    its budget). Returns the markdown table and the number of failed cells."""
    import suite
    from suite.registry import REGISTRY
    rows, failures = ["| decoder | guarantee | T = 0 | T = 1 |", "|---|---|---|---|"], 0
    for name in names or list(REGISTRY):
        entry = REGISTRY[name]
        cells = []
        adapter, prompts, budget, options, inputs = smoke_case(name, device)
        def run(decoder, temperature, **opts):      # prompts are ragged rows: prepare + decode, as the apps do
            request = suite.prepare(adapter, prompts, decoder=decoder, max_new_tokens=budget,
                                    temperature=temperature, seed=0, inputs=inputs, **opts)
            return suite.decode(*request)

        for temperature in (0.0, 1.0):
            try:
                out = run(name, temperature, **options)
                ok = all(len(t) <= budget for t in out.new_tokens)
                cell = f"ok ({out.stats.num_forwards} fw)" if ok else "OVER BUDGET"
                if ok and temperature == 0.0 and entry.guarantee != "lossy" and entry.reference == "ar":
                    ok = out.new_tokens == run("ar", 0.0).new_tokens
                    cell = f"= ar ({out.stats.num_forwards} fw)" if ok else "DIFFERS FROM ar"
            except ValueError as e:
                if temperature > 0 and "greedy only" in str(e):     # jacobi refuses sampling, by design
                    ok, cell = True, "n/a (greedy only)"
                else:
                    ok, cell = False, f"error: ValueError: {str(e)[:80]}"
            except (RuntimeError, TypeError, IndexError) as e:
                ok, cell = False, f"error: {type(e).__name__}: {str(e)[:80]}"
            failures += not ok
            cells.append(cell)
        rows.append(f"| {name} | {entry.guarantee} | {cells[0]} | {cells[1]} |")
    return rows, failures


def loop_overhead(model, ids, decoder: str, max_new: int, **options) -> tuple[float, int]:
    """(the loop's own time per step as a fraction of the time inside the model's forwards,
    forwards) for one greedy request: step time minus forward time, timed by hooks on the model
    (a self-draft that shares the model's modules counts as forward time)."""
    import suite
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter   # robust to a shared CPU
    inside, start = [0.0], [0.0]
    pre = model.register_forward_pre_hook(lambda *_: start.__setitem__(0, clock()))
    post = model.register_forward_hook(lambda *_: inside.__setitem__(0, inside[0] + clock() - start[0]))
    try:
        suite.generate(model, ids, decoder=decoder, max_new_tokens=8, **options)     # warm up
        inside[0] = 0.0
        adapter, dec, state = suite.prepare(model, ids, decoder=decoder, max_new_tokens=max_new, **options)
        t0 = clock()
        result = suite.decode(adapter, dec, state)
        total = clock() - t0
    finally:
        pre.remove()
        post.remove()
    return (total - inside[0]) / max(inside[0], 1e-9), result.stats.num_forwards


def overhead_table(max_new: int) -> list[str]:
    """Loop overhead of every registered text decoder on a tiny 2-layer Llama and on SmolLM2."""
    import suite
    import text
    tiny = tiny_llama()
    gen = text.load(device="cpu", progress=False)
    smol_ids, _ = gen.encode([PROMPT], chat=True)
    tiny_ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11]])
    rows = []
    for name in suite.TEXT_DECODERS:
        options = {"draft": "self:1"} if name == "speculative" else {}
        cells = []
        for model, ids in ((tiny, tiny_ids), (gen.model, smol_ids)):
            try:
                frac, forwards = loop_overhead(model, ids, name, max_new, **options)
                cells.append(f"{100 * frac:.0f}% ({forwards} fw)")
            except (ValueError, RuntimeError) as e:
                cells.append(f"n/a ({str(e)[:40]})")
        rows.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return ["| decoder | tiny 2-layer Llama | SmolLM2-135M |", "|---|---|---|", *rows]


def cost_curve_table(rounds: int = 4, context: int = 700, widths=(1, 2, 4, 8, 16)) -> list[str]:
    """SmolLM2's forward cost(N)/cost(1) after `context` cached tokens: plain nn.Linear / "sdpa", with
    suite.models.linear_forms' per-width forms, with q/k/v and gate/up fused too, and the last in
    bf16 where the CPU runs it natively; measured in alternation (the median of `rounds` rounds per
    width; CPU time of the process under one thread)."""
    import statistics

    import text.model
    from suite import HFCausalLM
    from suite.cost import measure_curve
    from suite.models.linear_forms import native_bf16, swap_linears, unswap_linears
    model, _ = text.model.load_embedded(progress=False)
    unswap_linears(model)
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    setups = {"plain": lambda m: unswap_linears(m), "forms": lambda m: swap_linears(m, fuse=False),
              "forms + fused": lambda m: swap_linears(m, fuse=True)}
    models = {label: model for label in setups}
    if native_bf16():
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        models["bf16, forms + fused"], setups["bf16, forms + fused"] = bf16, setups["forms + fused"]
    runs = {label: [] for label in setups}
    for _ in range(rounds):
        for label, setup in setups.items():
            unswap_linears(models[label])
            setup(models[label])
            runs[label].append(measure_curve(HFCausalLM(models[label]), context=context, widths=widths, repeats=2,
                                             clock=clock).seconds)
    rows = []
    for label, found in runs.items():
        mid = [statistics.median(r[i] for r in found) for i in range(len(widths))]
        rows.append(f"| {label} | {1e3 * mid[0]:.1f} | " + " | ".join(f"{b / mid[0]:.2f}x" for b in mid[1:]) + " |")
    return ["| linear layers | cost(1) ms | " + " | ".join(f"cost({w})" for w in widths[1:]) + " |",
            "|---|---|" + "---|" * (len(widths) - 1), *rows]


def _emit(report: str, out: Path | None, status: int = 0) -> int:
    print(report)
    if out:
        out.write_text(report + "\n")
    return status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m apps.check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="also write the report here")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: only the eager vs compiled step latency, on this machine's CPU (with --smoke: "
                        "the smoke, on the CPU)")
    p.add_argument("--overhead", action="store_true",
                   help="only the loop-overhead table (on the CPU): each text decoder's own step time as a "
                        "fraction of its forwards")
    p.add_argument("--cost-curve", action="store_true",
                   help="only SmolLM2's cost(N)/cost(1) on the CPU, plain vs suite.models.linear_forms")
    p.add_argument("--smoke", action="store_true",
                   help="only the decoder smoke test on --device: every registered decoder on a tiny model, "
                        "T = 0 against ar and T = 1 within budget (exit 1 on a failure)")
    args = p.parse_args(argv)
    if args.smoke:
        if args.device == "cuda" and not torch.cuda.is_available():
            print("error: no CUDA GPU here; run the smoke with --device cpu, or on a GPU machine", file=sys.stderr)
            return 2
        table, failures = smoke(args.device)
        report = "\n".join([f"# Decoder smoke on {args.device} ({time.strftime('%Y-%m-%d')}): {failures} failed",
                            "", *table])
        return _emit(report, args.out, 1 if failures else 0)
    if args.cost_curve:
        report = "\n".join([f"# SmolLM2 forward cost curve (CPU, {torch.get_num_threads()} threads, 700 cached tokens)",
                            "", *cost_curve_table()])
        return _emit(report, args.out)
    if args.overhead:
        report = "\n".join([f"# Loop overhead (CPU, {torch.get_num_threads()} threads, "
                            f"{args.max_new_tokens} new tokens, greedy)", "", *overhead_table(args.max_new_tokens)])
        return _emit(report, args.out)
    latency_header = ["| model | ar step | ms/step | speedup | same tokens as eager |", "|---|---|---|---|---|"]
    if args.device == "cpu":
        report = "\n".join([f"# Step latency on the CPU ({torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')})",
                            "", *latency_header, *latency_table("cpu", args.max_new_tokens)])
        return _emit(report, args.out)
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; run this on a GPU machine", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"], cwd=root,
                           capture_output=True, text=True)
    smoke_rows, smoke_failures = smoke("cuda")
    lines = [f"# GPU check ({torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')})", "",
             "GPU tests: " + (tests.stdout.strip().splitlines() or ["(no output)"])[-1], "",
             f"Decoder smoke on CUDA: {smoke_failures} failed", "", *smoke_rows, "",
             *latency_header, *latency_table("cuda", args.max_new_tokens), "",
             f"Device copy bandwidth: {copy_bandwidth_gbs():.0f} GB/s", "",
             "| decoder | forwards | tok/forward | ms/forward | tok/s | speedup | weight GB/s |",
             "|---|---|---|---|---|---|---|", *decoder_table(args.max_new_tokens)]
    return _emit("\n".join(lines), args.out, 0 if tests.returncode == 0 and not smoke_failures else 1)


if __name__ == "__main__":
    sys.exit(main())
