"""MC-SJD (arXiv 2510.24211): speculative Jacobi decoding with coupled redraws.

Plain SJD redraws every not-yet-accepted draft independently from its new target p, so a draft
that was already right is often replaced. MC-SJD draws the new draft from a maximal coupling of
the old draft distribution q and the new p: keep the old token x with probability
min(1, p(x)/q(x)), else sample norm(max(0, p - q)). The new draft is still distributed exactly as
p (so verification stays lossless) but stays put with maximal probability, which raises the
acceptance of the next iteration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..acceptance import accept_speculative
from ..loop import DecodeState
from ..sampling import sample
from .sjd import SJD, draft_q


def coupled_redraw(x: int, q_x: torch.Tensor, p: torch.Tensor, generator) -> int:
    """One draw from p, maximally coupled to the old draft x ~ q_x (a one-step speculative rule)."""
    v = accept_speculative(torch.tensor([x]), q_x[None], torch.stack([p, p]), generator)
    return x if v.num_accepted == 1 else v.next_token


@dataclass(frozen=True)
class MCSJD(SJD):
    name: ClassVar[str] = "mc_sjd"

    def redraw(self, old: list[int], old_q: list, p: torch.Tensor, state: DecodeState) -> list[int]:
        q = draft_q(old, old_q, p.shape[-1])
        coupled = [coupled_redraw(x, q[i], p[i], state.generator) for i, x in enumerate(old)]
        fresh = sample(p[len(old):], state.generator).tolist() if len(p) > len(old) else []
        return coupled + fresh
