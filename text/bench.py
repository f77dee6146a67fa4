"""`python -m text.bench`: every decoder (eagle and auto included) and transformers' own `generate`
(greedy, prompt lookup, assisted by the same self-draft) on the embedded SmolLM2, interleaved
prompt by prompt in one process. Reports forwards, tokens per forward, accepted tokens per step,
tokens/s, speedup over `ar`, exact match with `ar`, the draft's share of the decode time and
auto's choices, per prompt group (the held-out prompts of the EAGLE head's training set are a
group of their own); then a batch of 4 and sampling at temperature 0.7. `--write`: the greedy
batch-1 headline (pooled over the groups) into BENCHMARKS.md's text section (suite.runtime.bench_page).

`--group diffusion_gemma`: DiffusionGemma (block diffusion) on a tiny random config: the family's
generate, its sampler as our decoder, the block commit rules (text/bench_diffusion_gemma.py).

`--group agentic`: streams of agent-like requests (text/agentic_prompts.py: tool calls with JSON arguments,
code edits, multi-turn chat quoting earlier answers, extraction over similar documents), each request built
from the model's own earlier answers, through the scheduler as the server runs them; `suffix` with its global
tree and without, against `ar` and the other training-free drafters (wall time and the process's CPU time);
`--llama-cpp Q8_0` adds llama.cpp's own plain and prompt-lookup decoding of the same requests.

`--group structured`: structured output (suite.constraint) on extraction prompts with JSON schemas
(people, orders, events: nested objects, arrays, enums): each decoder constrained, against
constrained `ar` (one token per forward, no forced spans): forwards, tokens/s, the share of tokens
the grammar forced, the grammar's time per step, and how many outputs parse and validate.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from tqdm import tqdm

import suite
from suite import layer_truncated_draft

from .prompts import CHAT, GROUNDED, GROUPS, held_out_group

BENCH_DECODERS = tuple(suite.TEXT_DECODERS) + tuple(d for d in ("eagle", "auto") if d not in suite.TEXT_DECODERS)

STRUCTURED_DECODERS = ("ar", "auto", "eagle", "ngram", "lookahead")
AGENTIC_DECODERS = ("ar", "ngram", "token_recycling", "sam_decoding", "suffix", "auto")
PEER_DRAFTERS = ("ngram", "token_recycling", "sam_decoding")    # what `suffix` is held against


def count_forwards(model):
    """A counter of target forwards, also inside transformers' generate: it hooks the last decoder
    layer, which the self-draft (the first layers) never runs."""
    counter = {"n": 0}
    model.model.layers[-1].register_forward_hook(lambda *_: counter.__setitem__("n", counter["n"] + 1))
    return counter


def cut_at_eos(ids: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i + 1]
    return ids


def suite_runner(gen, name, options, sampling):
    def run(ids, mask, max_new):
        dec = gen.bench_decoder(name, **options)
        out = suite.generate(gen.target, ids, mask, decoder=dec, max_new_tokens=max_new, **sampling)
        return out.new_tokens, out.stats.num_forwards, out.stats
    return run


def hf_runner(model, counter, eos, **extra):
    def run(ids, mask, max_new):
        counter["n"] = 0
        seq = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                             eos_token_id=sorted(eos), pad_token_id=sorted(eos)[0], **extra)
        new = [cut_at_eos(row.tolist(), eos) for row in seq[:, ids.shape[1]:]]
        return new, counter["n"], None
    return run


def configs(gen, args, sampling=None):
    """(label, runner) pairs: our decoders, then transformers' generate variants (greedy only)."""
    model, eos = gen.model, gen.eos_token_ids
    draft = layer_truncated_draft(model, args.self_layers)
    options = {"speculative": {"draft_model": draft, "num_draft": args.num_draft}}
    out = [(name, suite_runner(gen, name, options.get(name, {}), sampling or {}))
           for name in args.decoders if sampling is None or name not in ("jacobi",)]
    if sampling is None and args.hf:
        counter = count_forwards(model)
        out += [("hf generate", hf_runner(model, counter, eos)),
                ("hf prompt lookup", hf_runner(model, counter, eos, prompt_lookup_num_tokens=10))]
        if args.assisted:
            out.append((f"hf assisted (self:{args.self_layers})", hf_runner(model, counter, eos, assistant_model=draft)))
    return out


