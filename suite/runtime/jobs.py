"""Batch jobs over many inputs, in this process (`--engine local`) or on a Ray cluster
(`--engine ray`, Ray Data: `map_batches` over an `ActorPoolStrategy` pool of workers).

A CLI describes its job as a `BatchJob`: its inputs (`Item`: a key naming the input, the payload a
worker gets, the files that exist once it is done), a worker class and `write`. The worker class is
the only part that runs remotely: `Worker(**worker_args)` loads the model once (per actor), and
`worker(payload)` maps one input to one result dict (its keys: the job's `fields`, the row schema).
`write(item, result)` runs here, on the driver, and writes that input's outputs atomically
(suite.runtime.storage), so both engines write the same files from the same results. A worker
whose calls share forwards (its model's suite.scheduler.Scheduler) says how many inputs it takes
at once (`concurrency`): each engine (the local one, every Ray actor) keeps that many in flight.

`run_batch` lists what is pending (resume: a manifest row done with the same settings whose outputs
exist, or the job's own `is_done`), runs the workers, keeps one progress bar over inputs, appends
one manifest row per input (ok / skipped / error with the message) and returns a `Summary`. A
failing input is an error row naming it, never a stopped job or a dropped Ray block; a worker
process that dies is restarted by Ray and its rows retried; rows that arrive twice are written once.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .storage import write_text

ENGINES = ("local", "ray")


class BatchError(ValueError):
    """A user error of the batch engine (Ray missing, cluster unreachable, bad flags): one line."""


@dataclass
class Item:
    key: str                           # names the input in messages and in the manifest (e.g. its path)
    payload: dict                      # what the worker gets: plain picklable values
    outputs: tuple[Path, ...] = ()     # the files that exist once this input is done
    error: str | None = None           # known bad before any worker runs (a request that does not parse):
                                       # its error row comes from the driver, no worker is started for it


@dataclass
class BatchJob:
    name: str                          # the progress bar's label, e.g. "document"
    items: list[Item]
    worker: type                       # Worker(**worker_args); worker(payload) -> result dict
    worker_args: dict
    write: Callable[[Item, dict], None]            # on the driver: one input's outputs, atomically
    fields: tuple[str, ...] = ()       # the keys of a result (the row schema); checked on every row
    manifest: Path | None = None       # JSONL, one row per input (None: no manifest, no resume)
    settings: dict | None = None       # what the outputs depend on (default: worker_args less threads)
    is_done: Callable[[Item], bool] | None = None  # resume rule; default: manifest row with these settings
    ordered: bool = False              # write results in input order (outputs printed to stdout)
    echo_errors: bool = True           # print each error once, above the progress bar
    unit: str = "file"


@dataclass
class Outcome:
    item: Item
    status: str                        # "ok", "skipped" or "error"
    message: str = ""
    result: dict | None = None
    seconds: float = 0.0
    settings: str | None = None        # a skipped input: the fingerprint of the run that did it


@dataclass
class Summary:
    name: str
    outcomes: list[Outcome]
    seconds: float
    unit: str = "file"

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def done(self) -> int:
        return self.count("ok")

    @property
    def failed(self) -> int:
        return self.count("error")

    @property
    def throughput(self) -> float:
        """Inputs done per second of this run."""
        return self.done / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """0 when every input was read, 1 when some failed (user errors are 2, before a batch runs)."""
        return 1 if self.failed else 0

    def line(self) -> str:
        return (f"{self.name}: {self.done} done, {self.count('skipped')} skipped, {self.failed} failed "
                f"in {self.seconds:.1f} s ({self.throughput:.2f} {self.unit}/s)")


# -- flags ---------------------------------------------------------------------------------------

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


@dataclass
class Engine:
    name: str = "local"
    address: str | None = None
    workers: int = 2
    cpus_per_worker: float | None = None
    gpus_per_worker: float = 0.0
    batch_size: int = 4
    threads: int | None = None         # local engine: torch threads (None: leave them)


def engine_from_args(args: argparse.Namespace, threads: int | None = None, batch_size: int | None = None) -> Engine:
    workers = 2 if args.workers is None else args.workers
    size = batch_size if batch_size is not None else getattr(args, "batch_size", 4)
    if workers < 1 or size < 1:
        raise BatchError("--workers and --batch-size must be >= 1")
    if args.engine == "local" and (args.workers is not None or args.ray_address):
        raise BatchError("--workers and --ray-address need --engine ray")
    return Engine(args.engine, args.ray_address, workers, args.cpus_per_worker, args.gpus_per_worker, size,
                  threads)


# -- the manifest ---------------------------------------------------------------------------------

def fingerprint(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def read_manifest(path: Path | None) -> dict[str, dict]:
    """The last row per input of a manifest (a line cut short by a crash is ignored)."""
    rows: dict[str, dict] = {}
    if path is None or not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            rows[row["input"]] = row
        except (ValueError, KeyError, TypeError):
            continue
    return rows


def _row(o: Outcome, fp: str) -> dict:
    return {"input": o.item.key, "status": o.status, "message": o.message, "seconds": round(o.seconds, 3),
            "settings": o.settings or fp}


def _done_by_manifest(previous: dict[str, dict], fp: str) -> Callable[[Item], bool]:
    def done(item: Item) -> bool:
        row = previous.get(item.key)
        return (row is not None and row.get("status") in ("ok", "skipped") and row.get("settings") == fp
                and bool(item.outputs) and all(Path(p).exists() for p in item.outputs))
    return done


# -- running ---------------------------------------------------------------------------------------

def error_message(key: str, exc: BaseException) -> str:
    """One line naming the input: the message of a ValueError/OSError, else the exception's type too."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not isinstance(exc, (ValueError, OSError)):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if key in text else f"{key}: {text}"


