"""Continuous batching: requests join a running batch between steps and finished rows leave it
at the step they finish, so concurrent requests share forwards instead of queueing behind each other.

    sched = Scheduler(model)                       # one stepping thread per loaded model
    req = sched.submit(rows, decoder="ngram", max_new_tokens=64)
    for step in req.steps():                       # this request's own steps, as they happen
        ...
    req.result().new_tokens, req.result().stats    # or: req.cancel()

A request is checked when it is submitted (`suite.prepare`: a bad option or a prompt over the
context fails that call alone). The stepping thread admits waiting requests first come, first
served, up to `max_rows` live rows, in groups (`join_rows`): it starts them (`begin`), prefills
them together in one forward, then appends their rows to the running batch of the same decoder
and settings; each step runs one forward per batch, and rows that finish (or whose request is
cancelled) leave it before the next. `request` + `enqueue` queue one job's parts together (they are
admitted together). Requests with different decoders, options, sampling parameters or stop tokens
run in batches of their own, stepped in turn on the same thread. A greedy request's tokens never
depend on other requests, nor do a seeded sampled one's: each row draws from its own stream
(suite.random_streams: uniforms keyed by the row's seed and index, the position they decide and
their purpose), so a seeded request shares batches where its decoder is `batch_independent` (its
rows also size drafts and windows from their own state: ar, block decoders, s2d2, ngram_prior,
ctc_speculative, and chain/tree decoders with `cost=None`); a decoder sized by a cost curve over
the live rows, or auto (it picks by measured speed), runs a seeded request in a batch of its own.
A request that fails at submission (a bad option, a prompt over the context) fails in its caller; an
error inside a forward shared by several requests drops that batch, and each of its requests runs
again alone from its prompts plus the tokens it was given (`_isolate`): the one whose rows fail
ends with the error, the others finish (a constrained request, whose grammar state is not
replayed, fails with the batch).
Decoders whose batch-wide state cannot move rows (`DecodeState.regroupable`), or adapters that hold
per-row inputs themselves (`supports_row_moves` False: conditioning tables), run each request as a
fixed batch. Per-row
inputs that travel in the cache (`cache.row_inputs`: an encoder-decoder's encoder states, a VLM's
image features, put there by the request's bound adapter, `submit(..., bound=...)`) move with
their rows.

vLLM's scheduler, SGLang's filter/merge and TGI's filter/concatenate retire and admit rows the
same way; the rows here carry any decoder's typed state (`DecodeState.rows`).
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from .api import prepare
from .cache import row_inputs_shape
from .models.adapters import as_adapter
from .loop import DecodeResult, DecodeState, Step, advance, begin, prefill
from .stats import DecodeStats

_FINISHED = object()     # end of a request's step stream


def batch_independent(decoder) -> bool:
    """Whether the decoder's rows never depend on their batch mates (its `batch_independent`): each
    row draws from its own stream (suite.random_streams) and sizes its drafts, windows and steps
    from its own state, so a seeded request may share forwards and still get its alone tokens."""
    return bool(getattr(decoder, "batch_independent", False))


class RequestCancelled(RuntimeError):
    """The request was cancelled before it finished."""


@dataclass(eq=False)
class Request:
    """A submitted request's handle: stream its steps, wait for its result, or cancel it."""

    state: DecodeState
    decoder: object
    key: object = None          # requests with equal keys share a batch (set once the request started)
    stream: bool = False
    stats: DecodeStats = field(default_factory=DecodeStats)
    new_tokens: list[list[int]] = field(default_factory=list)
    error: BaseException | None = None
    cancelled: bool = False
    finished_at: float | None = None      # perf_counter() when it finished
    forward_ids: list[int] = field(default_factory=list)    # the scheduler's forwards its rows were in
    isolated: bool = False                # running alone again after a forward it shared failed (`_isolate`)
    _replay: Callable | None = None       # its state anew from its prompts plus the tokens given so far

    def __post_init__(self):
        self.batch = self.state.batch
        self.new_tokens = [[] for _ in range(self.batch)]
        self._done = threading.Event()
        self._steps: queue.Queue = queue.Queue()
        self._row_done = [False] * self.batch

    def steps(self):
        """Yield this request's Steps (its own rows, in its own order) until it finishes; raises
        its error, or RequestCancelled."""
        while True:
            item = self._steps.get()
            if item is _FINISHED:
                break
            yield item
        self._raise()

    def result(self, timeout: float | None = None) -> DecodeResult:
        if not self._done.wait(timeout):
            raise TimeoutError("the request has not finished")
        self._raise()
        return DecodeResult([list(t) for t in self.new_tokens], self.stats)

    def cancel(self) -> None:
        """Stop the request: its rows leave the batch at the next step (a user who left the page)."""
        self.cancelled = True

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error
        if self.cancelled and not all(self._row_done):
            raise RequestCancelled("the request was cancelled")

    def _finish(self, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.error = error
        self.finished_at = time.perf_counter()
        self.state = None           # its rows and cache are the batch's, not this handle's, to keep
        self._steps.put(_FINISHED)
        self._done.set()


@dataclass(eq=False)
class _Batch:
    """One running batch: a DecodeState whose row r belongs to owners[r] = (request, its row)."""

    key: object
    decoder: object
    state: DecodeState
    owners: list[tuple[Request, int]]
    movable: bool = False       # finished rows leave (else the batch, one request, carries them to its end)
    index: int = 0

    @staticmethod
    def of(request: Request, movable: bool = False) -> "_Batch":
        return _Batch(request.key, request.decoder, request.state, [(request, r) for r in range(request.batch)],
                      movable)


class Scheduler:
    """The stepping thread of one model, its queue of requests and its running batches.
    max_rows caps the live rows over all batches (admission waits below it)."""

    gather_s = 0.02      # an idle scheduler waits this long for the rest of a burst before it starts
    idle_exit_s = 30.0   # the stepping thread ends after this long with nothing to do (the next submit starts
                         # another), so a model its owner let go (an app's evicted folder) is freed

    def __init__(self, model, max_rows: int = 16, name: str = "parasuite-scheduler", join_rows: int | None = None,
                 fuse_tokens: int = 4, max_tokens: int = 512, prefix_cache=None):
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.adapter = as_adapter(model)
        self.max_rows, self.name = max_rows, name
        # newcomers whose prefill is a forward of its own (prompts over fuse_tokens, `_fuses`) join a
        # running batch once this many rows are free (or all that wait fit), so a queue joins in
        # groups (OCR before fill_cross, 200 lines, 32 rows, ar: 177 forwards joining every freed
        # row, 135 in groups of 8); fused newcomers join as soon as a row is free (126 forwards)
        self.join_rows = max(1, max_rows // 4) if join_rows is None else join_rows
        self.fuse_tokens = fuse_tokens
        # tokens (rows x padded width) a newcomers' prefill forward may take: longer prompts are prefilled
        # in chunks of max_tokens // rows tokens a row, one chunk between the running batches' steps
        self.max_tokens = max_tokens
        self.prefix_cache = prefix_cache        # suite.prefix_cache.PrefixCache of this model, or None (off)
        self._waiting: deque[Request] = deque()
        self._batches: list[_Batch] = []
        self._prefilling: list[_Batch] = []     # newcomers whose long prompts are being prefilled in chunks
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._solo = itertools.count()          # keys of requests that never share a batch
        self.forwards_run = 0                   # forwards so far; a forward's id (Request.forward_ids) is its rank

    # -- the caller's side ------------------------------------------------------------------------

    def submit(self, input_ids, attention_mask=None, decoder="ar", max_new_tokens: int = 64,
               temperature: float = 0.0, top_k=None, top_p=None, seed=None, eos_token_id=None,
               inputs=None, stream: bool = False, bound=None, **options) -> Request:
        """Queue a request (the arguments of `suite.generate`); it is checked here, so a bad one
        raises in the caller and never reaches the batch. stream=True: `steps()` will be read.
        bound: the request's own adapter over this model, bound to inputs of its rows (an
        encoder-decoder's `adapter.for_images(pixels)`): its cache carries them, so the rows run
        through the scheduler's adapter beside any other request's."""
        request = self.request(input_ids, attention_mask, decoder, max_new_tokens, temperature, top_k, top_p,
                               seed, eos_token_id, inputs, stream, bound, **options)
        return self.enqueue([request])[0]

    def request(self, input_ids, attention_mask=None, decoder="ar", max_new_tokens: int = 64,
                temperature: float = 0.0, top_k=None, top_p=None, seed=None, eos_token_id=None,
                inputs=None, stream: bool = False, bound=None, **options) -> Request:
        """A checked request (`submit`'s arguments), not queued yet: `enqueue` queues several at once."""
        if self._closed:
            raise RuntimeError("the scheduler is closed")
        model = bound or self.adapter
        _, dec, state = prepare(model, input_ids, attention_mask, decoder, max_new_tokens,
                                temperature, top_k, top_p, seed, eos_token_id, inputs, **options)
        request = Request(state, dec, stream=stream)
        prompts = [list(t) for t in state.tokens]

        def replay(given: list[list], finished: list[bool]):
            """The request again from its prompts plus the tokens `given` so far (`_isolate`)."""
            left = [max_new_tokens - len(g) for g in given]
            _, again, fresh = prepare(model, [p + g for p, g in zip(prompts, given)], None, decoder, max(max(left), 1),
                                      temperature, top_k, top_p, seed, eos_token_id, inputs, **options)
            fresh.budgets, fresh.done = [max(n, 0) for n in left], list(finished)
            return again, fresh

        if state.inputs.constraints is None:         # a grammar's matcher state is not replayed
            request._replay = replay
        return request

    def enqueue(self, requests: list[Request]) -> list[Request]:
        """Queue requests made by `request` together: one job's parts (a page's lines) are admitted
        together, whatever the time it took to make them."""
        with self._wake:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._waiting.extend(requests)
            self._ensure_thread()
            self._wake.notify()
        return requests

    def generate(self, input_ids, **kwargs) -> DecodeResult:
        """Submit and wait: the request's result (what `suite.decode` returns for it alone)."""
        return self.submit(input_ids, **kwargs).result()

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread once the running requests finish (waiting up to `timeout` seconds for
        it); later submits are refused."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def live_rows(self) -> int:
        return sum(b.state.batch for b in self._batches + self._prefilling)

    def _key(self, decoder, state: DecodeState, isolated: bool = False):
        """Requests with equal keys may share a batch: the same decoder and options, sampling and
        stop rules; a seeded sampled request whose decoder is not `batch_independent`, or a decoder
        that cannot move rows, gets a key of its own."""
        p = state.params
        sampled = not p.greedy or getattr(decoder, "always_samples", False)   # draws even when greedy (a canvas sampler)
        if isolated or (sampled and p.seed is not None and not batch_independent(decoder)) or not self._movable(state):
            return ("solo", next(self._solo))
        try:
            hash(decoder)
            dec_key = decoder
        except TypeError:                       # options that do not hash (tensors): that object only
            dec_key = id(decoder)
        return (dec_key, p.temperature, p.top_k, p.top_p, state.eos_token_ids, state.max_length,
                row_inputs_shape(state.cache))

    def _movable(self, state: DecodeState) -> bool:
        """Whether rows may leave and join `state`: its cache and decoder state move rows
        (`regroupable`) and the adapter holds nothing per row (`supports_row_moves`)."""
        return state.regroupable and getattr(self.adapter, "supports_row_moves", False)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    # -- the stepping thread --------------------------------------------------------------------

    def _run(self) -> None:
        idle = True                         # nothing ran since the thread started or last slept
        while True:
            with self._wake:
                while not self._waiting and not self._batches and not self._prefilling and not self._closed:
                    if not self._wake.wait(self.idle_exit_s) and not self._waiting and not self._closed:
                        self._thread = None         # under the lock: a submit after this starts a new thread
                        return
                    idle = True
                if self._closed and not self._waiting and not self._batches and not self._prefilling:
                    return
                if idle:                    # requests sent together (a job's inputs) start together
                    self._wake.wait(self.gather_s)
                    idle = False
                admitted = self._admit()
            try:
                self._join(admitted)
                self._prefill_chunks()
                for batch in list(self._batches):
                    self._step(batch)
                self._retire()
            except Exception as e:          # noqa: BLE001: a bug here must not leave callers waiting
                for request in [r for b in self._batches + self._prefilling for r, _ in b.owners] + admitted:
                    request._finish(e)
                self._batches.clear()
                self._prefilling.clear()

    def _admit(self) -> list[Request]:
        """Waiting requests, first come first served, while their rows fit under max_rows, once
        `join_rows` rows are free (a request larger than the cap runs alone once nothing else is live)."""
        out, live = [], self.live_rows
        waiting_rows = sum(r.batch for r in self._waiting)
        grouped = not self._fuses(self._waiting[0].state) if self._waiting else False
        if live and grouped and self.max_rows - live < min(self.join_rows, waiting_rows):
            return out
        while self._waiting:
            request = self._waiting[0]
            if request.cancelled:
                self._waiting.popleft()._finish()
                continue
            if live and live + request.batch > self.max_rows:
                break
            out.append(self._waiting.popleft())
            live += request.batch
        return out

    def _join(self, admitted: list[Request]) -> None:
        """Start the admitted requests and append their rows to the running batch of their key:
        short prompts (`_fuses`) as they are, prefilled by that batch's next forward; the others
        prefilled first, those of one key together in one forward of their own."""
        admitted = self._defer_shared(admitted)
        groups: dict[tuple, _Batch] = {}
        for request in admitted:
            try:
                self._reuse_prefix(request)
                first = begin(request.decoder, request.state)
            except Exception as e:          # noqa: BLE001: the request fails alone
                request._finish(e)
                continue
            if first is not None:
                self._deliver(_Batch.of(request), first, 0.0)
            request.key = self._key(request.decoder, request.state, request.isolated)   # its decoder state exists now
            movable = self._movable(request.state)
            fused = movable and self._fuses(request.state)
            group = groups.get((request.key, fused))
            if group is None:
                groups[request.key, fused] = _Batch.of(request, movable)
            else:
                group.state.extend(request.state)
                group.owners += [(request, r) for r in range(request.batch)]
        for (key, fused), incoming in sorted(groups.items(), key=lambda item: item[0][1]):   # prefilled groups first
            if not fused and self._chunk(incoming) is not None:
                self._prefilling.append(incoming)         # a long prefill: in chunks, between steps
            else:
                self._enter(incoming, fused)

    def _enter(self, incoming: _Batch, fused: bool) -> None:
        """A group of newcomers joins the running batch of its key (or becomes it): prefilled first by
        a forward of its own, or (fused) by the running batch's next forward."""
        running = next((b for b in self._batches if b.key == incoming.key), None)
        if running is None or not fused:
            if not self._step(incoming):              # the prefill of every newcomer of the group
                return                                # failed: its requests failed or queued again
            self._store_prefix(incoming, [])          # their prompts, for the requests sharing them
        elif getattr(incoming.state.cache, "encdec", None) is not None:
            self.adapter.fill_cross(incoming.state.cache)
        if running is None:
            self._batches.append(incoming)
        else:
            running.state.extend(incoming.state)
            running.owners += incoming.owners

    def _chunk(self, group: _Batch) -> int | None:
        """Tokens a row of the next prefill chunk of `group`, or None when its prefill fits `max_tokens`
        in one forward (or cannot be chunked: frames of several codebooks, an encoder-decoder or canvas
        model, an adapter holding per-row state, an adapter or decoder that takes the whole prompt at
        once, `whole_prompt`: a VLM reads its images with the whole prompt, zipar feeds it in its
        first step)."""
        state = group.state
        longest = max(len(state.pending(b)) for b in range(state.batch))
        if state.batch * longest <= self.max_tokens or not group.movable or not isinstance(state.tokens[0][0], int) \
                or getattr(state.cache, "encdec", None) is not None or getattr(self.adapter, "canvas_model", False) \
                or getattr(group.decoder, "whole_prompt", False) or getattr(self.adapter, "whole_prompt", False):
            return None
        return max(1, self.max_tokens // state.batch)

    def _prefill_chunks(self) -> None:
        """One chunk of every long prefill; a group whose rest fits one forward joins its batch."""
        for group in list(self._prefilling):
            width = self._chunk(group)
            if width is None:
                self._prefilling.remove(group)
                self._enter(group, fused=False)
            elif not self._step(group, chunk=width):
                self._prefilling.remove(group)
            else:
                self._store_prefix(group, [])         # the prompts so far, for the requests sharing them

    def _fuses(self, state: DecodeState) -> bool:
        """Whether a request prefills inside the running batch's next forward rather than in one of
        its own: when its prompts are at most `fuse_tokens` long (a start token: OCR), the wider
        forward costs less than a separate one (a long prompt would pad every running row), and an
        encoder-decoder's adapter can compute their cross-attention K/V first (`fill_cross`)."""
        if max(len(state.pending(b)) for b in range(state.batch)) > self.fuse_tokens:
            return False
        return getattr(state.cache, "encdec", None) is None or getattr(self.adapter, "fills_cross", False)

    def _step(self, batch: _Batch, chunk: int | None = None) -> bool:
        """One forward of `batch` (chunk: a prefill chunk of that many tokens a row, `loop.prefill`);
        its steps delivered to their requests. On an error the batch is dropped: a request alone in it
        fails; requests that shared it run again each alone, from what they were given so far
        (`_isolate`), so only the one whose rows fail ends with the error. False when it failed."""
        if all(batch.state.done):
            return True
        t0 = time.perf_counter()
        shared = batch.state.stats
        before = (shared.num_draft_forwards, shared.draft_time_s, dict(shared.events), shared.mask_time_s)
        try:
            step = advance(self.adapter, batch.decoder, batch.state, batch.index) if chunk is None else \
                prefill(self.adapter, batch.state, chunk)
        except Exception as e:              # noqa: BLE001
            owners = list(dict.fromkeys(r for r, _ in batch.owners))
            for request in reversed(owners):          # queued back in their order, ahead of the waiting ones
                self._isolate(request, e) if len(owners) > 1 else request._finish(e)
            batch.state.done = [True] * batch.state.batch
            return False
        batch.index += 1
        drafting = DecodeStats(num_draft_forwards=shared.num_draft_forwards - before[0],
                               draft_time_s=shared.draft_time_s - before[1], mask_time_s=shared.mask_time_s - before[3],
                               events={k: n - before[2].get(k, 0) for k, n in shared.events.items()
                                       if n != before[2].get(k, 0)})
        self.forwards_run += 1
        self._deliver(batch, step, time.perf_counter() - t0, drafting, self.forwards_run - 1)
        return True

    def _reuse_prefix(self, request: Request) -> None:
        """Prefix caching, on admission: the request's rows start from their longest cached prefixes
        (suite.prefix_cache), for rows of token ids through an adapter that moves rows and reads no whole
        prompt at once."""
        if self.prefix_cache is None or not self._cacheable(request.decoder, request.state):
            return
        reused = sum(self.prefix_cache.reuse(request.state))
        if reused:
            request.stats.count("prefix_cache_hit_tokens", reused)

    def _store_prefix(self, batch: _Batch, keep: list[int]) -> None:
        """Prefix caching, on a row's finish or a group's prefill: the K/V of its rows not in `keep` (not
        cancelled, not failed) kept."""
        if self.prefix_cache is None or not self._cacheable(batch.decoder, batch.state):
            return
        kept = set(keep)
        rows = [i for i, (request, _) in enumerate(batch.owners)
                if i not in kept and not request.cancelled and request.error is None]
        if rows:
            self.prefix_cache.store(batch.state, rows)

    def _defer_shared(self, admitted: list[Request]) -> list[Request]:
        """Prefix caching, on admission: requests sharing a long uncached prefix with an earlier one of the
        same burst wait for its prefill (queued again at the front), then reuse it."""
        if self.prefix_cache is None or len(admitted) < 2:
            return admitted
        wait = self.prefix_cache.defer([r.state.tokens if self._cacheable(r.decoder, r.state) else [[-1]]
                                        for r in admitted])
        later = [r for r, w in zip(admitted, wait) if w]
        if later:
            with self._wake:
                self._waiting.extendleft(reversed(later))
        return [r for r, w in zip(admitted, wait) if not w]

    def _cacheable(self, decoder, state: DecodeState) -> bool:
        return (self._movable(state) and bool(state.tokens) and bool(state.tokens[0])
                and isinstance(state.tokens[0][0], int) and not getattr(decoder, "whole_prompt", False)
                and not getattr(self.adapter, "whole_prompt", False) and not getattr(self.adapter, "canvas_model", False))

    def _isolate(self, request: Request, error: BaseException) -> None:
        """After a shared forward failed: queue `request` again at the front, to run in a batch of its
        own from its prompts plus the tokens it was given so far (greedy or seeded: the tokens it
        would have got; unseeded: a continuation of what it streamed), or fail it with `error` where
        it cannot be replayed (already alone, or a grammar whose state is not replayed)."""
        if request.done or request.isolated or request._replay is None:
            request._finish(error)
            return
        try:
            request.decoder, request.state = request._replay(request.new_tokens, request._row_done)
        except Exception as e:              # noqa: BLE001: its replay cannot even start (e.g. at its context's end)
            request._finish(e)
            return
        request.isolated = True
        with self._wake:
            self._waiting.appendleft(request)

    def _deliver(self, batch: _Batch, step: Step, seconds: float, drafting: DecodeStats | None = None,
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
            request._row_done[r] = request._row_done[r] or done
        grid = getattr(batch.decoder, "canvas", None)     # a raster decoder's grids, for the requests that stream
        canvases = grid(batch.state) if callable(grid) and any(request.stream for request in mine) else None
        for request, rows in mine.items():
            committed = [rows.get(r, []) for r in range(request.batch)]
            stats = request.stats
            if step.draft_size:
                stats.num_forwards += 1
                request.forward_ids.append(forward)
                stats.accepted_lengths.append([len(c) for c in committed])
            stats.num_new_tokens += sum(len(c) for c in committed)
            if step.forced is not None:        # per row: the tokens its grammar forced (suite.constraint)
                stats.num_forced_tokens += sum(step.forced[i] for i in where[request].values())
            stats.wall_time_s += seconds
            if drafting is not None:
                stats.num_draft_forwards += drafting.num_draft_forwards
                stats.draft_time_s += drafting.draft_time_s
                stats.mask_time_s += drafting.mask_time_s
                for event, n in drafting.events.items():
                    stats.count(event, n)
            if request.stream:
                grids = None if canvases is None else [canvases[where[request][r]] if r in where[request] else None
                                                       for r in range(request.batch)]
                request._steps.put(Step(len(stats.accepted_lengths), committed, step.draft_size,
                                        list(request._row_done), stats, canvas_tokens=grids))

    def _retire(self) -> None:
        """Rows that are done, or whose request was cancelled or failed, leave their batch; a
        request whose rows all left finishes; an empty batch goes (a group being prefilled too)."""
        for batch in self._batches + self._prefilling:
            keep = [i for i, (request, _) in enumerate(batch.owners)
                    if not batch.state.done[i] and not request.cancelled and not request.done]
            if len(keep) == len(batch.owners):
                continue
            if batch.movable or not keep:       # rows that finish leave now (a fixed batch: all at its end)
                self._store_prefix(batch, keep)
            for request, _ in batch.owners:
                if all(request._row_done) or request.cancelled or request.done:
                    request._finish(request.error)
            if not keep:
                (self._batches if batch in self._batches else self._prefilling).remove(batch)
            elif batch.movable:
                batch.state.select(keep)
                batch.owners = [batch.owners[i] for i in keep]
            # else: a fixed batch (one request) carries its finished rows to the end
