"""The planner: the serving core's decisions, and nothing else (no thread, no forward). Each step
it decides which waiting requests start (first come, first served, under `max_rows` live rows),
which running batch each newcomer joins (its key: same decoder, options, sampling and stop rules),
whether a newcomer is prefilled inside that batch's next forward (fused) or by one of its own, how
many prompt tokens a prefill forward takes (one token budget, `max_tokens` = rows x width), and
which rows leave. `suite.serving.engine` runs what it decides.

vLLM V1's `schedule()` is the model: one budget, a plan per step; here a batch is per decoder key,
because rows of one batch run one decoder's propose/accept.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from ..cache import row_inputs_shape
from ..loop import DecodeState
from ..prefix_cache import HIT_EVENT
from .request import Request


@dataclass(eq=False)
class Batch:
    """One running batch: a DecodeState whose row r belongs to owners[r] = (request, its row)."""

    key: object
    decoder: object
    state: DecodeState
    owners: list[tuple[Request, int]]
    movable: bool = False       # finished rows leave (else the batch, one request, carries them to its end)
    index: int = 0

    @staticmethod
    def of(request: Request, movable: bool = False) -> "Batch":
        return Batch(request.key, request.decoder, request.state, [(request, r) for r in range(request.batch)],
                     movable)

    def absorb(self, other: "Batch") -> None:
        """Append `other`'s rows (started requests of the same key) after this batch's."""
        self.state.extend(other.state)
        self.owners += other.owners


@dataclass
class Placement:
    """Where a group of started newcomers of one key goes: `fused` into the running batch's next
    forward, or prefilled first (in one forward, or in chunks when `chunked`)."""

    group: Batch
    fused: bool
    chunked: bool


class Planner:
    """max_rows: live rows over all batches; max_tokens: tokens (rows x padded width) a prefill
    forward may take (longer prompts are prefilled in chunks of max_tokens // rows tokens a row)."""

    fuse_tokens = 4      # a newcomer's prompt this short rides in the running batch's next forward
                         # (a start token: OCR 200 lines, ar 153 -> 126 forwards)

    def __init__(self, adapter, max_rows: int = 16, max_tokens: int = 512, prefix_cache=None):
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.caps = adapter.capabilities
        self.max_rows, self.max_tokens = max_rows, max_tokens
        self.prefix_cache = prefix_cache        # suite.prefix_cache.PrefixCache of this model, or None (off)
        # newcomers prefilled by a forward of their own join once this many rows are free (or all that
        # wait fit), so a queue joins in groups (OCR, 200 lines, 32 rows, ar: 177 forwards joining every
        # freed row, 135 in groups of 8)
        self.join_rows = max(1, max_rows // 4)
        self._solo = itertools.count()          # keys of requests that never share a batch

    def admit(self, waiting: deque[Request], live: int) -> list[Request]:
        """Waiting requests to start, first come first served, while their rows fit under max_rows,
        once `join_rows` rows are free (a request over the cap runs alone once nothing else is live);
        cancelled ones are finished on the way."""
        out, waiting_rows = [], sum(r.batch for r in waiting)
        grouped = not self.fuses(waiting[0].state) if waiting else False
        if live and grouped and self.max_rows - live < min(self.join_rows, waiting_rows):
            return out
        while waiting:
            request = waiting[0]
            if request.cancelled:
                waiting.popleft().finish()
                continue
            if live and live + request.batch > self.max_rows:
                break
            out.append(waiting.popleft())
            live += request.batch
        return self._defer_shared(out, waiting)

    # -- prefix caching (suite.prefix_cache): which cached prefix each newcomer reuses ------------------

    def _defer_shared(self, admitted: list[Request], waiting: deque[Request]) -> list[Request]:
        """Requests of one burst sharing a long uncached prefix with an earlier one wait (queued again
        at the front) for its prefill, then reuse it."""
        if self.prefix_cache is None or len(admitted) < 2:
            return admitted
        wait = self.prefix_cache.defer([r.state.tokens if self.cacheable(r.decoder, r.state) else [[-1]]
                                        for r in admitted])
        waiting.extendleft(reversed([r for r, w in zip(admitted, wait) if w]))
        return [r for r, w in zip(admitted, wait) if not w]

    def reuse_prefix(self, request: Request) -> None:
        """The request's rows start from their longest cached prefixes (before it starts)."""
        if self.prefix_cache is None or not self.cacheable(request.decoder, request.state):
            return
        reused = sum(self.prefix_cache.reuse(request.state))
        if reused:
            request.stats.count(HIT_EVENT, reused)

    def store_prefix(self, batch: Batch, keep: list[int]) -> None:
        """Keep the K/V of the rows of `batch` not in `keep` (not cancelled, not failed): a group's
        prompts after their prefill, finished rows' prompts and outputs."""
        if self.prefix_cache is None or not self.cacheable(batch.decoder, batch.state):
            return
        kept = set(keep)
        rows = [i for i, (request, _) in enumerate(batch.owners)
                if i not in kept and not request.cancelled and request.error is None]
        if rows:
            self.prefix_cache.store(batch.state, rows)

    def cacheable(self, decoder, state: DecodeState) -> bool:
        """Rows of token ids whose rows move, through an adapter and decoder that take no whole prompt at
        once and no canvas."""
        return (self.movable(state) and bool(state.tokens) and bool(state.tokens[0])
                and isinstance(state.tokens[0][0], int) and not decoder.whole_prompt
                and not self.caps.whole_prompt and not self.caps.canvas)

    def place(self, started: list[Request]) -> list[Placement]:
        """Group started newcomers by key (and fused or not); prefilled groups first."""
        groups: dict[tuple, Batch] = {}
        for request in started:
            request.key = self.key(request)
            movable = self.movable(request.state)
            fused = movable and self.fuses(request.state)
            group = groups.get((request.key, fused))
            if group is None:
                groups[request.key, fused] = Batch.of(request, movable)
            else:
                group.absorb(Batch.of(request))
        return [Placement(group, fused, not fused and self.chunk(group) is not None)
                for (_, fused), group in sorted(groups.items(), key=lambda item: item[0][1])]

    def key(self, request: Request):
        """Requests with equal keys may share a batch: the same decoder and options, sampling and
        stop rules; a seeded sampled request whose decoder is not `batch_independent`, or a decoder
        that cannot move rows, gets a key of its own."""
        decoder, state = request.decoder, request.state
        p = state.params
        sampled = not p.greedy or decoder.always_samples      # draws even when greedy (a canvas sampler)
        if request.isolated or (sampled and p.seed is not None and not decoder.batch_independent) \
                or not self.movable(state):
            return ("solo", next(self._solo))
        try:
            hash(decoder)
            dec_key = decoder
        except TypeError:                       # options that do not hash (tensors): that object only
            dec_key = id(decoder)
        return (dec_key, p.temperature, p.top_k, p.top_p, state.eos_token_ids, state.max_length,
                row_inputs_shape(state.cache))

    def movable(self, state: DecodeState) -> bool:
        """Whether rows may leave and join `state`: its cache and decoder state move rows
        (`regroupable`) and the adapter holds nothing per row (`row_moves`)."""
        return state.regroupable and self.caps.row_moves

    def fuses(self, state: DecodeState) -> bool:
        """Whether a request prefills inside the running batch's next forward rather than in one of
        its own: when its prompts are at most `fuse_tokens` long (the wider forward costs less than a
        separate one; a long prompt would pad every running row), and an encoder-decoder's adapter
        can compute their cross-attention K/V first (`capabilities.fills_cross`)."""
        if max(len(state.pending(b)) for b in range(state.batch)) > self.fuse_tokens:
            return False
        return state.cache.encdec is None or self.caps.fills_cross

    def chunk(self, group: Batch) -> int | None:
        """Tokens a row of the next prefill chunk of `group`, or None when its prefill fits
        `max_tokens` in one forward (or cannot be chunked: frames of several codebooks, an
        encoder-decoder or canvas model, a fixed batch, an adapter or decoder that takes the whole
        prompt at once: a VLM reads its images with the whole prompt, zipar feeds it in its first step)."""
        state = group.state
        longest = max(len(state.pending(b)) for b in range(state.batch))
        if state.batch * longest <= self.max_tokens or not group.movable or not isinstance(state.tokens[0][0], int) \
                or state.cache.encdec is not None or self.caps.canvas or self.caps.whole_prompt \
                or group.decoder.whole_prompt:
            return None
        return max(1, self.max_tokens // state.batch)

    @staticmethod
    def leaving(batch: Batch) -> list[int] | None:
        """The rows of `batch` to keep when some leave (done, cancelled or failed), else None."""
        keep = [i for i, (request, _) in enumerate(batch.owners)
                if not batch.state.done[i] and not request.cancelled and not request.done]
        return None if len(keep) == len(batch.owners) else keep
