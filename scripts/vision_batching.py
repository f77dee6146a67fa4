"""Image and video requests through the prior's scheduler: N users calling at once (threads, one
label each, what the Image and Video tabs' concurrent users send) against the same calls one at a
time, the shipped sampling (seeded: every user's images must be the same both ways; BENCHMARKS.md
"Images and clips through the scheduler").

    python scripts/vision_batching.py [--what image|video] [--decoder ar] [--users 4] [--rounds 2]
"""
from __future__ import annotations

import argparse

import torch
from concurrent_rounds import rounds

import vision


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", choices=("image", "video"), default="image")
    p.add_argument("--decoder", default="ar")
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--frames", type=int, default=2, help="video: frames per clip")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.what == "image":
        pipe = vision.load_image_pipeline()
        call = lambda i: pipe([pipe.classes[i % len(pipe.classes)]], decoder=args.decoder, seed=i)   # noqa: E731
    else:
        pipe = vision.load_video_pipeline()
        call = lambda i: pipe([pipe.classes[i % len(pipe.classes)]], motion=pipe.motions[i % len(pipe.motions)],  # noqa: E731
                              num_frames=args.frames, decoder=args.decoder, seed=i)
    call(0)                                                         # warm-up
    rounds(call, list(range(args.users)), args.users, args.rounds, lambda a, b: torch.equal(a.tokens, b.tokens),
           f"{args.what} {args.decoder}, {args.users} users")


if __name__ == "__main__":
    main()
