"""The engine: runs what the planner decides, on one stepping thread per model. It starts admitted
requests (`loop.begin`), prefills and joins them, steps every running batch (one forward each,
`loop.advance`), delivers each request its share of a step, and isolates failures: an error inside a
forward shared by several requests drops that batch, and each of its requests runs again alone from
its prompts plus the tokens it was given (`replay`), so only the one whose rows fail ends with the
error (a constrained request, whose grammar state is not replayed, fails with the batch).
"""
from __future__ import annotations

import threading
import time
from collections import deque

from ..loop import Step, advance, begin, prefill
from ..stats import DecodeStats
from .planner import Batch, Placement, Planner
from .request import Request, RequestStatus


class Engine:
    """The stepping thread of one model over `planner`'s decisions; `submit` hands it requests."""

    gather_s = 0.02      # an idle engine waits this long for the rest of a burst before it starts
    idle_exit_s = 30.0   # the stepping thread ends after this long with nothing to do (the next submit starts
                         # another), so a model its owner let go (an app's evicted folder) is freed

    def __init__(self, adapter, planner: Planner, name: str):
        self.adapter, self.planner, self.name = adapter, planner, name
        self._waiting: deque[Request] = deque()
        self._batches: list[Batch] = []
        self._prefilling: list[Batch] = []     # newcomers whose long prompts are being prefilled in chunks
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.forwards_run = 0                   # forwards so far; a forward's id (Request.forward_ids) is its rank

    @property
    def live_rows(self) -> int:
        return sum(b.state.batch for b in self._batches + self._prefilling)

    def enqueue(self, requests: list[Request]) -> list[Request]:
        """Queue requests together: one job's parts (a page's lines) are admitted together."""
        with self._wake:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._waiting.extend(requests)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._wake.notify()
        return requests

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread once the running requests finish (waiting up to `timeout` seconds)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the stepping thread --------------------------------------------------------------------

    def _busy(self) -> bool:
        return bool(self._waiting or self._batches or self._prefilling)

    def _run(self) -> None:
        idle = True                         # nothing ran since the thread started or last slept
        while True:
            with self._wake:
                while not self._busy() and not self._closed:
                    if not self._wake.wait(self.idle_exit_s) and not self._waiting and not self._closed:
                        self._thread = None         # under the lock: a submit after this starts a new thread
                        return
                    idle = True
                if self._closed and not self._busy():
                    return
                if idle:                    # requests sent together (a job's inputs) start together
                    self._wake.wait(self.gather_s)
                    idle = False
                admitted = self.planner.admit(self._waiting, self.live_rows)
            try:
                self._tick(admitted)
            except Exception as e:          # noqa: BLE001 - a bug here must not leave callers waiting
                for request in [r for b in self._batches + self._prefilling for r, _ in b.owners] + admitted:
                    request.finish(e)
                self._batches.clear()
                self._prefilling.clear()

    def _tick(self, admitted: list[Request]) -> None:
        """One round: start and place the admitted requests, a chunk of every long prefill, one
        forward of every running batch, then the rows that finished leave."""
        for placement in self.planner.place(self._start(admitted)):
            if placement.chunked:
                self._prefilling.append(placement.group)
            else:
                self._enter(placement)
        for group in list(self._prefilling):
            width = self.planner.chunk(group)
            if width is None:
                self._prefilling.remove(group)
                self._enter(Placement(group, fused=False, chunked=False))
            elif not self._step(group, chunk=width):
                self._prefilling.remove(group)
            else:
                self.planner.store_prefix(group, [])   # the prompts so far, for the requests sharing them
        for batch in list(self._batches):
            self._step(batch)
        self._retire()

    def _start(self, admitted: list[Request]) -> list[Request]:
        """Start each admitted request (its decoder validates it and makes its row state), delivering
        the tokens it knows before any forward; a request that fails to start fails alone."""
        started = []
        for request in admitted:
            try:
                self.planner.reuse_prefix(request)
                first = begin(request.decoder, request.state)
            except Exception as e:          # noqa: BLE001 - the request fails alone
                request.finish(e)
                continue
            request.status = RequestStatus.RUNNING
            if first is not None:
                self._deliver(Batch.of(request), first, 0.0)
            started.append(request)
        return started

    def _enter(self, placement: Placement) -> None:
        """A group of newcomers joins the running batch of its key (or becomes it): prefilled first by
        a forward of its own, or (fused) by the running batch's next forward."""
        incoming = placement.group
        running = next((b for b in self._batches if b.key == incoming.key), None)
        if running is None or not placement.fused:
            if not self._step(incoming):              # the prefill of every newcomer of the group
                return                                # failed: its requests failed or queued again
            self.planner.store_prefix(incoming, [])   # their prompts, for the requests sharing them
        elif incoming.state.cache.encdec is not None:
            self.adapter.fill_cross(incoming.state.cache)
        if running is None:
            self._batches.append(incoming)
        else:
            running.absorb(incoming)

    def _step(self, batch: Batch, chunk: int | None = None) -> bool:
        """One forward of `batch` (chunk: a prefill chunk of that many tokens a row, `loop.prefill`);
        its steps delivered to their requests. On an error the batch is dropped: a request alone in it
        fails; requests that shared it run again each alone (`_isolate`). False when it failed."""
        if all(batch.state.done):
            return True
        t0 = time.perf_counter()
        shared = batch.state.stats
        before = (shared.num_draft_forwards, shared.draft_time_s, dict(shared.events), shared.mask_time_s,
                  shared.forward_time_s)
        try:
            step = advance(self.adapter, batch.decoder, batch.state, batch.index) if chunk is None else \
                prefill(self.adapter, batch.state, chunk)
        except Exception as e:              # noqa: BLE001
            owners = list(dict.fromkeys(r for r, _ in batch.owners))
            for request in reversed(owners):          # queued back in their order, ahead of the waiting ones
                self._isolate(request, e) if len(owners) > 1 else request.finish(e)
            batch.state.done = [True] * batch.state.batch
            return False
        batch.index += 1
        drafting = DecodeStats(num_draft_forwards=shared.num_draft_forwards - before[0],
                               draft_time_s=shared.draft_time_s - before[1], mask_time_s=shared.mask_time_s - before[3],
                               forward_time_s=shared.forward_time_s - before[4],
                               events={k: n - before[2].get(k, 0) for k, n in shared.events.items()
                                       if n != before[2].get(k, 0)})
        self.forwards_run += 1
        self._deliver(batch, step, time.perf_counter() - t0, drafting, self.forwards_run - 1)
        return True

    def _isolate(self, request: Request, error: BaseException) -> None:
        """After a shared forward failed: queue `request` again at the front, to run in a batch of its
        own from its prompts plus the tokens it was given so far (greedy or seeded: the tokens it
        would have got; unseeded: a continuation of what it streamed), or fail it with `error` where
        it cannot be replayed (already alone, or a grammar whose state is not replayed)."""
        if request.done or request.isolated or request.replay is None:
            request.finish(error)
            return
        try:
            request.decoder, request.state = request.replay(request.new_tokens, request.row_done)
        except Exception as e:              # noqa: BLE001 - its replay cannot even start (e.g. at its context's end)
            request.finish(e)
            return
        request.isolated = True
        request.status = RequestStatus.WAITING
        with self._wake:
            self._waiting.appendleft(request)

    def _deliver(self, batch: Batch, step: Step, seconds: float, drafting: DecodeStats | None = None,
                 forward: int | None = None) -> None:
        """Each request's share of a step: its rows' committed tokens, and its stats when one of its
        rows was in it: the forward, the step's time, and what the step drafted and counted
        (`drafting`: draft forwards and events serve every row of the forward alike)."""
        mine: dict[Request, dict[int, list[int]]] = {}
        where: dict[Request, dict[int, int]] = {}        # its row -> the batch's row
        for i, ((request, r), new, done) in enumerate(zip(batch.owners, step.committed, step.done)):
            mine.setdefault(request, {})[r] = new
            where.setdefault(request, {})[r] = i
            request.new_tokens[r].extend(new)
            request.row_done[r] = request.row_done[r] or done
        grids_of = batch.decoder.grids   # a raster decoder's grids, for the requests that stream
        canvases = grids_of(batch.state) if grids_of is not None and any(request.stream for request in mine) else None
        for request, rows in mine.items():
            committed = [rows.get(r, []) for r in range(request.batch)]
            _count(request.stats, step, committed, where[request], seconds, drafting)
            if step.draft_size:
                request.forward_ids.append(forward)
            if request.stream:
                grids = None if canvases is None else [canvases[where[request][r]] if r in where[request] else None
                                                       for r in range(request.batch)]
                request.put(Step(len(request.stats.accepted_lengths), committed, step.draft_size,
                                 list(request.row_done), request.stats.snapshot(), canvas_tokens=grids))

    def _retire(self) -> None:
        """Rows that are done, or whose request was cancelled or failed, leave their batch; a
        request whose rows all left finishes; an empty batch goes (a group being prefilled too)."""
        for batch in self._batches + self._prefilling:
            keep = self.planner.leaving(batch)
            if keep is None:
                continue
            if batch.movable or not keep:       # rows that finish leave now (a fixed batch: all at its end)
                self.planner.store_prefix(batch, keep)
            for request, _ in batch.owners:
                if all(request.row_done) or request.cancelled or request.done:
                    request.finish(request.error)
            if not keep:
                (self._batches if batch in self._batches else self._prefilling).remove(batch)
            elif batch.movable:
                batch.state.select(keep)
                batch.owners = [batch.owners[i] for i in keep]
            # else: a fixed batch (one request) carries its finished rows to the end


def _count(stats: DecodeStats, step: Step, committed: list[list[int]], rows: dict[int, int], seconds: float,
           drafting: DecodeStats | None) -> None:
    """Add a request's share of `step` to its stats: rows maps its rows to the batch's rows."""
    if step.draft_size:
        stats.num_forwards += 1
        stats.accepted_lengths.append([len(c) for c in committed])
    stats.num_new_tokens += sum(len(c) for c in committed)
    if step.forced is not None:        # per row: the tokens its grammar forced (suite.constraint)
        stats.num_forced_tokens += sum(step.forced[i] for i in rows.values())
    stats.wall_time_s += seconds
    if drafting is not None:
        stats.num_draft_forwards += drafting.num_draft_forwards
        stats.draft_time_s += drafting.draft_time_s
        stats.mask_time_s += drafting.mask_time_s
        stats.forward_time_s += drafting.forward_time_s
        for event, n in drafting.events.items():
            stats.count(event, n)
