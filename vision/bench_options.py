"""What the image and video benches share on their command lines."""
from __future__ import annotations

import argparse

from suite.models.dtypes import add_dtype_argument
from suite.runtime.training import exit_status


def run_bench(p: argparse.ArgumentParser, argv, run) -> int:
    """The options the image and video benches share (sampling, Frechet distance, threads, weights,
    --json), then `run(args)` with its exit status."""
    p.add_argument("--guidance-scale", type=float, default=None)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--no-fd", action="store_true", help="skip the Frechet distance")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--weights", default=None)
    add_dtype_argument(p)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    return exit_status(run, args)