def measure(gen, cases, runners, max_new, desc):
    """cases: [(group, prompts, chat)], each decoded by every runner in turn (interleaved)."""
    rows = defaultdict(lambda: defaultdict(float))
    for group, prompts, chat in tqdm(cases, desc=desc):
        ids, mask = gen.encode(prompts, chat=chat)
        reference = None
        for label, run in runners:
            t0 = time.perf_counter()
            new, forwards, stats = run(ids, mask, max_new)
            wall = time.perf_counter() - t0
            new = [cut_at_eos(n, gen.eos_token_ids) for n in new]
            reference = new if reference is None else reference
            r = rows[(group, label)]
            r["tokens"] += sum(len(n) for n in new)
            r["forwards"] += forwards
            r["time"] += wall
            r["exact"] += sum(a == b for a, b in zip(new, reference))
            r["prompts"] += len(new)
            if stats is not None:
                r["steps"] += len(stats.accepted_lengths)
                r["accepted"] += sum(n for step in stats.accepted_lengths for n in step)
                r["row_steps"] += sum(1 for step in stats.accepted_lengths for n in step if n)
                _add_draft_stats(r, stats)
    return rows


def _add_draft_stats(r, stats) -> None:
    """A run's drafting and decoding time and auto's choices, added to its row of the table."""
    r["draft_time"] += stats.draft_time_s
    r["decode_time"] += stats.wall_time_s
    for event, n in stats.events.items():
        if event.startswith("auto:"):
            r["auto " + event[5:]] += n


