"""Lines/s of the OCR's parallel decoders against `ar` on the held-out lines, timed in alternation
(the figures of BENCHMARKS.md "OCR lines and ASR utterances through the scheduler").

    python scripts/ocr_batching.py [--lines 200] [--rounds 4]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from document import data
from document.ocr import load_ocr

DECODERS = ("ctc_speculative", "block_diffusion", "s2d2")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    ocr = load_ocr()
    images = [s.image for s in data.heldout_set(args.lines)]
    for name in ("ar",) + DECODERS:          # first-call costs are per shape: one batch untimed
        ocr(images[:32], decoder=name)
    ratios, rates = {d: [] for d in DECODERS}, {d: [] for d in ("ar",) + DECODERS}
    for _ in range(args.rounds):
        for name in DECODERS:
            t0 = time.perf_counter()
            ocr(images, decoder="ar")
            ar = time.perf_counter() - t0
            t0 = time.perf_counter()
            ocr(images, decoder=name)
            own = time.perf_counter() - t0
            ratios[name].append(ar / own)
            rates["ar"].append(len(images) / ar)
            rates[name].append(len(images) / own)
    for name in DECODERS:
        print(f"{name}: {statistics.median(ratios[name]):.2f}x ar's lines/s (rounds "
              f"{', '.join(f'{r:.2f}' for r in ratios[name])}); {statistics.median(rates[name]):.1f} lines/s, "
              f"ar {statistics.median(rates['ar']):.1f}")


if __name__ == "__main__":
    main()
