"""The one decode loop: propose -> score (one forward) -> accept -> commit and discard K/V.

Every decoder of every modality runs through `decode_steps`; streaming UIs iterate it,
`decode` drains it. Per-request state lives in `DecodeState`, so a decoder object (a frozen
dataclass of hyperparameters) serves many requests at once. A decoder's own bookkeeping is typed:
one instance of the dataclass it declares per row (`state.rows`), and, where a step needs
something batch-wide (a draft model's cache, a running mean of its step time), one instance of
the dataclass it declares for that (`state.shared`). A step's data (`Draft`, `Acceptance`) live in
suite/draft.py, structured output's part of a step in suite/structured.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Protocol

import torch

from . import structured
from .cache import KVCache
from .draft import Acceptance, Canvas, Draft
from .inputs import RequestInputs
from .random_streams import RowStreams
from .sampling import SamplingParams
from .stats import DecodeStats

__all__ = ["Acceptance", "Canvas", "DecodeResult", "DecodeState", "Decoder", "Draft", "Step", "advance", "begin",
           "decode", "decode_steps", "forward_mask", "plain_causal", "prefill"]


@dataclass
class Step:
    index: int
    committed: list[list[int]]   # tokens each row committed in this forward (after EOS/budget cuts)
    draft_size: int              # slots scored per row in this forward
    done: list[bool]
    stats: DecodeStats           # the request's totals: as of this step from the scheduler (a snapshot), live from decode_steps
    forced: list[int] | None = None   # of each row's committed tokens, how many a grammar forced (suite.constraint)
    canvas_tokens: list[list[int]] | None = None   # decoders that fill a grid out of order (their `grids`):
                                                   # each row's grid, -1 where undecided (set by suite.scheduler)


@dataclass
class DecodeState:
    tokens: list[list[int]]               # committed tokens per row, prompt included
    cache: KVCache
    params: SamplingParams
    max_new_tokens: int
    eos_token_ids: frozenset[int] = frozenset()
    max_length: int | None = None         # model context; rows stop there
    streams: RowStreams | None = None     # the rows' random streams (suite.random_streams), from params.seed
    inputs: RequestInputs = field(default_factory=RequestInputs)   # typed request inputs (CTC drafts, priors)
    rows: list = field(default_factory=list)   # the decoder's per-row bookkeeping: one of its Row dataclass per row
    shared: Any = None                         # the decoder's batch-wide bookkeeping (its own dataclass), if any
    stats: DecodeStats = field(default_factory=DecodeStats)
    slots: int | None = None              # the step's token slots a row (suite.models.step.width_at); None: any

    def __post_init__(self):
        self.prompt_lengths = [len(t) for t in self.tokens]
        self.num_cached = [0] * len(self.tokens)
        self.done = [False] * len(self.tokens)
        self.budgets = [self.max_new_tokens] * len(self.tokens)   # new tokens each row may commit
        if self.streams is None:     # one key per row, on the cache's device (seed None: a random base)
            self.streams = RowStreams.seeded(self.params.seed, len(self.tokens), self.device)

    @property
    def batch(self) -> int:
        return len(self.tokens)

    @property
    def device(self) -> torch.device:
        """The adapter's device, where the cache's validity lives: every tensor of the request goes there."""
        return self.cache.valid.device

    def positions(self, rows=None) -> torch.Tensor:
        """(R,) the logical position each row (every row, or `rows`) decides next: its committed length."""
        lengths = [len(t) for t in self.tokens] if rows is None else [len(self.tokens[b]) for b in rows]
        return torch.tensor(lengths, dtype=torch.long, device=self.device)

    def pending(self, b: int) -> list[int]:
        """Committed tokens of row b whose K/V is not cached yet (the prompt, then the last token)."""
        return self.tokens[b][self.num_cached[b]:]

    def draft_slots(self, b: int) -> int | None:
        """Slots row b's next step has for drafted tokens: a fixed step's slots less its pending
        tokens; None: as many as the decoder likes."""
        return None if self.slots is None else max(self.slots - len(self.pending(b)), 0)

    @property
    def fixed_step(self) -> bool:
        """Whether the model sets a step's slots a row (suite.models.step). Drafts are chains there: on a
        fixed step a tree's node that reads its ancestors' keys past sibling slots sums its attention in
        another order than `ar`'s contiguous keys, so only a row's first path scores bitwise what `ar` scores."""
        return self.slots is not None

    def new_tokens(self, b: int) -> list[int]:
        return self.tokens[b][self.prompt_lengths[b]:]

    def per_live_row(self, commit_row) -> list[list]:
        """commit_row(b) for each row still decoding; [] for rows that are done."""
        return [[] if self.done[b] else commit_row(b) for b in range(self.batch)]

    def room(self, b: int) -> int:
        """How many more tokens row b may commit (max_new_tokens and the context both bound it)."""
        left = self.budgets[b] - len(self.new_tokens(b))
        if self.max_length is not None:
            left = min(left, self.max_length - len(self.tokens[b]))
        return max(left, 0)

    def commit(self, acc: Acceptance, scored: bool = True) -> list[list[int]]:
        """Append each row's tokens, cut at EOS and at its room; returns what was committed.
        scored=False: tokens committed without a forward (a decoder's `start`), no progress needed."""
        out, kept = [], acc.kept if acc.kept is not None else acc.keep.sum(1).tolist()
        for b, new in enumerate(acc.committed):
            if self.done[b]:
                out.append([])
                continue
            new = new[:self.room(b)]
            for i, t in enumerate(new):
                if t in self.eos_token_ids:
                    new = new[:i + 1]
                    break
            self.num_cached[b] += kept[b]
            self.tokens[b].extend(new)
            if scored and not new and not kept[b] and not acc.refining:
                raise RuntimeError(f"decoder made no progress on row {b}")
            self.done[b] = self.room(b) == 0 or (bool(new) and new[-1] in self.eos_token_ids)
            out.append(new)
        return out

    # -- rows leave and join (continuous batching: suite.scheduler) ------------------------------------

    PER_ROW = ("tokens", "prompt_lengths", "num_cached", "done", "budgets", "rows")

    def select(self, index: list[int]) -> None:
        """Keep only rows `index`, in that order, with their cache rows and the decoder's state
        (each row's own in `rows`; the batch-wide `shared` selects its rows too)."""
        for name in self.PER_ROW:
            values = getattr(self, name)
            setattr(self, name, [values[b] for b in index])
        self.cache.select(index)
        self.streams.select(index)
        if self.shared is not None:
            self.shared.select(index)
        self.inputs = self.inputs.select(index)

    def extend(self, other: "DecodeState") -> None:
        """Append the rows of `other` (a request of the same model, decoder, sampling and stop
        rules, started: `begin` ran on it) after this state's rows."""
        self.inputs = self.inputs.extend(other.inputs, self.batch, other.batch)
        for name in self.PER_ROW:
            getattr(self, name).extend(getattr(other, name))
        self.cache.extend(other.cache)
        self.streams.extend(other.streams)
        if self.shared is not None:
            self.shared.extend(other.shared)

    @property
    def regroupable(self) -> bool:
        """Whether rows may leave and join: the decoder's batch-wide state, if any, selects and
        extends rows, and so does the cache."""
        return all(hasattr(x, "select") and hasattr(x, "extend")
                   for x in (self.cache, self.shared) if x is not None)


class Decoder(Protocol):
    """`start` validates the request and fills `state.rows` (one of the decoder's own Row dataclass
    per row: guesses, pools, canvases, acceptance rates) and `state.shared` where it keeps
    batch-wide state; it may return tokens known before any forward."""
    name: ClassVar[str]
    requires: ClassVar[frozenset[str]]   # adapter capabilities, e.g. {"custom_mask"}

    def start(self, state: DecodeState) -> Acceptance | None: ...
    def propose(self, state: DecodeState) -> Draft: ...
    def accept(self, state: DecodeState, draft: Draft, logits: torch.Tensor) -> Acceptance: ...


def begin(decoder: Decoder, state: DecodeState) -> Step | None:
    """Start a request: the decoder validates it and makes its row state; the Step of the tokens
    it knows before any forward (committed without one), or None."""
    t0 = time.perf_counter()
    known = decoder.start(state)
    if not state.rows:      # a decoder that keeps no row state still has one (empty) slot per row
        state.rows = [None] * state.batch
    step = None
    committed = [[] for _ in range(state.batch)]
    if known is not None:
        committed = state.commit(known, scored=False)
    forced = None
    if state.inputs.constraints is not None:    # tokens the grammar forces before any forward
        forced = structured.follow(state, committed)
    if known is not None or (forced and any(forced)):
        state.stats.num_new_tokens += sum(len(c) for c in committed)   # not a forward: no accepted length
        step = Step(0, committed, 0, list(state.done), state.stats, forced)
    state.stats.wall_time_s += time.perf_counter() - t0
    return step


def advance(model, decoder: Decoder, state: DecodeState, index: int = 0) -> Step:
    """One step over the rows not done: propose, score (one forward), accept, commit and discard
    the rejected K/V. Structured output's part (suite.structured) is one hook around the decoder's.
    A model's `row_widths` set the step's slots a row (`state.slots`) by its rows; on a model whose steps
    have a fixed shape (`step_width`), a prompt not cached yet is prefilled first (`prefill`, in chunks of
    `prefill_width`), and every decode step scores one of its widths a row: the narrowest that holds the
    step's drafts, up to `state.slots`."""
    state.slots = step_width(model, state.batch)      # the step's rows decide its slots (suite.models.step)
    fixed = model.capabilities.step_width              # a fixed shape: drafts padded to one of its widths
    if fixed and any(state.num_cached[b] < state.prompt_lengths[b] - 1 for b in range(state.batch)
                     if not state.done[b]):
        return prefill(model, state, model.capabilities.prefill_width)
    t0 = time.perf_counter()
    grammar = structured.hook(state)
    draft = grammar.propose(decoder)
    width = step_width(model, state.batch, draft.tokens.shape[1]) if fixed else None
    logits, slots = _scored(model, state, draft, width)
    state.stats.num_forwards += 1
    grammar.mask(draft, logits)
    acc = grammar.accept(decoder, draft, logits)
    if slots is not None:
        _drop_rejected(state.cache, draft, acc, slots)
    committed = state.commit(acc)
    state.cache.compact(0.0 if width else 0.25)   # a fixed step: live slots always in front, as ar's are
    forced = grammar.follow(draft, acc, committed)
    _count(state, committed, t0)
    return Step(index, committed, int(draft.tokens.shape[1]), list(state.done), state.stats, forced)


def step_width(model, rows: int = 1, filled: int | None = None) -> int | None:
    """The token slots a row may score in a decode step of `rows` rows of `model` (its
    `capabilities.row_widths`: suite.models.step.width_at), or None: as many as its draft takes. `filled`:
    the slots the step's widest row fills; the narrowest of the model's widths that holds them
    (suite.models.step.fitted_width)."""
    from .models.step import fitted_width, width_at
    widths = model.capabilities.row_widths
    if widths is None:
        return None
    return width_at(widths, rows) if filled is None else fitted_width(widths, rows, filled)


def fixed_width(width: int, n: int) -> int:
    """The shape a draft of `n` slots runs at under a fixed step of `width`: `width` (drafts and forced
    spans are cut to the row's slots: DecodeState.draft_slots), or the next multiple of it for a wider one."""
    return width * -(-n // width)


def _scored(model, state: DecodeState, draft: Draft, width: int | None) -> tuple[torch.Tensor, slice | None]:
    """One forward of `draft`, padded to the fixed step shape when the model has one: the logits of its
    real slots, and the cache slots they took (a slice, or (B, N) per row on a fixed step's ragged rows;
    None for a canvas model, which records its own)."""
    n = draft.tokens.shape[1]
    wide = draft.padded(fixed_width(width, n)) if width else draft
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = score(model, state.cache, wide)
    state.stats.forward_time_s += time.perf_counter() - t0
    if wide is not draft:
        logits = logits[:, :n - draft.logits_from]
        draft.hidden = None if wide.hidden is None else wide.hidden[:, :n]
    if draft.canvas is not None:
        return logits, None
    slots = state.cache.append(wide.positions, wide.valid, dense=draft.causal)
    if wide is not draft:
        state.cache.drop_tail(wide.tokens.shape[1] - n)
        slots = slice(slots.start, slots.start + n) if isinstance(slots, slice) else slots[:, :n]
    return logits, slots


def score(model, cache: KVCache, draft: Draft) -> torch.Tensor:
    """The one forward of a step: the logits of `draft`'s slots from `logits_from` on; the target's
    hidden states go into `draft.hidden` when the draft wants them, a canvas model gets its layout."""
    extra = {"output_hidden": True} if draft.want_hidden else {}
    if draft.canvas is not None:
        extra["canvas"] = draft.canvas
    out = model(draft.tokens, draft.positions, cache, forward_mask(model, cache, draft),
                logits_from=draft.logits_from, **extra)
    if draft.want_hidden:
        out, draft.hidden = out
    return out


def decode_steps(model, decoder: Decoder, state: DecodeState) -> Iterator[Step]:
    """Yield one Step per target forward until every row is done (a fixed batch: suite.scheduler
    lets rows leave and join). wall_time_s counts decoding only, not the time the caller spends
    between steps."""
    first = begin(decoder, state)
    index = 0
    if first is not None:
        yield first
        index = 1
    while not all(state.done):
        yield advance(model, decoder, state, index)
        index += 1

def prefill(model, state: DecodeState, width: int) -> Step:
    """Cache up to `width` more pending tokens of each row (a long prompt's next chunk), keeping its
    last pending token for the decoder's own first step: one forward, nothing committed (chunked
    prefill, suite.scheduler). For rows of single token ids on a causal adapter. A model with a fixed
    step shape runs every chunk `prefill_width` wide."""
    t0 = time.perf_counter()
    take = [0 if state.done[b] else max(min(width, len(state.pending(b)) - 1), 0) for b in range(state.batch)]
    rows = [state.pending(b)[:n] for b, n in enumerate(take)]
    positions = [list(range(state.num_cached[b], state.num_cached[b] + n)) for b, n in enumerate(take)]
    draft = Draft.from_rows(rows, positions, device=state.device)
    draft.logits_from = draft.tokens.shape[1] - 1          # no logits are read: the least the adapter computes
    _scored(model, state, draft, model.capabilities.prefill_width)
    for b, n in enumerate(take):
        state.num_cached[b] += n
    state.stats.num_forwards += 1
    committed = [[] for _ in range(state.batch)]
    _count(state, committed, t0)
    return Step(len(state.stats.accepted_lengths), committed, int(draft.tokens.shape[1]), list(state.done), state.stats)


def _count(state: DecodeState, committed: list[list[int]], t0: float) -> None:
    state.stats.num_new_tokens += sum(len(c) for c in committed)
    state.stats.accepted_lengths.append([len(c) for c in committed])
    state.stats.wall_time_s += time.perf_counter() - t0


def _drop_rejected(cache: KVCache, draft: Draft, acc: Acceptance, slots: slice) -> None:
    """Drop the K/V of the new slots `acc` does not keep: nothing when it keeps every real slot;
    the common tail when every row keeps the same prefix of an unpadded draft (a crop, no holes);
    else mark them dead (holes, compacted later)."""
    if acc.kept is not None and acc.kept == draft.lengths:
        return
    if acc.kept is not None and draft.causal and min(acc.kept) == max(acc.kept):
        cache.drop_tail(draft.tokens.shape[1] - acc.kept[0])
        return
    cache.keep_new(slots, acc.keep)


def plain_causal(model, cache: KVCache, draft: Draft) -> bool:
    """Whether the forward scoring `draft` may pass `attention_mask=None` (the model's own causal
    mask), known on the host: the adapter takes it (`capabilities.plain_mask`), the cache has no holes, no
    past_mask narrows it and the draft is causal (`draft.causal`, or one slot per row: a slot always
    sees itself). The one place this is decided: adapters pass None through, never inspect a mask."""
    return ((draft.causal or draft.tokens.shape[1] == 1) and draft.past_mask is None and not cache.holes
            and model.capabilities.plain_mask)


def forward_mask(model, cache: KVCache, draft: Draft) -> torch.Tensor | None:
    """The attention_mask of the forward scoring `draft`: None when `plain_causal`, else the
    cache's (B, 1, N, S+N) mask (its live slots AND past_mask, then the draft's own mask)."""
    return None if plain_causal(model, cache, draft) else cache.attention_mask(draft.mask, draft.past_mask)


@dataclass
class DecodeResult:
    new_tokens: list[list[int]]
    stats: DecodeStats


def decode(model, decoder: Decoder, state: DecodeState) -> DecodeResult:
    for _ in decode_steps(model, decoder, state):
        pass
    return DecodeResult([state.new_tokens(b) for b in range(state.batch)], state.stats)