def _notes(r) -> str:
    """The draft's share of the decode time and auto's choices (share of its steps)."""
    notes = []
    if r["draft_time"]:
        notes.append(f"draft {100 * r['draft_time'] / max(r['decode_time'], 1e-9):.0f}%")
    choices = {k[5:]: v for k, v in r.items() if k.startswith("auto ")}
    total = sum(choices.values())
    if total:
        notes.append(", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(choices.items(), key=lambda kv: -kv[1])))
    return "; ".join(notes)


def table(rows, groups, labels, title, exact=True) -> str:
    head = ("| group | decoder | forwards | tok/forward | accepted/step | tok/s | speedup vs ar | "
            + ("exact = ar | " if exact else "") + "draft time, auto's choices |")
    lines = [f"**{title}**", "", head, "|" + "---|" * (head.count("|") - 1)]
    for group in groups:
        base = rows[(group, labels[0])]
        base_tps = base["tokens"] / base["time"]
        for label in labels:
            r = rows[(group, label)]
            tps = r["tokens"] / r["time"]
            acc = f"{r['accepted'] / r['row_steps']:.2f}" if r["row_steps"] else "–"
            ex = f"{int(r['exact'])}/{int(r['prompts'])} | " if exact else ""
            lines.append(f"| {group} | {label} | {int(r['forwards'])} | {r['tokens'] / r['forwards']:.2f} | {acc} | "
                         f"{tps:.1f} | {tps / base_tps:.2f}x | {ex}{_notes(r)} |")
    return "\n".join(lines)


def write_benchmarks(body: str, path: Path, key: str = "text") -> None:
    """`body` into BENCHMARKS.md's `key` section (suite.runtime.bench_page)."""
    from suite.runtime.bench_page import write_section
    write_section(key, body, path)


def headline(rows, labels, command: str) -> str:
    """The page's table: each suite decoder's pooled tokens/s over ar's, its forwards against ar's."""
    from suite.runtime.bench_page import Headline, headline_table, machine
    pooled = defaultdict(lambda: defaultdict(float))
    for (_, label), r in rows.items():
        for key in ("tokens", "time", "forwards", "exact", "prompts"):
            pooled[label][key] += r[key]
    base = pooled[labels[0]]
    lines = []
    for label in labels:
        if label in suite.DECODERS:
            r = pooled[label]
            speed = (r["tokens"] / r["time"]) / (base["tokens"] / base["time"])
            lines.append(Headline(label, speed, f"{int(r['forwards'])} (ar {int(base['forwards'])})",
                                  "" if r["exact"] == r["prompts"] else
                                  f"greedy output = `ar`'s on {int(r['exact'])}/{int(r['prompts'])} prompts"))
    return headline_table(lines, machine(), command)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m text.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="examples:\n  python -m text.bench --write\n"
                                       "  python -m text.bench --quick\n"
                                       "  python -m text.bench --decoders ar ngram --max-new-tokens 64")
    p.add_argument("--group", choices=("all", "structured", "agentic", "diffusion_gemma"), default="all",
                   help="structured: only the structured-output group (JSON schemas, against constrained ar); "
                        "agentic: tool calls, code edits, multi-turn chat, extraction (suffix with and without "
                        "its global tree); "
                        "diffusion_gemma: DiffusionGemma on a tiny random config, its sampler and the block commit "
                        "rules (python -m text.bench --group diffusion_gemma --help)")
    p.add_argument("--decoders", nargs="+", default=None, choices=BENCH_DECODERS,
                   help=f"default: every decoder ({', '.join(STRUCTURED_DECODERS)} for --group structured)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--self-layers", type=int, default=8, help="layers of the self-draft (speculative)")
    p.add_argument("--num-draft", type=int, default=3, help="draft tokens per step (speculative)")
    p.add_argument("--quick", action="store_true", help="one prompt per group, no batch/sampling runs")
    p.add_argument("--no-hf", dest="hf", action="store_false", help="skip transformers' generate")
    p.add_argument("--no-assisted", dest="assisted", action="store_false",
                   help="skip transformers' assisted generate (the slowest peer)")
    p.add_argument("--groups", nargs="+", default=None, help="prompt groups to run (default: all)")
    p.add_argument("--greedy-only", action="store_true", help="every prompt, greedy batch 1 only (no batch/sampling runs)")
    from suite.runtime.bench_page import PAGE, add_write_argument
    add_write_argument(p)
    p.add_argument("--out", type=Path, default=PAGE, help="the page --write writes (default: BENCHMARKS.md)")
    p.add_argument("--peers", action="store_true", help="instead: ar against transformers' generate and llama.cpp "
                                                        "(python -m text.bench --peers --help)")
    p.add_argument("--step", action="store_true", help="instead: the fixed step against free widths "
                                                       "(python -m text.bench --step --help)")
    p.add_argument("--memory", action="store_true", help="instead: resident memory of GGUF files on the llama.cpp "
                                                         "engine (python -m text.bench --memory --help)")
    p.add_argument("--llama-cpp", nargs="+", default=[], metavar="TYPE",
                   help="--group agentic: also llama.cpp's own plain and prompt-lookup decoding (llama-cpp-python, "
                        "greedy, JSON schemas through its grammar) of the embedded model as a TYPE GGUF (F32, Q8_0, "
                        "...: text.gguf_quantize), where llama-cpp-python is installed")
    p.add_argument("--keep-cost", dest="refresh_cost", action="store_false",
                   help="reuse the cached cost curves (default: measure them again, under this run's load)")
    args = p.parse_args(argv)
    if args.decoders is None:
        args.decoders = list({"structured": STRUCTURED_DECODERS, "agentic": AGENTIC_DECODERS}.get(args.group,
                                                                                                  BENCH_DECODERS))
    if "ar" in args.decoders:
        args.decoders.remove("ar")
    args.decoders.insert(0, "ar")
    return args


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--peers" in argv:            # ar against transformers' generate and llama.cpp (text/bench_peers.py)
        from .bench_peers import main as peers
        return peers([a for a in argv if a != "--peers"])
    if "--memory" in argv:           # resident memory of GGUF files on the llama.cpp engine (text/bench_memory.py)
        from .bench_memory import main as memory
        return memory([a for a in argv if a != "--memory"])
    if "--step" in argv:             # the fixed step against free widths (text/bench_step.py)
        from .bench_step import main as step
        return step([a for a in argv if a != "--step"])
    if "diffusion_gemma" in argv:    # --group diffusion_gemma: its own model (text/bench_diffusion_gemma.py)
        from .bench_diffusion_gemma import main as dgemma
        return dgemma(argv, write_benchmarks)
    import text
    args = parse_args(argv)
    torch.manual_seed(0)
    gen = text.load()
    if args.refresh_cost:
        from suite.cost import forward_cost
        for masked in (False, True):
            forward_cost(suite.as_adapter(gen.model), masked=masked, refresh=True)
    if args.group == "structured":
        return structured(gen, args, argv)
    if args.group == "agentic":
        return agentic(gen, args, argv)
    groups = dict(GROUPS)
    held = held_out_group()
    if held:
        groups["held-out"] = held
    if args.groups:
        unknown = sorted(set(args.groups) - set(groups))
        if unknown:
            raise SystemExit(f"unknown group(s) {', '.join(unknown)}; choose from: {', '.join(groups)}")
        groups = {g: groups[g] for g in args.groups}
    cases = [(g, [p], chat) for g, prompts in groups.items() for p, chat in
             (prompts[:1] if args.quick else prompts)]
    greedy = configs(gen, args)
    for _, run in greedy:   # warm up every path once (first calls pay one-off setup costs)
        run(*gen.encode(["Hello"], chat=True), 4)
    labels = [label for label, _ in greedy]
    flags = " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    greedy_rows = measure(gen, cases, greedy, args.max_new_tokens, "greedy")
    parts = [f"Command: `python -m text.bench{' ' + flags if flags else ''}`; {torch.get_num_threads()} threads, "
             f"max_new_tokens={args.max_new_tokens}, speculative draft = first {args.self_layers} of "
             f"{gen.model.config.num_hidden_layers} layers, {args.num_draft} draft tokens.",
             table(greedy_rows, list(groups), labels, "Greedy, batch 1")]
    if not (args.quick or args.greedy_only):
        batch = [("batch of 4", GROUNDED[:2] + CHAT[:2], True)]
        runners = configs(gen, args_without_hf(args))
        parts.append(table(measure(gen, batch, runners, args.max_new_tokens, "batch"), ["batch of 4"],
                           [label for label, _ in runners], "Greedy, one batch of 4 chat prompts"))
        sampled = configs(gen, args_without_hf(args), sampling={"temperature": 0.7, "seed": 0})
        cases_t = [("grounded, T=0.7", GROUNDED[:2], True), ("chat, T=0.7", CHAT, True)]
        parts.append(table(measure(gen, [(g, [p], c) for g, ps, c in cases_t for p in ps], sampled,
                                   args.max_new_tokens, "sampling"), [g for g, _, _ in cases_t],
                           [label for label, _ in sampled], "Sampling, temperature 0.7, seed 0", exact=False))
        if held:
            parts.append("Held-out prompts: " + "; ".join(f"`{p[:50]!r}`" for p, _ in held))
    body = "\n\n".join(parts)
    print(body)
    if args.write:
        write_benchmarks(headline(greedy_rows, labels, f"python -m text.bench{' ' + flags if flags else ''}"),
                         args.out)
        print(f"\nwrote {args.out}")


