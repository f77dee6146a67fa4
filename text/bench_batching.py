"""`python -m text.bench_batching`: continuous batching against serial decoding and fixed batches.

The same chat prompts (the EAGLE head's held-out chat prompts), greedy, per decoder, four ways in
one process: `serial` (one request at a time, what a loop over prompts does), `fixed` (one batch of
all prompts through `suite.decode`: finished rows ride along until the last ends), `list` (all
submitted at once to the model's scheduler: finished rows leave) and `poisson` (requests arriving
at random, exponential gaps at --rate per second, joining the running batch). Reports throughput
(new tokens per second of the whole run), its ratio to `serial`, per-request latency (p50/p95,
submit to result), tokens per forward (all new tokens over the model's real forwards) and whether
every request's tokens equal its serial decode.

    python -m text.bench_batching --prompts 12 --decoders ar ngram jacobi lookahead
    python -m text.bench_batching --overhead      # the loop's share of a step, tiny model, 8 live rows
    python -m text.bench_batching --long-prompt   # a long prompt joining: its prefill whole vs in chunks
    python -m text.bench_batching --widths --decoders ar suffix auto --threads 1   # which step width pays by rows
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import threading
import time

import torch

import suite
from suite.runtime.training import exit_status
from suite.scheduler import Scheduler

DECODERS = ("ar", "ngram", "jacobi", "lookahead")


class Timed:
    """The adapter, counting its forwards and the seconds spent in them."""

    def __init__(self, inner):
        self.inner, self.calls, self.seconds = inner, 0, 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.inner(*args, **kwargs)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def chat_prompts(gen, n: int) -> list[list[int]]:
    from .prompts import CHAT
    import json
    from pathlib import Path
    path = Path(__file__).parent / "weights" / "eagle" / "held_out.json"
    texts = [p["text"] for p in json.loads(path.read_text()) if p["kind"] == "chat"] if path.exists() else []
    texts = (texts + list(CHAT))[:n]
    return gen.rows(texts, chat=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_serial(adapter, rows, decoder, max_new):
    sched, out, lat = Scheduler(adapter), [], []
    t0 = time.perf_counter()
    for r in rows:
        t = time.perf_counter()
        out.append(sched.generate([r], decoder=decoder, max_new_tokens=max_new).new_tokens[0])
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    sched.close()
    return out, wall, lat


def run_fixed(adapter, rows, decoder, max_new):
    t0 = time.perf_counter()
    out = suite.generate(adapter, rows, decoder=decoder, max_new_tokens=max_new).new_tokens
    wall = time.perf_counter() - t0
    return out, wall, [wall] * len(rows)


def run_scheduled(adapter, rows, decoder, max_new, gaps):
    sched = Scheduler(adapter, max_rows=max(16, len(rows)))
    reqs, submitted = [None] * len(rows), [0.0] * len(rows)
    t0 = time.perf_counter()

    def feed():
        for i, r in enumerate(rows):
            if gaps[i]:
                time.sleep(gaps[i])
            submitted[i] = time.perf_counter()
            reqs[i] = sched.submit([r], decoder=decoder, max_new_tokens=max_new)

    feeder = threading.Thread(target=feed)
    feeder.start()
    feeder.join()
    out, lat = [], []
    for i, req in enumerate(reqs):
        out.append(req.result().new_tokens[0])
    done = time.perf_counter()
    for i, req in enumerate(reqs):
        lat.append(req.finished_at - submitted[i])
    sched.close()
    return out, done - t0, lat


def bench(args) -> None:
    import text
    torch.set_num_threads(args.threads)
    gen = text.load()
    adapter = Timed(gen.adapter or suite.as_adapter(gen.model))   # the default path's (a fixed step in bf16: text.load)
    rows = chat_prompts(gen, args.prompts)
    rng = random.Random(0)
    gaps = [0.0] + [rng.expovariate(args.rate) for _ in rows[1:]]
    step = adapter.capabilities.step_width
    print(f"{len(rows)} chat prompts, {args.max_new_tokens} new tokens, greedy, {torch.get_num_threads()} threads, "
          f"{next(gen.model.parameters()).dtype}, {f'fixed step W={step}' if step else 'free widths'}; "
          f"poisson: {args.rate}/s", file=sys.stderr)
    lines = ["| decoder | mode | tok/s | x serial | p50 latency s | p95 latency s | forwards | tok/forward | same as serial |",
             "|---|---|---|---|---|---|---|---|---|"]
    for decoder in args.decoders:
        run_serial(adapter, rows[:1], decoder, 8)        # warm-up: the cost curve, the forms, first-call costs
        modes = {"serial": lambda: run_serial(adapter, rows, decoder, args.max_new_tokens),
                 "fixed": lambda: run_fixed(adapter, rows, decoder, args.max_new_tokens),
                 "list": lambda: run_scheduled(adapter, rows, decoder, args.max_new_tokens, [0.0] * len(rows)),
                 "poisson": lambda: run_scheduled(adapter, rows, decoder, args.max_new_tokens, gaps)}
        serial = None
        for mode, run in modes.items():
            adapter.calls = 0
            out, wall, lat = run()
            tokens = sum(map(len, out))
            if serial is None:
                serial = (out, tokens / wall)
            rate = tokens / wall
            lines.append(f"| {decoder} | {mode} | {rate:.1f} | {rate / serial[1]:.2f}x | {percentile(lat, 0.5):.2f} | "
                         f"{percentile(lat, 0.95):.2f} | {adapter.calls} | {tokens / max(adapter.calls, 1):.2f} | "
                         f"{'yes' if out == serial[0] else 'NO'} |")
            print(lines[-1], file=sys.stderr)
    print("\n".join(lines))


def overhead(args) -> None:
    """The scheduler's and loop's time beyond the forwards, with 8 rows live and rows leaving and
    joining (a tiny Llama: its forward is a few ms, the worst case for per-step bookkeeping)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    adapter = Timed(suite.as_adapter(LlamaForCausalLM(cfg).eval()))
    rng = random.Random(0)
    rows = [[rng.randrange(3, 256) for _ in range(rng.randrange(8, 40))] for _ in range(48)]
    budgets = [rng.randrange(8, 48) for _ in rows]
    lines = ["| decoder | forward s | total s | overhead vs forward |", "|---|---|---|---|"]
    for decoder in args.decoders:
        sched = Scheduler(adapter, max_rows=8)
        adapter.calls, adapter.seconds = 0, 0.0
        t0 = time.perf_counter()
        reqs = [sched.submit([r], decoder=decoder, max_new_tokens=b) for r, b in zip(rows, budgets)]
        for r in reqs:
            r.result()
        total = time.perf_counter() - t0
        sched.close()
        lines.append(f"| {decoder} | {adapter.seconds:.2f} | {total:.2f} | {(total - adapter.seconds) / adapter.seconds:.0%} |")
        print(lines[-1], file=sys.stderr)
    print("\n".join(lines))


