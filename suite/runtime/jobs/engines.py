"""The engines a batch job runs on: this process (`run_local`, the worker's calls one at a time or
`worker.concurrency` at once) and a Ray Data actor pool (`run_ray`: `map_batches` over an
`ActorPoolStrategy`, joining a cluster or starting a local one listening on loopback only). Both
yield one `Outcome` per input, in any order; `run.run_batch` writes them."""
from __future__ import annotations

import os
import pickle
import socket
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from .items import BatchError, BatchJob, Item, Outcome, error_message


@dataclass
class Engine:
    name: str = "local"
    address: str | None = None
    workers: int = 2
    cpus_per_worker: float | None = None
    gpus_per_worker: float = 0.0
    batch_size: int = 4
    threads: int | None = None         # local engine: torch threads (None: leave them)


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


def set_threads(threads: int | None) -> None:
    if threads:
        import torch
        torch.set_num_threads(int(threads))


def worker_kwargs(job: BatchJob, threads: int | None) -> dict:
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
    set_threads(engine.threads)
    worker = job.worker(**worker_kwargs(job, engine.threads))
    yield from call_all(worker, items, job.fields)


class RayWorker:
    """The Ray Data UDF around a domain worker: built once per actor (torch threads = its CPUs),
    called on batches of rows {key, index, payload}; each row's error is caught into an error row."""

    def __init__(self, worker_cls: type, worker_args: dict, threads: int | None, fields: tuple[str, ...]):
        set_threads(threads)
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
                                                   "worker_args": worker_kwargs(job, threads),
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