# -- the structured group ---------------------------------------------------------------------------------

STRICT = {"strict": True}     # closed objects (the extraction schemas list every key), as before JSON Schema's open
                              # default; the backend is chosen per schema (suite.constraint.check)


def structured_runs(gen, args) -> list[tuple[str, str, bool]]:
    """(label, decoder, forced spans): constrained ar first (one token per forward), each decoder with
    the grammar's forced tokens committed in parallel, and the default decoder without them."""
    from .generator import DEFAULT_DECODER
    runs = [("ar", "ar", False)] + [(d, d, True) for d in args.decoders if d != "ar"]
    if DEFAULT_DECODER in args.decoders:
        runs.append((f"{DEFAULT_DECODER}, no forced spans", DEFAULT_DECODER, False))
    return runs


def measure_structured(gen, cases, runs, max_new):
    """Every case decoded by every run in turn (interleaved); per run the totals."""
    from jsonschema import Draft202012Validator
    rows = defaultdict(lambda: defaultdict(float))
    for name, schema, prompt in tqdm(cases, desc="structured"):
        reference = None
        for label, decoder, forced in runs:
            t0 = time.perf_counter()
            res = gen.generate(prompt, decoder=decoder, chat=True, max_new_tokens=max_new, json_schema=schema,
                               forced_spans=forced, constraint=STRICT)
            wall = time.perf_counter() - t0
            reference = res.token_ids if reference is None else reference
            s, r = res.stats, rows[label]
            r["tokens"] += s.num_new_tokens
            r["forwards"] += s.num_forwards
            r["time"] += wall
            r["forced"] += s.num_forced_tokens
            r["mask"] += s.mask_time_s
            r["decode"] += s.wall_time_s
            r["exact"] += res.token_ids == reference
            r["parsed"] += res.json is not None and not list(Draft202012Validator(schema).iter_errors(res.json))
            r["prompts"] += 1
            r["eos"] += res.finish_reason == "eos"
    return rows