def call_worker(worker, item: Item, fields: tuple[str, ...]) -> Outcome:
    t0 = time.perf_counter()
    try:
        result = worker(item.payload)
        missing = [f for f in fields if f not in result]
        if missing:
            raise TypeError(f"the worker's result lacks {', '.join(missing)}")
    except Exception as exc:   # one bad input never stops the batch
        return Outcome(item, "error", error_message(item.key, exc), seconds=time.perf_counter() - t0)
    return Outcome(item, "ok", result=result, seconds=time.perf_counter() - t0)


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch
        torch.set_num_threads(int(threads))


def _worker_args(job: BatchJob, threads: int | None) -> dict:
    args = dict(job.worker_args)
    if "threads" in args and threads:
        args["threads"] = int(threads)
    return args


def call_all(worker, items: list[Item], fields: tuple[str, ...]) -> Iterator[Outcome]:
    """`call_worker` over `items`, outcomes as they finish: one at a time, or `worker.concurrency`
    at once for a worker whose concurrent calls share forwards."""
    width = getattr(worker, "concurrency", 1)
    if width <= 1 or len(items) <= 1:
        yield from (call_worker(worker, item, fields) for item in items)
        return
    pool = ThreadPoolExecutor(min(width, len(items)), thread_name_prefix="job")
    try:
        futures = [pool.submit(call_worker, worker, item, fields) for item in items]
        for future in as_completed(futures):
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)      # interrupted: the inputs not started are dropped


def run_local(job: BatchJob, items: list[Item], engine: Engine):
    _set_threads(engine.threads)
    worker = job.worker(**_worker_args(job, engine.threads))
    yield from call_all(worker, items, job.fields)


