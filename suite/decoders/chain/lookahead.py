"""Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using
Lookahead Decoding").

One forward carries three parts, kept apart by a custom attention mask:
  * the row's pending tokens (causal);
  * the lookahead branch: a 2-D Jacobi window of `level - 1` trajectories x `window` columns;
    column i of trajectory l sits at position last + 1 + i + l and sees trajectory 0 up to column
    i and its own column in trajectories 1..l. The newest trajectory's outputs form the next one,
    and each column yields an n-gram (key token + level - 1 continuation) for the pool;
  * the verification branch: up to `guesses` pooled n-grams that start after the last token.
The pool is also seeded from the prompt and the generated text. Verification walks the candidate
tree with multi-draft speculative sampling (point masses): greedy keeps the longest candidate
prefix equal to the argmax, so the output equals `ar` exactly; sampling stays lossless.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ...acceptance import accept_multi_draft
from ...cost import RunningMean, bind_cost
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import ACCEPT
from ...sampling import logits_to_probs
from .jacobi import init_guesses
from ..base import DecoderBase
from ..options import option


class _SlotLogits:
    """A row's logits indexed by draft slot (the forward skipped slots before `offset`)."""

    def __init__(self, logits: torch.Tensor, offset: int):
        self.logits, self.offset = logits, offset

    def __getitem__(self, slots):
        if isinstance(slots, int):
            return self.logits[slots - self.offset]
        return self.logits[[s - self.offset for s in slots]]


@dataclass
class RowLayout:
    num_pending: int = 0
    window_slots: list[list[int]] = field(default_factory=list)   # [level][column] -> draft slot
    candidates: list[list[int]] = field(default_factory=list)     # n-gram tokens
    candidate_slots: list[list[int]] = field(default_factory=list)


@dataclass
class LookaheadMeta:
    rows: list[RowLayout]    # each row's slots in the draft
    mode: str                # the step's drafting mode (one of Lookahead.MODES)


class NgramPool:
    """key token -> up to `size` continuations (most recent last)."""

    def __init__(self, size: int):
        self.size, self.pool = size, {}

    def add(self, key: int, continuation: tuple[int, ...]) -> None:
        entries = self.pool.setdefault(key, [])
        if continuation in entries:
            entries.remove(continuation)
        entries.append(continuation)
        del entries[:-self.size]

    def add_text(self, tokens: list[int], n: int, start: int = 0) -> None:
        for i in range(start, len(tokens) - n + 1):
            self.add(tokens[i], tuple(tokens[i + 1:i + n]))

    def get(self, key: int) -> list[tuple[int, ...]]:
        return list(reversed(self.pool.get(key, [])))


@dataclass
class LookaheadRow:
    trajectories: list[list[int]]   # the Jacobi window: level - 1 trajectories of `window` tokens
    pool: NgramPool                 # n-grams seen (prompt, generated text, trajectories)
    pooled_upto: int                # tokens of the row's text already added to the pool


@dataclass
class LookaheadShared:
    """Committed tokens per row per step of each drafting mode, as the slowest row progresses
    (hopeful priors; a plain step is taken to commit 1)."""
    full: RunningMean = field(default_factory=lambda: RunningMean(2.0))     # window + candidates
    verify: RunningMean = field(default_factory=lambda: RunningMean(2.0))   # candidates only

    def select(self, index: list[int]) -> None:
        """Rows leaving change nothing here: the gains are the batch's, not any row's."""

    def extend(self, other: "LookaheadShared") -> None:
        """Rows joining take this batch's gains: they measure the steps the joined batch will take
        (its modes at its size), while a newcomer's are its prior and its prefill (which commits one
        token a row whatever the mode). The gains only choose the drafting mode: outputs never
        depend on them (greedy equals `ar`; sampling is lossless in every mode)."""


