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
from ...sampling import sample
from .base import (chain_acceptance, chain_draft, chain_probs, padded_draft_q, room_for_guesses,
                     speculative_chain_verdicts)
from .jacobi import INIT_SCHEMES, frame_period, init_guesses


def draft_q(guess: list[int], q: list[torch.Tensor | None], vocab: int) -> torch.Tensor:
    """(G, V) draft distributions; None entries are point masses on their token."""
    rows = [qi if qi is not None else torch.nn.functional.one_hot(torch.tensor(t), vocab).float()
            for t, qi in zip(guess, q)]
    return torch.stack(rows) if rows else torch.zeros(0, vocab)


@dataclass(frozen=True)
class SJD:
    window: int = 4        # guesses per forward (small: extra slots are not free on a CPU)
    init: str = "prompt"   # fresh drafts: "prompt" (random prompt tokens), "repeat" (the last token),
                           # "left" (images: the last generated token, i.e. the left neighbour)
                           # or "frame" (video: the same cell of the previous frame)
    period: int | None = None   # init="frame": tokens per frame (None: the adapter's video_grid)
    cost: Any = "auto"     # the target's cost curve: the window shrinks to what pays (suite.cost); None: fixed

    name: ClassVar[str] = "sjd"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, model) -> "SJD":
        if self.init != "frame" or self.period is not None:
            return bind_cost(self, model)
        return bind_cost(dataclasses.replace(self, period=frame_period(model)), model)

    def start(self, state: DecodeState) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if self.init not in INIT_SCHEMES:
            raise ValueError(f"init must be one of {', '.join(INIT_SCHEMES)}, got {self.init!r}")
        state.scratch["guesses"] = [[] for _ in range(state.batch)]
        state.scratch["q"] = [[] for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        guesses, qs = state.scratch["guesses"], state.scratch["q"]
        for b in range(state.batch):
            n = room_for_guesses(state, b, self.window)
            fresh = init_guesses(state, b, n - len(guesses[b][:n]), self.init, self.period)
            guesses[b] = guesses[b][:n] + fresh
            qs[b] = qs[b][:n] + [None] * len(fresh)
        sizes = chain_sizes(state, self.cost, [len(g) for g in guesses])
        return chain_draft(state, [list(g[:k]) for g, k in zip(guesses, sizes)])

    def redraw(self, old: list[int], old_q: list, p: torch.Tensor, state: DecodeState) -> list[int]:
        """Drafts for the positions after the committed token, one per row of p (M, V):
        independent samples from p (MC-SJD overrides this with a coupling to `old`)."""
        return sample(p, state.generator).tolist() if len(p) else []

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        guesses, qs = draft.meta.guesses, state.scratch["q"]
        p = chain_probs(state, draft, logits)                                    # (B, G+1, V)
        q = padded_draft_q(p, [draft_q(guess, qs[b], p.shape[-1]) for b, guess in enumerate(guesses)])
        committed, accepted = [], []
        for b, v in enumerate(speculative_chain_verdicts(state, draft, p, q)):
            if v is None:
                committed.append([]), accepted.append(0)
                continue
            k, guess = v.num_accepted, guesses[b]
            committed.append(guess[:k] + [v.next_token])
            accepted.append(k)
            later = p[b, k + 1:len(guess) + 1]        # targets of the positions after the committed token
            state.scratch["guesses"][b] = self.redraw(guess[k + 1:], qs[b][k + 1:], later, state)
            state.scratch["q"][b] = list(later)
        record(state, [len(g) for g in guesses], accepted)
        return chain_acceptance(draft, committed, accepted)