def structured_table(rows, runs) -> str:
    head = ("| decoder | forwards | vs ar forwards | tok/forward | tok/s | speedup vs ar | forced tokens | "
            "grammar ms/step (share) | parses + validates | exact = ar |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    base = rows[runs[0][0]]
    for label, _, _ in runs:
        r = rows[label]
        tps, base_tps = r["tokens"] / r["time"], base["tokens"] / base["time"]
        lines.append(f"| {label} | {int(r['forwards'])} | {r['forwards'] / base['forwards']:.2f}x | "
                     f"{r['tokens'] / r['forwards']:.2f} | {tps:.1f} | {tps / base_tps:.2f}x | "
                     f"{100 * r['forced'] / max(r['tokens'], 1):.0f}% | {1e3 * r['mask'] / r['forwards']:.2f} "
                     f"({100 * r['mask'] / max(r['decode'], 1e-9):.1f}%) | {int(r['parsed'])}/{int(r['prompts'])} | "
                     f"{int(r['exact'])}/{int(r['prompts'])} |")
    return "\n".join(lines)


def structured(gen, args, argv) -> None:
    from .prompts import STRUCTURED, structured_prompt
    cases = [(name, schema, structured_prompt(schema, text)) for name, schema, text in
             (STRUCTURED[::2] if args.quick else STRUCTURED)]
    runs = structured_runs(gen, args)
    for _, decoder, forced in runs:      # warm up every path once (first calls pay one-off setup costs)
        gen.generate("Hi", decoder=decoder, chat=True, max_new_tokens=4, json_schema=cases[0][1], forced_spans=forced,
                     constraint=STRICT)
    rows = measure_structured(gen, cases, runs, args.max_new_tokens)
    flags = " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    body = "\n\n".join([
        f"Command: `python -m text.bench{' ' + flags if flags else ''}`; {torch.get_num_threads()} threads, greedy, "
        f"chat template, max_new_tokens={args.max_new_tokens}, {len(cases)} extraction prompts "
        f"({', '.join(name for name, _, _ in cases)}; schemas with nested objects, arrays and enums, strings and "
        "arrays bounded, text/prompts.py). "
        "Every run is constrained by the prompt's schema in strict mode (suite.constraint, the backend chosen per "
        "schema); `ar` is constrained `ar` "
        "(one token per forward, no forced spans); the others commit the grammar's forced tokens in parallel. "
        "tok/s from each call's wall time (grammar compile included); grammar ms/step = time in the grammar "
        "(masks, matchers, forced spans) per forward and its share of the decode time; parses + validates = "
        "json.loads then jsonschema; exact = ar: the same tokens as constrained ar.",
        structured_table(rows, runs)])
    print(body)
    if args.write:
        pooled = {("structured", label): r for label, r in rows.items()}
        write_benchmarks(headline(pooled, [label for label, _, _ in runs],
                                  f"python -m text.bench{' ' + flags if flags else ''}"), args.out, "text-structured")
        print(f"\nwrote {args.out}")


# -- the agentic group ------------------------------------------------------------------------------------

