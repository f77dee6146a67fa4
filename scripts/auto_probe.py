"""auto's exploration length: auto with `probe` 1 and 2 steps per candidate against its two seed
candidates and ar, per prompt group, greedy, every output checked equal to ar's (BENCHMARKS.md
"auto's exploration").

    python scripts/auto_probe.py [--groups held-out code chat input-grounded] [--max-new-tokens 96] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import text
from text.prompts import GROUPS

VARIANTS = [("ar", {}), ("sam_decoding", {}), ("token_recycling", {}), ("auto", {"probe": 2}), ("auto", {"probe": 1})]


def held_out(n: int = 8) -> list[tuple[str, bool]]:
    path = Path(text.__file__).parent / "weights" / "eagle" / "held_out.json"
    return [(p["text"], True) for p in json.loads(path.read_text()) if p["kind"] == "chat"][:n]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", nargs="+", default=["held-out", "code", "chat", "input-grounded"])
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    gen = text.load()
    gen.generate("hi", decoder="ar", max_new_tokens=8, chat=True)          # warm-up
    for group in args.groups:
        prompts = held_out() if group == "held-out" else GROUPS[group]
        best: dict[int, float] = {}
        for _ in range(args.rounds):
            reference = None
            for i, (decoder, options) in enumerate(VARIANTS):
                t0, tokens, texts = time.perf_counter(), 0, []
                for prompt, chat in prompts:
                    r = gen.generate(prompt, decoder=decoder, max_new_tokens=args.max_new_tokens, chat=chat, **options)
                    tokens, texts = tokens + r.stats.num_new_tokens, texts + [r.text]
                rate = tokens / (time.perf_counter() - t0)
                best[i] = max(best.get(i, 0.0), rate)
                reference = reference or texts
                if texts != reference:
                    raise SystemExit(f"{decoder} {options} differs from ar on {group}")
        print(group, " | ".join(f"{d}{o} {best[i] / best[0]:.2f}x ar" for i, (d, o) in enumerate(VARIANTS)), flush=True)


if __name__ == "__main__":
    main()