class RayWorker:
    """The Ray Data UDF around a domain worker: built once per actor (torch threads = its CPUs),
    called on batches of rows {key, index, payload}; each row's error is caught into an error row."""

    def __init__(self, worker_cls: type, worker_args: dict, threads: int | None, fields: tuple[str, ...]):
        _set_threads(threads)
        self.worker = worker_cls(**worker_args)
        self.fields = fields

    def __call__(self, batch: dict) -> dict:
        out = {"index": [], "status": [], "message": [], "result": [], "seconds": []}
        items = [Item(str(key), pickle.loads(blob)) for key, blob in zip(batch["key"], batch["payload"])]
        index_of = {id(it): int(i) for it, i in zip(items, batch["index"])}
        for o in call_all(self.worker, items, self.fields):
            out["index"].append(index_of[id(o.item)])
            out["status"].append(o.status)
            out["message"].append(o.message)
            out["result"].append(pickle.dumps(o.result))
            out["seconds"].append(o.seconds)
        return out


def run_ray(job: BatchJob, items: list[Item], engine: Engine):
    ray, started = connect(engine.address, engine.workers, engine.cpus_per_worker)
    try:
        import ray.data
        import logging
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False          # one progress bar: ours
        ctx.print_on_execution_start = False
        cpus = engine.cpus_per_worker or _default_cpus(started, engine.workers)
        threads = max(1, int(cpus))
        rows = [{"index": i, "key": it.key, "payload": pickle.dumps(it.payload)} for i, it in enumerate(items)]
        ds = ray.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // engine.batch_size)))
        ds = ds.map_batches(RayWorker, batch_size=engine.batch_size, batch_format="numpy",
                            compute=ray.data.ActorPoolStrategy(size=engine.workers),
                            fn_constructor_kwargs={"worker_cls": job.worker,
                                                   "worker_args": _worker_args(job, threads),
                                                   "threads": threads, "fields": job.fields},
                            num_cpus=cpus, num_gpus=engine.gpus_per_worker or None)
        seen: set[int] = set()
        for row in _rows(ray, ds, engine):
            index = int(row["index"])
            if index in seen:      # a retried task may deliver a row twice: written once
                continue
            seen.add(index)
            yield Outcome(items[index], str(row["status"]), str(row["message"]), pickle.loads(row["result"]),
                          float(row["seconds"]))
        for index in sorted(set(range(len(items))) - seen):
            yield Outcome(items[index], "error", f"{items[index].key}: no result came back from the Ray workers")
    finally:
        if started:
            ray.shutdown()


def _rows(ray, ds, engine: Engine):
    try:
        yield from ds.iter_rows()
    except ray.exceptions.GetTimeoutError:
        raise BatchError(f"the Ray cluster has no room for {engine.workers} workers of "
                         f"{engine.cpus_per_worker or 1} CPUs: lower --workers or --cpus-per-worker") from None
    finally:
        del ds
        import gc
        gc.collect()                       # the finished pool's actors go now, not at the next collection