@dataclass(frozen=True)
class Lookahead(DecoderBase):
    # small on purpose: on a CPU every extra slot costs (W, N, G = 3, 3, 3 scores at most 12 slots;
    # the paper's GPU setting 7, 5, 7 scores 56)
    window: int = option(3, 1)     # W: columns of the Jacobi window
    level: int = 3       # N: n-gram size (level - 1 trajectories)
    guesses: int = 3     # G: candidates verified per step (and pool entries per key)
    cost: Any = "auto"   # the target's cost curve: each step runs the mode that pays best (full step,
                         # verification branch only, or plain); None: always the full step

    name: ClassVar[str] = "lookahead"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})
    MODES: ClassVar[tuple] = ("full", "verify", "plain")

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's step (its mode) from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, model) -> "Lookahead":
        return bind_cost(self, model, masked=True)

    def start(self, state: DecodeState) -> None:
        if self.window < 1 or self.level < 2 or self.guesses < 0:
            raise ValueError("lookahead needs window >= 1, level >= 2, guesses >= 0")
        state.rows = [LookaheadRow([init_guesses(state, b, self.window, "prompt", draw=n) for n in range(self.level - 1)],
                                   NgramPool(self.guesses), state.prompt_lengths[b])
                      for b in range(state.batch)]
        for b, row in enumerate(state.rows):
            row.pool.add_text(state.tokens[b], self.level)
        state.shared = LookaheadShared()

    def _mode(self, state: DecodeState) -> str:
        """The step's mode with the best expected tokens per second under the cost curve (a fixed
        step's slots too narrow for the Jacobi window: verification only)."""
        active = [b for b in range(state.batch) if not state.done[b] and state.room(b) > 1]
        fits = all(state.draft_slots(b) is None or state.draft_slots(b) >= (self.level - 1) * self.window
                   for b in active)
        if self.cost is None:
            return "full" if fits else "verify"
        if not active:
            return "plain"
        rows = len(active)
        width = max(len(self._candidates(state, b)) * (self.level - 1) for b in active)
        slots = {"full": (self.level - 1) * self.window + width, "verify": width, "plain": 0}
        if not fits:
            slots.pop("full")
        gain = {"full": state.shared.full.value, "verify": state.shared.verify.value, "plain": 1.0}
        rate = {m: gain[m] / self.cost.step(rows, 1 + slots[m]) for m in self.MODES
                if m == "plain" or slots.get(m, 0) > 0}
        return max(rate, key=rate.get)

    def _candidates(self, state: DecodeState, b: int):
        return state.rows[b].pool.get(state.tokens[b][-1])[:self.guesses]

    def propose(self, state: DecodeState) -> Draft:
        rows, positions, masks, layouts = [], [], [], []
        mode = self._mode(state)
        for b in range(state.batch):
            if state.done[b]:
                rows.append([]), positions.append([]), masks.append(None), layouts.append(RowLayout())
                continue
            tok, pos, mask, layout = self._row(state, b, mode)
            rows.append(tok), positions.append(pos), masks.append(mask), layouts.append(layout)
        active = [lay.num_pending - 1 for lay in layouts if lay.num_pending > 0]
        return Draft.from_rows(rows, positions, masks, meta=LookaheadMeta(layouts, mode),
                               logits_from=min(active, default=0), device=state.device)

    def _row(self, state: DecodeState, b: int, mode: str = "full"):
        pending = state.pending(b)
        first = state.num_cached[b]
        last = first + len(pending) - 1          # position of the last committed token
        tokens, positions = list(pending), list(range(first, last + 1))
        parents: list[list[int]] = [list(range(i + 1)) for i in range(len(pending))]  # visible slots
        layout = RowLayout(num_pending=len(pending))
        room = state.room(b) - 1 if mode != "plain" else 0
        base = list(range(len(pending)))
        full = room > 0 and mode == "full"
        free = state.draft_slots(b)
        budget = None if free is None else free - full * (self.level - 1) * self.window   # a fixed step's slots left
        if room > 0:       # the candidates first, right after the pending tokens (one on a fixed step:
            for cand in self._candidates(state, b)[:1 if state.fixed_step else None]:   # DecodeState.fixed_step)
                cand = list(cand[:room if budget is None else min(room, budget)])
                if not cand:
                    break
                if budget is not None:
                    budget -= len(cand)
                slots = []
                for d, t in enumerate(cand):
                    slots.append(len(tokens))
                    parents.append(base + slots[:])
                    tokens.append(t), positions.append(last + 1 + d)
                layout.candidates.append(cand), layout.candidate_slots.append(slots)
        if full:
            traj = state.rows[b].trajectories
            for lvl, row in enumerate(traj):
                slots = []
                for i, t in enumerate(row):
                    # trajectory 0 up to this column, then this column in the earlier trajectories
                    seen = slots[:i] if lvl == 0 else (layout.window_slots[0][:i] +
                                                       [layout.window_slots[m][i] for m in range(lvl)])
                    slots.append(len(tokens))
                    parents.append(base + seen + [len(tokens)])
                    tokens.append(t), positions.append(last + 1 + i + lvl)
                layout.window_slots.append(slots)
        n = len(tokens)
        if n == len(pending):                            # pending tokens only: plain causal
            return tokens, positions, None, layout
        visible = [[False] * n for _ in range(n)]        # built on the host, sent to the device once
        for i, seen in enumerate(parents):
            for j in seen:
                visible[i][j] = True
        mask = torch.tensor(visible, dtype=torch.bool, device=state.device).reshape(n, n)
        return tokens, positions, mask, layout

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        keep = torch.zeros_like(draft.valid)
        committed = []
        for b in range(state.batch):
            layout: RowLayout = draft.meta.rows[b]
            if state.done[b]:
                committed.append([])
                continue
            row_logits = _SlotLogits(logits[b], draft.logits_from)
            new, path = self._verify(state, b, layout, row_logits)
            committed.append(new)
            keep[b, :layout.num_pending] = True
            keep[b, path] = True
            self._update_trajectories(state, b, layout, row_logits)
        self._grow_pools(state, committed)
        mode, least = draft.meta.mode, min((len(c) for c in committed if c), default=None)
        for m, gain in (("full", state.shared.full), ("verify", state.shared.verify)):
            gain.add(least if m == mode else None)
        return Acceptance(committed, keep)

    def _verify(self, state: DecodeState, b: int, layout: RowLayout, logits: torch.Tensor):
        """Walk the candidate tree; returns the committed tokens and the accepted draft slots."""
        node = logits[layout.num_pending - 1]
        alive = list(range(len(layout.candidates)))
        new: list[int] = []
        depth = 0
        while True:
            p = logits_to_probs(node, state.params)
            options = list(dict.fromkeys(layout.candidates[c][depth] for c in alive
                                         if len(layout.candidates[c]) > depth))
            u = state.streams.row(b, len(state.tokens[b]) + depth, ACCEPT, len(options) + 1)   # keyed by position
            token, ok = accept_multi_draft(p, options, u)
            new.append(token)
            if not ok:
                break
            alive = [c for c in alive if len(layout.candidates[c]) > depth and layout.candidates[c][depth] == token]
            node = logits[layout.candidate_slots[alive[0]][depth]]
            depth += 1
        path = layout.candidate_slots[alive[0]][:depth] if depth else []
        return new, path

    def _update_trajectories(self, state: DecodeState, b: int, layout: RowLayout, logits: torch.Tensor) -> None:
        if not layout.window_slots:
            return
        row = state.rows[b]
        traj = row.trajectories
        newest = logits[layout.window_slots[-1]].argmax(-1).tolist()
        for i in range(len(newest)):
            gram = [traj[lvl][i] for lvl in range(len(traj))] + [newest[i]]
            row.pool.add(gram[0], tuple(gram[1:]))
        row.trajectories = traj[1:] + [newest]

    def _grow_pools(self, state: DecodeState, committed: list[list[int]]) -> None:
        for b, (new, row) in enumerate(zip(committed, state.rows)):
            tokens = state.tokens[b] + new
            start = max(0, row.pooled_upto - self.level + 1)
            row.pool.add_text(tokens, self.level, start)
            row.pooled_upto = len(tokens)
