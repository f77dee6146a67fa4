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

from ..loop import DecodeState
from ..sampling import sample
from .sjd import SJD, draft_q


def coupled_redraws(old: list[int], q: torch.Tensor, p: torch.Tensor, generator) -> list[int]:
    """One draw from each p[i], maximally coupled to the old draft old[i] ~ q[i]: a one-step
    speculative rule per position, all positions in one batched `speculative_accept`."""
    n = len(old)
    target = p[:n, None].expand(-1, 2, -1)                                      # accept with p, redraw from p
    u = torch.rand(n, 1, generator=generator, device=p.device)
    u_next = torch.rand(n, generator=generator, device=p.device)
    kept, redrawn = kernels.op("speculative_accept", p.device.type)(
        torch.tensor(old, dtype=torch.long, device=p.device)[:, None], q[:, None], target, u, u_next)
    return torch.where(kept == 1, torch.tensor(old, device=p.device), redrawn).tolist()


@dataclass(frozen=True)
class MCSJD(SJD):
    name: ClassVar[str] = "mc_sjd"

    def redraw(self, old: list[int], old_q: list, p: torch.Tensor, state: DecodeState) -> list[int]:
        coupled = coupled_redraws(old, draft_q(old, old_q, p.shape[-1]).to(p.device), p, state.generator) if old else []
        fresh = sample(p[len(old):], state.generator).tolist() if len(p) > len(old) else []
        return coupled + fresh
