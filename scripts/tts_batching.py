"""TTS sentences through the scheduler: one at a time against `--concurrency` in flight (what the
TTS CLI's worker keeps), decode and codec included, the shipped sampling (seed 0); the codes of
every sentence must be the same both ways (BENCHMARKS.md "TTS sentences through the scheduler").

    python scripts/tts_batching.py [--sentences 20] [--decoder delay] [--rounds 2]
"""
from __future__ import annotations

import argparse

import torch
from concurrent_rounds import rounds

import speech

SENTENCES = ["Remove and return an item from the queue.", "Open the file and read every line.", "Yes.",
             "The quick brown fox jumps over the lazy dog.", "Return the number of items in the list.",
             "Good morning, how are you today?", "Hello there."]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=20)
    p.add_argument("--decoder", default="delay")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    tts = speech.load_tts()
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.sentences)]
    speak = lambda t: tts(t, decoder=args.decoder, seed=0)          # noqa: E731
    speak(texts[0])                                                 # warm-up
    rounds(speak, texts, args.concurrency, args.rounds, lambda a, b: a.codes.tolist() == b.codes.tolist(),
           f"{args.sentences} sentences, {args.decoder}")


if __name__ == "__main__":
    main()
