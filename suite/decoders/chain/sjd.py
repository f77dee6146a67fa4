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
from .base import (chain_acceptance, chain_draft, chain_probs, greedy_chain_verdicts, padded_guesses,
                   room_for_guesses, speculative_chain_verdicts)
from .jacobi import INIT_SCHEMES, frame_period, init_guesses


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
        state.scratch["q"] = [[] for _ in range(state.batch)]   # per row: (C, V) q's of its first C guesses

    def propose(self, state: DecodeState) -> Draft:
        guesses, qs = state.scratch["guesses"], state.scratch["q"]
        for b in range(state.batch):
            n = room_for_guesses(state, b, self.window)
            fresh = init_guesses(state, b, n - len(guesses[b][:n]), self.init, self.period)
            guesses[b] = guesses[b][:n] + fresh
            qs[b] = qs[b][:n]        # the carried guesses' distributions; fresh guesses are point masses
        sizes = chain_sizes(state, self.cost, [len(g) for g in guesses])
        return chain_draft(state, [list(g[:k]) for g, k in zip(guesses, sizes)])

    def redraw(self, old: list[int], old_q: torch.Tensor, p: torch.Tensor, state: DecodeState) -> list[int]:
        """Drafts for the positions after the committed token, one per row of p (M, V): old
        (drawn from old_q, (len(old), V)) are independent samples from p here (MC-SJD overrides
        this with a coupling to `old`)."""
        return sample(p, state.generator).tolist() if len(p) else []

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        if state.params.greedy:   # p is one-hot: the rule is Jacobi's (accept the argmax prefix, redraw = argmax)
            return self._accept_greedy(state, draft, logits)
        guesses, qs = draft.meta.guesses, state.scratch["q"]
        p = chain_probs(state, draft, logits)                                    # (B, G+1, V)
        padded, lengths = padded_guesses(draft)
        q = torch.nn.functional.one_hot(padded.clamp(min=0), p.shape[-1]).float()   # point masses, then carried q's
        for b, qb in enumerate(qs):
            carried = min(len(qb), len(guesses[b]))
            if carried:
                q[b, :carried] = qb[:carried]
        committed, accepted = [], []
        for b, v in enumerate(speculative_chain_verdicts(state, draft, p, q, (padded, lengths))):
            if v is None:
                committed.append([]), accepted.append(0)
                continue
            k, guess = v.num_accepted, guesses[b]
            committed.append(guess[:k] + [v.next_token])
            accepted.append(k)
            later = p[b, k + 1:len(guess) + 1]        # targets of the positions after the committed token
            state.scratch["guesses"][b] = self.redraw(guess[k + 1:], q[b, k + 1:len(guess)], later, state)
            qs[b] = later
        record(state, [len(g) for g in guesses], accepted)
        return chain_acceptance(draft, committed, accepted)

    def _accept_greedy(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        verdicts, targets = greedy_chain_verdicts(state, draft, logits)
        committed, accepted = [], []
        for b, v in enumerate(verdicts):
            guess = draft.meta.guesses[b]
            committed.append([] if v is None else guess[:v.num_accepted] + [v.next_token])
            accepted.append(0 if v is None else v.num_accepted)
            if v is not None:
                state.scratch["guesses"][b] = targets[b][v.num_accepted + 1:]
                state.scratch["q"][b] = state.scratch["q"][b][:0]
        record(state, [len(g) for g in draft.meta.guesses], accepted)
        return chain_acceptance(draft, committed, accepted)
