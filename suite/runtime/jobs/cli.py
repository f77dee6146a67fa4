"""What every batch CLI shares: the engine flags (`add_batch_arguments`, `engine_from_args`) and
the exit status (`cli_exit`, `run_cli`: 0 done, 1 some inputs failed, 2 a user error, 130 interrupted)."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from .engines import Engine
from .items import BatchError, BatchJob
from .run import run_batch

ENGINES = ("local", "ray")


def add_batch_arguments(parser: argparse.ArgumentParser, batch_size: bool = True) -> None:
    """--engine, --ray-address, --workers, --cpus-per-worker, --gpus-per-worker (and --batch-size,
    unless the CLI has its own)."""
    g = parser.add_argument_group("batch engine")
    g.add_argument("--engine", choices=ENGINES, default="local",
                   help="local: this process (default); ray: a Ray Data actor pool")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="Ray cluster to join (default: $RAY_ADDRESS, else start a local one, listening on loopback only); 'auto' = the "
                        "cluster started here with `ray start --head`")
    g.add_argument("--workers", type=int, default=None, metavar="N",
                   help="--engine ray: actors, each loading the model once (default: 2)")
    g.add_argument("--cpus-per-worker", type=float, default=None, metavar="C",
                   help="--engine ray: CPUs per actor, also its torch threads (default: this machine's "
                        "cores / N on a local cluster, else 1)")
    g.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                   help="--engine ray: GPUs per actor (num_gpus; default 0)")
    if batch_size:
        g.add_argument("--batch-size", type=int, default=4, metavar="B",
                       help="--engine ray: inputs per Ray task (default 4)")



def engine_from_args(args: argparse.Namespace, threads: int | None = None, batch_size: int | None = None) -> Engine:
    workers = 2 if args.workers is None else args.workers
    size = batch_size if batch_size is not None else getattr(args, "batch_size", 4)
    if workers < 1 or size < 1:
        raise BatchError("--workers and --batch-size must be >= 1")
    if args.engine == "local" and (args.workers is not None or args.ray_address):
        raise BatchError("--workers and --ray-address need --engine ray")
    return Engine(args.engine, args.ray_address, workers, args.cpus_per_worker, args.gpus_per_worker, size,
                  threads)



def cli_exit(run: Callable[[], int], unit: str = "outputs") -> int:
    """A batch CLI's exit status around `run()` (which returns it): a user error (ValueError,
    FileNotFoundError) is one line and 2, no traceback; an interruption is 130, saying the
    finished `unit` are kept."""
    try:
        return run()
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: finished {unit} are kept; run again to resume", file=sys.stderr)
        return 130


def run_cli(job: BatchJob, engine: Engine | None = None) -> int:
    """`run_batch` for a CLI's main: the summary line (several inputs), and the exit status: 0 done,
    1 some inputs failed, 2 a user error (one line, no traceback), 130 interrupted."""
    def run() -> int:
        summary = run_batch(job, engine)
        if len(job.items) > 1:
            print(summary.line(), file=sys.stderr)
        return summary.exit_code
    return cli_exit(run)
