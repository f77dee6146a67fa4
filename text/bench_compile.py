"""`python -m text.bench_compile`: which `torch.compile` settings pay for the decode step on this machine.

For each setting (eager, and suite.models.compiled's named inductor settings), in a process of its
own started twice over one fresh inductor cache folder (first start: the full compile; second: what
the on-disk cache leaves to pay), on the embedded SmolLM2 over a static cache after a 256-token
context: the compile time of each decode width, the step time per width (fastest of `--repeats`,
thread CPU time at one thread, wall time otherwise; the same eager step timed in turn in the same
process gives the ratio) and so the cost curve, and the greedy tokens of
`ar` and each named lossless decoder on a few chat prompts: compiled `ar` against eager `ar`, and
each decoder against `ar` of the same setting.

    python -m text.bench_compile --threads 1
    python -m text.bench_compile --settings eager default freezing cpp_wrapper max-autotune --widths 1 2 4 8 16
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CONTEXT = 256


def child(args) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    import suite
    import text
    from suite.models.static_cache import StaticHFCausalLM
    from .bench_batching import chat_prompts
    gen = text.load(progress=False)
    widths = tuple(args.widths)
    setting = None if args.child == "eager" else args.child
    t0 = time.perf_counter()
    adapter = StaticHFCausalLM(gen.model, CONTEXT + 64, compiled_widths=() if setting is None else widths,
                               setting=setting)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    ids = torch.randint(100, 40000, (1, CONTEXT), generator=torch.Generator().manual_seed(0))
    step = primed_step(adapter, ids)
    first = {}
    for w in widths:
        t = time.perf_counter()
        step(w)
        first[w] = time.perf_counter() - t
    start_s = time.perf_counter() - t0
    # the same steps eagerly in this process, interleaved with the compiled ones (a ratio under one load)
    eager = StaticHFCausalLM(gen.model, CONTEXT + 64, compiled_widths=()) if setting is not None else adapter
    eager_step = primed_step(eager, ids)

    best = {w: float("inf") for w in widths}
    best_eager = dict(best)
    for _ in range(args.repeats):
        for w in widths:
            t = clock()
            step(w)
            best[w] = min(best[w], clock() - t)
            t = clock()
            eager_step(w)
            best_eager[w] = min(best_eager[w], clock() - t)
    prompts = chat_prompts(gen, args.prompts)
    tokens = {}
    for name in ["ar"] + [d for d in args.decoders if d != "ar"]:
        tokens[name] = [suite.generate(adapter, [p], decoder=gen.decoder(name), max_new_tokens=args.max_new_tokens,
                                       eos_token_id=[]).new_tokens[0] for p in prompts]
    return {"setting": args.child, "first": first, "start_s": start_s, "step": best, "eager": best_eager,
            "tokens": tokens}


def primed_step(adapter, ids):
    """A fresh cache of `adapter` holding the CONTEXT tokens `ids`, and a function that runs one decode
    step of width w over it and drops those w slots again (so every step sees the same context)."""
    import torch
    cache = adapter.new_cache(1)
    pos = torch.arange(CONTEXT)[None]
    with torch.no_grad():
        adapter(ids, pos, cache, None, logits_from=CONTEXT - 1)
    cache.append(pos, torch.ones(1, CONTEXT, dtype=torch.bool), dense=True)

    def step(w):
        p = torch.arange(CONTEXT, CONTEXT + w)[None]
        with torch.no_grad():
            adapter(ids[:, :w], p, cache, None)
        cache.append(p, torch.ones(1, w, dtype=torch.bool), dense=True)
        cache.drop_tail(w)
    return step


def main(argv=None) -> int:
    from suite.models.compiled import SETTINGS
    p = argparse.ArgumentParser(prog="python -m text.bench_compile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", nargs="+", default=["eager", "default", "freezing"], choices=("eager",) + SETTINGS)
    p.add_argument("--widths", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--decoders", nargs="+", default=["ngram", "jacobi"])
    p.add_argument("--inductor-cache", default=None, metavar="DIR",
                   help="keep each setting's inductor cache in DIR/<setting> (default: a fresh folder: a cold first start)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print("RESULT " + json.dumps(child(args)))
        return 0
    if "eager" not in args.settings:
        args.settings.insert(0, "eager")
    rows = {}
    for setting in args.settings:
        folder = (tempfile.mkdtemp(prefix=f"inductor-{setting}-") if args.inductor_cache is None   # cold, then warm
                  else os.path.join(args.inductor_cache, setting))
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=folder)
        starts = []
        for _ in range(1 if setting == "eager" else 2):
            cmd = [sys.executable, "-m", "text.bench_compile", "--child", setting] + [
                a for a in (argv if argv is not None else sys.argv[1:])]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(f"{setting}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
                break
            starts.append(json.loads(line[7:]))
            print(f"{setting}: start {len(starts)} done ({starts[-1]['start_s']:.0f} s)", file=sys.stderr, flush=True)
        if starts:
            rows[setting] = starts
    eager = rows["eager"][0]
    w1 = str(args.widths[0])
    head = ["setting", "first start s", "second start s", f"step w={w1} ms", "vs eager (same process)"] + [
        f"cost({w})" for w in args.widths[1:]] + ["ar = eager ar", "decoders = own ar"]
    lines = [f"Command: `python -m text.bench_compile {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             f"{args.threads} thread(s), step after {CONTEXT} cached tokens, {args.prompts} chat prompts x "
             f"{args.max_new_tokens} greedy tokens.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting, starts in rows.items():
        r = starts[-1]
        step = r["step"]
        n = len(r["tokens"]["ar"])
        same_ar = sum(a == b for a, b in zip(r["tokens"]["ar"], eager["tokens"]["ar"]))
        dec = ", ".join(f"{d} {sum(a == b for a, b in zip(t, r['tokens']['ar']))}/{n}"
                        for d, t in r["tokens"].items() if d != "ar")
        cells = [setting, f"{starts[0]['start_s']:.0f}", f"{starts[1]['start_s']:.0f}" if len(starts) > 1 else "",
                 f"{1000 * step[w1]:.1f}", f"{r['eager'][w1] / step[w1]:.2f}x"] + [
                 f"{step[str(w)] / step[w1]:.2f}" for w in args.widths[1:]] + [f"{same_ar}/{n}", dec]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
