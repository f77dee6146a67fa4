"""`run_batch`: a job's pending inputs through an engine, one progress bar, outputs written on the
driver (in input order when the job asks), one manifest row per input (see the package docstring)."""
from __future__ import annotations

import json
import sys
import time
from typing import Iterator

from .engines import Engine, run_local, run_ray
from .items import (BatchJob, Item, Outcome, Summary, compact_manifest, done_by_manifest, error_message, fingerprint,
                    manifest_row, read_manifest)


def run_batch(job: BatchJob, engine: Engine | None = None) -> Summary:
    """Run `job` on `engine` (default: local); see the docstring of suite.runtime.jobs."""
    from tqdm.auto import tqdm
    engine = engine or Engine()
    t0 = time.perf_counter()
    settings = job.settings if job.settings is not None else \
        {k: v for k, v in job.worker_args.items() if k != "threads"}
    fp = fingerprint(settings)
    previous = read_manifest(job.manifest)
    is_done = job.is_done or done_by_manifest(previous, fp)
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
            log.write(json.dumps(manifest_row(o, fp), ensure_ascii=False) + "\n")
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
            compact_manifest(job, outcomes, previous, fp)
    return Summary(job.name, outcomes, time.perf_counter() - t0, job.unit)