def agentic_runs(gen, args) -> list[tuple[str, str, dict]]:
    """(label, decoder, options): each decoder as named; `suffix` also without its global tree. `suffix` and
    `auto` each get a global tree of their own, empty at the start (what this bench's earlier requests
    taught it, not the other runs' answers to the same request)."""
    runs = []
    for name in args.decoders:
        runs.append((name, name, gen.bench_options(name)))       # auto's other candidates: the model's options
        if name == "suffix":
            runs.append(("suffix, no global tree", "suffix", {"global_tree": None}))
    for kind in getattr(args, "llama_cpp", None) or ():
        from .bench_peers import llama_cpp_runner
        from .gguf_quantize import embedded_gguf
        path = embedded_gguf(kind)
        for lookup in (False, True):
            runs.append((f"llama.cpp {kind}{', prompt lookup' if lookup else ''}",
                         llama_cpp_runner(path, torch.get_num_threads(), lookup, frozenset(gen.eos_token_ids)), {}))
    return runs


def run_session(gen, system, turns, decoder, options, max_new) -> list[tuple[list[int], float, object, float]]:
    """Each turn of a session in order, its prompt the system message, the earlier turns and the model's
    answers to them (chat template), its JSON schema (if any) enforced without forced spans (every
    decoder's gain is its drafts'): (new tokens, wall seconds, stats, the process's CPU seconds) per turn (on a
    shared core the CPU seconds move less with the other jobs' load than the wall time). `decoder` may be a peer's
    run(ids, max_new, schema) (llama.cpp's own decoding: no stats, its schema through its own grammar)."""
    history = [{"role": "system", "content": system}] if system else []
    out = []
    for user, schema in turns:
        history.append({"role": "user", "content": user})
        ids = gen.chat_row(history)
        c0 = time.process_time()
        if callable(decoder):
            t0 = time.perf_counter()
            tokens, stats = decoder(ids, max_new, schema), None
        else:
            grammar = gen.grammar(schema, **STRICT) if schema is not None else None
            t0 = time.perf_counter()
            res = gen.submit_rows([ids], decoder, max_new, grammar=grammar, forced_spans=False, **options).result()
            tokens, stats = res.new_tokens[0], res.stats
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        new = cut_at_eos(tokens, gen.eos_token_ids)
        history.append({"role": "assistant", "content": gen.decode(new)})
        out.append((new, wall, stats, cpu))
    return out


def measure_agentic(gen, groups, runs, max_new) -> dict:
    """Every session of every group by every run in turn (interleaved by session); per (group, label) totals."""
    rows = defaultdict(lambda: defaultdict(float))
    jobs = [(g, system, turns) for g, (system, sessions) in groups.items() for turns in sessions]
    for group, system, turns in tqdm(jobs, desc="agentic"):
        reference = None
        for label, decoder, options in runs:
            turns_out = run_session(gen, system, turns, decoder, options, max_new)
            reference = reference or [t[0] for t in turns_out]
            for key in (group, "all"):
                r = rows[(key, label)]
                for (new, wall, stats, cpu), ref in zip(turns_out, reference):
                    r["tokens"] += len(new)
                    r["time"] += wall
                    r["cpu"] += cpu
                    r["exact"] += new == ref
                    r["prompts"] += 1
                    if stats is not None:          # a peer's run (llama.cpp) counts no forwards
                        r["forwards"] += stats.num_forwards
                        _add_draft_stats(r, stats)
    return rows


