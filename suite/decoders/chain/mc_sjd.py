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

import kernels

from ...loop import DecodeState
from ...sampling import sample
from .sjd import SJD, draft_q


def coupled_redraws(old: list[int], old_q, p: torch.Tensor, generator) -> list[int]:
    """New drafts for the positions whose new targets are p (M, V): position i < len(old) is one
    draw from p[i] maximally coupled to its old draft old[i] ~ old_q[i] (old_q: see `draft_q`; a one-step speculative
    rule, all positions in one batched `speculative_accept`); later positions are fresh samples."""
    n = len(old)
    fresh = sample(p[n:], generator).tolist() if len(p) > n else []
    if not n:
        return fresh
    old_t = torch.tensor(old, dtype=torch.long, device=p.device)
    q = draft_q(old, old_q, p.shape[-1], p.device)
    u = torch.rand(n, 1, generator=generator, device=p.device)
    u_next = torch.rand(n, generator=generator, device=p.device)
    kept, redrawn = kernels.op("speculative_accept", p.device.type)(
        old_t[:, None], q[:, None], p[:n, None].expand(-1, 2, -1), u, u_next)   # accept with p, redraw from p
    return torch.where(kept == 1, old_t, redrawn).tolist() + fresh


@dataclass(frozen=True)
class MCSJD(SJD):
    name: ClassVar[str] = "mc_sjd"

    def redraw(self, old: list[int], old_q: list, p: torch.Tensor, state: DecodeState) -> list[int]:
        return coupled_redraws(old, old_q, p, state.generator)