def long_prompt(args) -> None:
    """A long prompt arriving while short chat requests decode: the running requests' longest wait
    between two of their steps, and the long request's time to its first token, with its prefill
    in one forward (max_tokens above its length) and in chunks of --max-tokens between steps."""
    import text
    torch.set_num_threads(args.threads)
    gen = text.load()
    adapter = suite.as_adapter(gen.model)
    short = chat_prompts(gen, 4)
    filler = " ".join(f"Item {i}: the {w} of the list." for i, w in enumerate(["first", "next", "last"] * 60))
    long = gen.rows([f"Summarise this list in one sentence. {filler}"], chat=True)[0][:args.long_tokens]
    print(f"4 chat requests x {args.max_new_tokens} new tokens decoding, then a {len(long)}-token prompt joins "
          f"(ar, greedy, {torch.get_num_threads()} threads)", file=sys.stderr)
    lines = ["| prefill | longest wait of a running request s | its p50 step gap s | long request: first token s | "
             "all done s | same tokens |", "|---|---|---|---|---|---|"]
    reference = None
    for label, cap in (("one forward", 10 ** 9), (f"chunks of {args.max_tokens} tokens", args.max_tokens)):
        sched = Scheduler(adapter, max_tokens=cap)
        sched.generate([short[0]], max_new_tokens=4)                        # warm-up
        t0 = time.perf_counter()
        running = [sched.submit([r], max_new_tokens=args.max_new_tokens, stream=True) for r in short]
        stamps = [[] for _ in running]

        def watch(i):
            for _ in running[i].steps():
                stamps[i].append(time.perf_counter())
        watchers = [threading.Thread(target=watch, args=(i,)) for i in range(len(running))]
        for w in watchers:
            w.start()
        while len(stamps[0]) < 8:                                           # the short ones are under way
            time.sleep(0.005)
        submitted = time.perf_counter()
        late = sched.submit([long], max_new_tokens=8, stream=True)
        next(s for s in late.steps() if s.committed[0])     # its first token
        first_token = time.perf_counter() - submitted
        out = [r.result().new_tokens[0] for r in running] + [late.result().new_tokens[0]]
        done = time.perf_counter() - t0
        for w in watchers:
            w.join()
        gaps = [b - a for st in stamps for a, b in zip(st, st[1:])]
        reference = reference or out
        lines.append(f"| {label} | {max(gaps):.3f} | {percentile(gaps, 0.5):.3f} | {first_token:.2f} | {done:.2f} | "
                     f"{'yes' if out == reference else 'NO'} |")
        print(lines[-1], file=sys.stderr)
        sched.close()
    print("\n".join(lines))