def agentic_table(rows, groups, labels) -> str:
    head = ("| group | decoder | forwards | tok/forward | tok/s | speedup vs ar | vs best of "
            + "/".join(PEER_DRAFTERS) + " | CPU time: vs ar, vs best | exact = ar | draft time, auto's choices |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for group in groups:
        tps = {label: rows[(group, label)]["tokens"] / rows[(group, label)]["time"] for label in labels}
        tpc = {label: rows[(group, label)]["tokens"] / max(rows[(group, label)]["cpu"], 1e-9) for label in labels}
        peers = [tps[p] for p in PEER_DRAFTERS if p in tps]
        peers_cpu = [tpc[p] for p in PEER_DRAFTERS if p in tpc]
        for label in labels:
            r = rows[(group, label)]
            vs_peers = f"{tps[label] / max(peers):.2f}x" if peers else "–"
            cpu = f"{tpc[label] / tpc[labels[0]]:.2f}x, " + (f"{tpc[label] / max(peers_cpu):.2f}x" if peers_cpu else "–")
            fw = f"{int(r['forwards'])} | {r['tokens'] / r['forwards']:.2f}" if r["forwards"] else "– | –"
            lines.append(f"| {group} | {label} | {fw} | "
                         f"{tps[label]:.1f} | {tps[label] / tps[labels[0]]:.2f}x | {vs_peers} | {cpu} | "
                         f"{int(r['exact'])}/{int(r['prompts'])} | {_notes(r)} |")
    return "\n".join(lines)


def global_share(rows, groups) -> str:
    """How much of suffix's speedup over ar its global tree gave, per group: (with - without) / (with - 1); empty
    where `suffix` did not run (--decoders without it)."""
    parts = []
    if not all((group, label) in rows for group in groups for label in ("ar", "suffix", "suffix, no global tree")):
        return ""
    for group in groups:
        speed = {label: rows[(group, label)]["tokens"] / rows[(group, label)]["time"]
                 / (rows[(group, "ar")]["tokens"] / rows[(group, "ar")]["time"])
                 for label in ("suffix", "suffix, no global tree")}
        on, off = speed["suffix"], speed["suffix, no global tree"]
        share = f"{100 * (on - off) / (on - 1):.0f}%" if on > 1 else "–"
        parts.append(f"{group} {on:.2f}x with, {off:.2f}x without ({share} of the gain)")
    return "Global tree's share of `suffix`'s speedup: " + "; ".join(parts) + "."


def agentic(gen, args, argv) -> None:
    from .agentic_prompts import AGENTIC
    groups = {g: AGENTIC[g] for g in args.groups} if args.groups else dict(AGENTIC)
    if args.quick:
        groups = {g: (system, sessions[:1]) for g, (system, sessions) in groups.items()}
    runs = agentic_runs(gen, args)
    labels = [label for label, _, _ in runs]
    for _, decoder, options in runs:     # warm up every path once (with throwaway global trees: none is taught)
        warm = {**options, "global_tree": None} if decoder == "suffix" else options
        if callable(decoder):
            run_session(gen, None, [("Hi", AGENTIC["tool calls"][1][0][0][1])], decoder, {}, 4)
            continue
        if decoder == "auto":
            warm = {"options": {**options["options"], "suffix": {"global_tree": None}}}
        run_session(gen, None, [("Hi", AGENTIC["tool calls"][1][0][0][1])], decoder, warm, 4)
    rows = measure_agentic(gen, groups, runs, args.max_new_tokens)
    flags = " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    names = list(groups) + ["all"]
    turns = sum(len(t) for _, sessions in groups.values() for t in sessions)
    body = "\n\n".join([
        f"Command: `python -m text.bench{' ' + flags if flags else ''}`; {torch.get_num_threads()} threads, greedy, "
        f"batch 1, chat template, max_new_tokens={args.max_new_tokens}, {turns} requests in "
        f"{sum(len(s) for _, s in groups.values())} sessions (text/agentic_prompts.py), each built from the model's "
        "own earlier answers and run through the scheduler; tool calls and extraction constrained by their JSON "
        "schemas (strict, no forced spans for any decoder). `suffix` and `auto` start with an empty global "
        "tree of their own; `suffix, no global tree` drafts from the request's own tree only. tok/s from each "
        "request's wall time; CPU time: the process's CPU seconds per request (what a shared core's other jobs "
        "move less), its speedups over ar and over the best peer." + peers_note(args),
        agentic_table(rows, names, labels), global_share(rows, names)]).rstrip()
    print(body)
    if args.write:
        write_benchmarks(body, args.out, "text-agentic")
        print(f"\nwrote {args.out}")


def peers_note(args) -> str:
    """What the llama.cpp rows of the agentic table ran (empty without --llama-cpp)."""
    if not args.llama_cpp:
        return ""
    return (" llama.cpp rows: llama-cpp-python's greedy generate (plain, and with its LlamaPromptLookupDecoding, "
            f"10 tokens) on the embedded model as a {'/'.join(args.llama_cpp)} GGUF (text.gguf_quantize), schemas "
            "through its own grammar (its end of text counted as the model's); its forwards are not counted; "
            "exact = the same tokens as our ar.")


def args_without_hf(args):
    copy = argparse.Namespace(**vars(args))
    copy.hf = False
    return copy


if __name__ == "__main__":
    main()
