"""Speculative Jacobi Decoding (Teng et al. 2024, "Accelerating Auto-regressive Text-to-Image
Generation with Training-free Speculative Jacobi Decoding").

A Jacobi window of drafts, each carrying the distribution q it was drawn from (a point mass for
freshly initialised drafts). One forward gives the target p at every window position; drafts are
accepted left to right with min(1, p/q), the first rejection is resampled from
norm(max(0, p - q)), and every later position is redrawn from its new p, which becomes its q.
Lossless in distribution; at temperature 0 it equals `ar` token for token.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ...cost import bind_cost, chain_sizes, record
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import DRAFT
from ...sampling import sample
from .base import (chain_acceptance, chain_draft, chain_probs, padded_guesses, room_for_guesses,
                   speculative_chain_verdicts)
from .jacobi import INIT_SCHEMES, JacobiRow, frame_shape, init_guesses, jacobi_accept
from ..base import DecoderBase
from ..options import option


def draft_uniforms(state: DecodeState, width: int) -> torch.Tensor:
    """(B, width) uniforms of fresh drafts along every row's chain: slot j drafts position start + j."""
    return state.streams.uniform(state.positions()[:, None] + torch.arange(width, device=state.device), DRAFT)


def draft_q(guess: list[int], q, vocab: int, device: torch.device) -> torch.Tensor:
    """(G, V) draft distributions on `device`: row i is q[i], or a point mass on guess[i] where q
    has no entry (None, or past the end of q: a list of (V,) tensors or None, or a (C, V) tensor)."""
    if isinstance(q, torch.Tensor) and len(q) >= len(guess):
        return q[:len(guess)].to(device)
    out = torch.nn.functional.one_hot(torch.tensor(guess, dtype=torch.long, device=device), vocab).float()
    if isinstance(q, torch.Tensor):
        out[:len(q)] = q
    else:
        for i, qi in enumerate(q[:len(guess)]):
            if qi is not None:
                out[i] = qi
    return out


def carried_q(rows: list["SJDRow"], guesses: torch.Tensor, vocab: int) -> torch.Tensor:
    """(B, G, V) q of the padded guesses (B, G): each row's carried distributions (`SJDRow.q`)
    where it has them, else point masses."""
    point = torch.nn.functional.one_hot(guesses.clamp(min=0), vocab).float()
    for b, row in enumerate(rows):
        n = 0 if row.q is None else min(len(row.q), guesses.shape[1])
        if n:
            point[b, :n] = row.q[:n]
    return point


@dataclass
class SJDRow(JacobiRow):
    q: torch.Tensor | None = None   # (n, V): what the first n guesses were drawn from (rows of the last
                                    # forward's targets); later guesses are point masses (None: all are)


@dataclass(frozen=True)
class SJD(DecoderBase):
    window: int = option(4, 1)       # guesses per forward (small: extra slots are not free on a CPU)
    init: str = "prompt"   # fresh drafts: "prompt" (random prompt tokens), "repeat" (the last token),
                           # "left" (images: the last generated token, i.e. the left neighbour)
                           # "frame" (video: the same cell of the previous frame) or "motion"
                           # (video: the previous frame moved as the last row moved)
    period: int | None = None   # init="frame"/"motion": tokens per frame (None: the adapter's video_grid)
    width: int | None = None    # init="motion": codes per frame row (None: the adapter's video_grid)
    cost: Any = "auto"     # the target's cost curve: the window shrinks to what pays (suite.cost); None: fixed

    name: ClassVar[str] = "sjd"
    requires: ClassVar[frozenset] = frozenset()

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's window from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, model) -> "SJD":
        if self.init not in ("frame", "motion") or (self.period is not None and (self.init == "frame" or self.width)):
            return bind_cost(self, model)
        period, width = frame_shape(model)
        return bind_cost(dataclasses.replace(self, period=self.period or period, width=self.width or width), model)

    def start(self, state: DecodeState) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if self.init not in INIT_SCHEMES:
            raise ValueError(f"init must be one of {', '.join(INIT_SCHEMES)}, got {self.init!r}")
        state.rows = [SJDRow() for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        for b, row in enumerate(state.rows):
            n = room_for_guesses(state, b, self.window)
            kept = row.guesses[:n]
            if row.q is not None:
                row.q = row.q[:len(kept)]   # fresh guesses are point masses
            row.guesses = kept + init_guesses(state, b, n - len(kept), self.init, self.period, self.width,
                                              offset=len(kept))
        guesses = [row.guesses for row in state.rows]
        sizes = chain_sizes(state, self.cost, [len(g) for g in guesses])
        return chain_draft(state, [list(g[:k]) for g, k in zip(guesses, sizes)])

    def redraw(self, guesses: torch.Tensor, q: torch.Tensor, p: torch.Tensor, lengths: torch.Tensor,
               state: DecodeState) -> list[list[int]]:
        """New drafts for every chain position, (B, G+1) as host lists: row b's position j gets a
        draw from p[b, j] (the caller keeps those after the committed token). guesses (B, G) were
        drawn from q (B, G, V), lengths (B,) real per row. Plain SJD draws independently; MC-SJD
        couples the draw to the old guess."""
        return sample(p, draft_uniforms(state, p.shape[1])).tolist()

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        if state.params.greedy:   # p is one-hot: the rule is Jacobi's (accept the argmax prefix, redraw = argmax)
            return self._accept_greedy(state, draft, logits)
        guesses = draft.meta.guesses
        p = chain_probs(state, draft, logits)                                    # (B, G+1, V)
        padded, lengths = padded_guesses(draft)
        q = carried_q(state.rows, padded, p.shape[-1])
        verdicts = speculative_chain_verdicts(state, draft, p, q, (padded, lengths))
        redrawn = self.redraw(padded.clamp(min=0), q, p, lengths, state)
        committed, accepted = [], []
        for b, (v, row) in enumerate(zip(verdicts, state.rows)):
            k = 0 if v is None else v.num_accepted
            committed.append([] if v is None else guesses[b][:k] + [v.next_token])
            accepted.append(k)
            row.q = None
            if v is not None:      # the positions after the committed token, drawn from their targets
                row.guesses = redrawn[b][k + 1:len(guesses[b]) + 1]
                row.q = p[b, k + 1:len(guesses[b]) + 1]
        record(state, [len(g) for g in guesses], accepted)
        return chain_acceptance(draft, committed, accepted)

    def _accept_greedy(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        for row in state.rows:
            row.q = None      # the argmax guesses are point masses
        return jacobi_accept(state, draft, logits)