def _default_cpus(started: bool, workers: int) -> float:
    return max(1.0, (os.cpu_count() or 1) // workers) if started else 1.0


def connect(address: str | None, workers: int = 2, cpus_per_worker: float | None = None):
    """(ray, started_here): join the cluster at `address` (default $RAY_ADDRESS), else start a
    local one with room for the actors and Ray Data's own tasks. BatchError, one line, otherwise."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise BatchError("--engine ray needs Ray Data (pip install -r requirements/batch.txt); "
                         "or run with --engine local") from None
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _probe(address)
    if ray.is_initialized():               # this process already joined a cluster (tests, notebooks)
        return ray, False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    quiet = {"logging_level": "WARNING", "log_to_driver": False}
    if address:
        try:
            ray.init(address=address, **quiet)
        except Exception as exc:
            raise BatchError(f"cannot join the Ray cluster at {address!r} ({str(exc).splitlines()[0]}): start "
                             "one with `ray start --head`, fix --ray-address, or run with --engine local") from None
        return ray, False
    cores = os.cpu_count() or 1
    need = workers * (cpus_per_worker or max(1, cores // workers))
    # more logical CPUs than the actors take: Ray Data's own tasks must never wait behind them
    with loopback_only(ray):
        ray.init(num_cpus=int(max(need + 2, cores)), include_dashboard=False, **quiet)
    return ray, True


# Ray's switch for a one-machine cluster (its default on Windows and macOS): the node's address is
# 127.0.0.1, and then the GCS, the raylet and the workers listen on loopback only, not on every interface.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def loopback_only(ray):
    """While a local cluster starts: its node address is loopback, so nothing it serves is reachable from
    another machine (join a real cluster with --ray-address instead). Ray reads the switch from the
    environment when it is imported, so a process that imported it before also gets the module's flag."""
    from ray._private import ray_constants
    before_env, before_flag = os.environ.get(LOOPBACK_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV] = "0"                 # the processes the cluster starts inherit it
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = before_env


def _probe(address: str, timeout: float = 5.0) -> None:
    """A host:port address that does not answer is a quick, clear error (ray.init would retry)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise BatchError(f"--ray-address {address!r} is not HOST:PORT (or 'auto')")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise BatchError(f"no Ray cluster answers at {address!r} ({exc.strerror or exc}): start one with "
                         "`ray start --head`, fix --ray-address, or run with --engine local") from None


def run_batch(job: BatchJob, engine: Engine | None = None) -> Summary:
    """Run `job` on `engine` (default: local); see the module docstring."""
    from tqdm.auto import tqdm
    engine = engine or Engine()
    t0 = time.perf_counter()
    settings = job.settings if job.settings is not None else \
        {k: v for k, v in job.worker_args.items() if k != "threads"}
    fp = fingerprint(settings)
    previous = read_manifest(job.manifest)
    is_done = job.is_done or _done_by_manifest(previous, fp)
    outcomes: list[Outcome] = []
    pending: list[Item] = []
    for item in job.items:
        if is_done(item):
            outcomes.append(Outcome(item, "skipped", "already done",
                                    settings=previous.get(item.key, {}).get("settings", fp)))
        else:
            pending.append(item)
    log = None
    if job.manifest is not None:
        job.manifest.parent.mkdir(parents=True, exist_ok=True)
        log = open(job.manifest, "a", encoding="utf-8")
    bar = tqdm(total=len(job.items), initial=len(outcomes), desc=job.name, unit=job.unit, file=sys.stderr,
               disable=len(job.items) < 2)
    order = {id(it): i for i, it in enumerate(pending)}
    waiting: dict[int, Outcome] = {}
    next_index = 0

    def deliver(o: Outcome) -> None:
        if o.status == "ok":
            try:
                job.write(o.item, o.result)
            except Exception as exc:
                o.status, o.message, o.result = "error", error_message(o.item.key, exc), None
        if o.status == "error" and job.echo_errors:
            tqdm.write(f"error: {o.message}", file=sys.stderr)
        outcomes.append(o)
        if log is not None:
            log.write(json.dumps(_row(o, fp), ensure_ascii=False) + "\n")
            log.flush()
        bar.update(1)

    def outcomes_of(run) -> Iterator[Outcome]:
        yield from (Outcome(it, "error", error_message(it.key, ValueError(it.error))) for it in pending if it.error)
        runnable = [it for it in pending if not it.error]
        if runnable:
            yield from run(job, runnable, engine)

    try:
        for o in outcomes_of(run_ray if engine.name == "ray" else run_local):
            if not job.ordered:
                deliver(o)
                continue
            waiting[order[id(o.item)]] = o
            while next_index in waiting:
                deliver(waiting.pop(next_index))
                next_index += 1
    finally:
        bar.close()
        if log is not None:
            log.close()
            _compact(job, outcomes, previous, fp)
    return Summary(job.name, outcomes, time.perf_counter() - t0, job.unit)


def _compact(job: BatchJob, outcomes: list[Outcome], previous: dict[str, dict], fp: str) -> None:
    """Rewrite the manifest whole: one row per input of the job, in input order (inputs not reached
    keep their previous row)."""
    latest = {o.item.key: _row(o, fp) for o in outcomes}
    rows = [latest.get(it.key) or previous.get(it.key) for it in job.items]
    write_text(job.manifest, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows if r))


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