def agentic_turns(gen, n: int) -> list[list[int]]:
    """Up to n agentic turns (text/agentic_prompts.py, the first session of each group) as prompt ids, each
    with `ar`'s answers to the earlier turns of its session in its history: what an agent's requests copy from."""
    from .agentic_prompts import AGENTIC
    turns = []
    for system, sessions in AGENTIC.values():
        history = [{"role": "system", "content": system}] if system else []
        for user, _ in sessions[0]:
            history.append({"role": "user", "content": user})
            ids = gen.chat_row(history)
            turns.append(ids)
            answer = suite.generate(gen.adapter or gen.model, [ids], decoder="ar", max_new_tokens=64).new_tokens[0]
            history.append({"role": "assistant", "content": gen.decode(answer)})
    return [t for t in turns if len(t) < 1500][:n]


def widths(args) -> None:
    """Which step width pays at how many rows (suite.models.step.row_widths): decode-only tok/s (a run of
    --max-new-tokens less a run of one token, so prefill is not counted) of one batch through
    suite.generate on the fixed step at each width, for 1, 2, 4 and 8 rows of agentic turns (or chat
    prompts with --chat), each decoder with a fresh tree."""
    import text
    from suite.models.step import ANY_ROWS, fixed_step
    torch.set_num_threads(args.threads)
    gen = text.load()
    rows = chat_prompts(gen, 8) if args.chat else agentic_turns(gen, 8)
    lines = ["| rows | W | " + " | ".join(args.decoders) + " |", "|---|---|" + "---|" * len(args.decoders)]
    for n in (1, 2, 4, 8):
        batches = [rows[i:i + n] for i in range(0, max(len(rows), n), n)][:max(1, 4 // n)]
        for width in (8, 4, 2, 1):
            step = fixed_step(gen.model, width)
            step.capabilities = dataclasses.replace(step.capabilities, row_widths=((ANY_ROWS, width),))
            suite.generate(step, rows[:1], decoder="ar", max_new_tokens=4)                  # warm-up
            rates = []
            for name in args.decoders:
                tokens, seconds = 0, 0.0
                for batch in batches:
                    t0 = time.perf_counter()
                    suite.generate(step, batch, decoder="ar", max_new_tokens=1)
                    prefill = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    out = suite.generate(step, batch, decoder=gen.bench_decoder(name), max_new_tokens=args.max_new_tokens)
                    seconds += time.perf_counter() - t0 - prefill
                    tokens += out.stats.num_new_tokens - len(batch)
                rates.append(f"{tokens / seconds:.1f}")
            lines.append(f"| {n} | {width} | " + " | ".join(rates) + " |")
            print(lines[-1], file=sys.stderr)
    print("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m text.bench_batching", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--decoders", nargs="+", default=list(DECODERS), choices=suite.TEXT_DECODERS)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rate", type=float, default=2.0, help="poisson arrivals per second")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--overhead", action="store_true", help="the loop's share of a step on a tiny model instead")
    p.add_argument("--long-prompt", action="store_true",
                   help="a long prompt joining running requests: its prefill whole against in chunks (--max-tokens)")
    p.add_argument("--long-tokens", type=int, default=1500, help="--long-prompt: the long prompt's tokens")
    p.add_argument("--max-tokens", type=int, default=512, help="--long-prompt: the scheduler's prefill cap")
    p.add_argument("--widths", action="store_true",
                   help="which fixed step width pays at 1, 2, 4 and 8 rows (agentic turns; --chat: chat prompts)")
    p.add_argument("--chat", action="store_true", help="--widths: chat prompts instead of agentic turns")
    args = p.parse_args(argv)
    if args.prompts < 1 or args.rate <= 0 or args.long_tokens < 2 or args.max_tokens < 1:
        p.error("--prompts must be >= 1, --rate > 0, --long-tokens >= 2 and --max-tokens >= 1")
    run = overhead if args.overhead else long_prompt if args.long_prompt else widths if args.widths else bench
    return exit_status(run, args)


if __name__ == "__main__":
    sys.exit(main())
