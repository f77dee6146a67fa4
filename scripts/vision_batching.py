"""Image and video requests through the prior's scheduler: N users calling at once (threads, one
label each, what the Image and Video tabs' concurrent users send) against the same calls one at a
time, the shipped sampling (seeded: every user's images must be the same both ways; BENCHMARKS.md
"Images and clips through the scheduler").

    python scripts/vision_batching.py [--what image|video] [--decoder ar] [--users 4] [--rounds 2]
"""
from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import torch

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
    users = range(args.users)
    for r in range(args.rounds):
        t0 = time.perf_counter()
        serial = [call(i) for i in users]
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.users) as ex:
            together = list(ex.map(call, users))
        many = time.perf_counter() - t0
        same = all(torch.equal(a.tokens, b.tokens) for a, b in zip(serial, together))
        forwards = sum(x.stats.num_forwards for x in serial)
        print(f"round {r + 1}: {args.what} {args.decoder}, {args.users} users one at a time {one:.2f} s "
              f"({forwards} forwards), at once {many:.2f} s: {one / many:.2f}x the throughput "
              f"({many / one:.2f}x the time); tokens identical: {same}", flush=True)


if __name__ == "__main__":
    main()
