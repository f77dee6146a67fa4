"""Jacobi decoding (Santilli et al. 2023; CLLM, Kou et al. 2024): greedy fixed-point iteration.

A window of guessed tokens is scored in one forward; the longest prefix that equals the greedy
output is a fixed point and is committed, plus the first corrected token. The outputs after the
first mismatch become the next guesses. Greedy only (use `sjd` for sampling); exact.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


from ...cost import bind_cost, chain_sizes, record
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import INIT
from .base import ChainRow, chain_acceptance, chain_draft, greedy_chain_verdicts, room_for_guesses
from ..base import DecoderBase
from ..options import option


INIT_SCHEMES = ("prompt", "repeat", "left", "frame", "motion")


def frame_offset(new: list[int], period: int, width: int) -> int:
    """How far back (one frame, moved by at most one row and one column) the copies match the
    last row of codes best; the same cell (`period`) on a tie."""
    n, best, hits = len(new), period, -1
    for d in (period + dr * width + dc for dr in (0, -1, 1) for dc in (0, -1, 1)):
        h = sum(new[i] == new[i - d] for i in range(max(d, n - width), n))
        if h > hits:
            best, hits = d, h
    return best


def init_guesses(state: DecodeState, b: int, count: int, scheme: str, period: int | None = None,
                 width: int | None = None, offset: int = 0, draw: int = 0) -> list[int]:
    """New guess tokens: copies of random prompt tokens (CLLM), repeats of the last token,
    "left" (images): copies of the last generated token, the left neighbour, "frame" (video):
    the token `period` (one frame) back, the same cell of the previous frame (in the first frame
    the left neighbour), or "motion" (video, frames `width` codes wide): the cell of the previous
    frame one cell away (or the same) whose copies matched the last row best, i.e. the previous
    frame moved as the frame is moving; none before the first generated token. The first new guess
    drafts the position `offset` after the row's committed tokens (random picks are keyed by it and
    `draw`)."""
    if count <= 0:
        return []
    if scheme in ("frame", "motion"):
        if not period or (scheme == "motion" and not width):
            raise ValueError(f"init={scheme!r} needs the frame's shape: period=H*W (and width=W for 'motion'), "
                             "or an adapter with a video_grid")
        new = state.new_tokens(b)
        n = len(new)
        back = frame_offset(new, period, width) if scheme == "motion" and n >= period else period
        return [new[n + i - back] if 0 <= n + i - back < n else new[-1] for i in range(count)] if new else []
    if scheme == "left":
        new = state.new_tokens(b)
        return [new[-1]] * count if new else []
    if scheme == "repeat":
        return [state.tokens[b][-1]] * count
    prompt = state.tokens[b][:state.prompt_lengths[b]]
    start = len(state.tokens[b]) + offset
    u = state.streams.uniform([list(range(start, start + count))], INIT, draw, rows=[b])[0]
    return [prompt[i] for i in (u * len(prompt)).long().clamp(max=len(prompt) - 1).tolist()]


def frame_shape(model) -> tuple[int, int]:
    """(tokens per frame H*W, width W) of a video adapter's config.extra["video_grid"] (T, H, W)."""
    from ...models.adapters import as_adapter
    grid = as_adapter(model).config.extra.get("video_grid")
    if grid is None:
        raise ValueError("init='frame'/'motion' drafts from the previous video frame: pass period=H*W, or an adapter "
                         "whose config.extra has 'video_grid': (T, H, W)")
    return int(grid[1]) * int(grid[2]), int(grid[2])


@dataclass
class JacobiRow(ChainRow):
    guesses: list[int] = field(default_factory=list)   # the next window's guesses (the last forward's outputs)


@dataclass(frozen=True)
class Jacobi(DecoderBase):
    window: int = option(4, 1)       # guesses per forward (small: extra slots are not free on a CPU)
    init: str = "prompt"   # "prompt" (random prompt tokens), "repeat" (the last token) or "left" (last new token)
    cost: Any = "auto"     # the target's cost curve: the window shrinks to what pays (suite.cost); None: fixed

    name: ClassVar[str] = "jacobi"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, model) -> "Jacobi":
        return bind_cost(self, model)

    def start(self, state: DecodeState) -> None:
        if not state.params.greedy:
            raise ValueError("jacobi is greedy only; use decoder='sjd' (speculative Jacobi) for temperature > 0")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if self.init not in INIT_SCHEMES:
            raise ValueError(f"init must be one of {', '.join(INIT_SCHEMES)}, got {self.init!r}")
        state.rows = [JacobiRow() for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        for b, row in enumerate(state.rows):
            n = room_for_guesses(state, b, self.window)
            row.guesses = row.guesses[:n] + init_guesses(state, b, n - len(row.guesses[:n]), self.init,
                                                          offset=len(row.guesses[:n]))
        guesses = [row.guesses for row in state.rows]
        sizes = chain_sizes(state, self.cost, [len(g) for g in guesses])
        return chain_draft(state, [list(g[:k]) for g, k in zip(guesses, sizes)])

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        return jacobi_accept(state, draft, logits)


def jacobi_accept(state: DecodeState, draft: Draft, logits) -> Acceptance:
    """Keep each row's guesses up to the first that differs from the target's argmax, then the
    argmax; the target's argmax after the committed token becomes the row's next guesses."""
    verdicts, targets = greedy_chain_verdicts(state, draft, logits)
    committed, accepted = [], []
    for b, v in enumerate(verdicts):
        guess = draft.meta.guesses[b]
        committed.append([] if v is None else guess[:v.num_accepted] + [v.next_token])
        accepted.append(0 if v is None else v.num_accepted)
        if v is not None:
            state.rows[b].guesses = targets[b][v.num_accepted + 1:]
    record(state, [len(g) for g in draft.meta.guesses], accepted)
    return chain_acceptance(draft, committed, accepted)
