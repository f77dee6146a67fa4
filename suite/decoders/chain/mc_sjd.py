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
from ...random_streams import COUPLE, DRAFT, REDRAW
from ...sampling import sample
from .sjd import SJD, draft_q


def couple(old: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor, u_next: torch.Tensor) -> torch.Tensor:
    """(...) new drafts: at every position one draw from p (..., V) maximally coupled to the old
    draft old (...) ~ q (..., V): keep old with probability min(1, p(old)/q(old)), else draw from
    norm(max(0, p - q)) (a one-step speculative rule, every position in one `speculative_accept`);
    u, u_next (...) the keep tests and the redraws' uniforms."""
    n, vocab = old.numel(), p.shape[-1]
    if not n:
        return old
    flat = old.reshape(n)
    kept, redrawn = kernels.op("speculative_accept", p.device.type)(
        flat[:, None], q.reshape(n, 1, vocab), p.reshape(n, 1, vocab).expand(-1, 2, -1), u.reshape(n, 1),
        u_next.reshape(n))
    return torch.where(kept == 1, flat, redrawn).reshape(old.shape)


def redraw_uniforms(state: DecodeState, positions: torch.Tensor, stamp: torch.Tensor | int, rows=None) -> torch.Tensor:
    """(3, R, ...) uniforms of redraws at `positions` (R, ...) of rows `rows` (every row: None): a fresh
    draw's, a coupling's keep test and its residual draw. The coupling's are keyed by `stamp` too (per
    row, (R, 1, ...) or an int: a count that grows every step, so each step couples afresh)."""
    return torch.stack([state.streams.uniform(positions, DRAFT, rows=rows),
                        state.streams.uniform(positions, COUPLE, stamp, rows=rows),
                        state.streams.uniform(positions, REDRAW, stamp, rows=rows)])


def raster_redraw_uniforms(state: DecodeState, b: int, first: int, count: int) -> torch.Tensor:
    """(3, count) `redraw_uniforms` of row b's image cells at positions first.. (their canvas's filled
    cells, which grow every step, stamp the couplings)."""
    positions = torch.arange(first, first + count, device=state.device)[None]
    return redraw_uniforms(state, positions, sum(state.rows[b].canvas.row_len), rows=[b])[:, 0]


def coupled_redraws(old: list[int], old_q, p: torch.Tensor, u: torch.Tensor) -> list[int]:
    """New drafts for the positions whose new targets are p (M, V): position i < len(old) is one
    draw from p[i] coupled to its old draft old[i] ~ old_q[i] (old_q: see `draft_q`; `couple`);
    later positions are fresh samples. u (3, M): `redraw_uniforms` of the M positions."""
    n = len(old)
    fresh = sample(p[n:], u[0, n:]).tolist() if len(p) > n else []
    if not n:
        return fresh
    old_t = torch.tensor(old, dtype=torch.long, device=p.device)
    return couple(old_t, draft_q(old, old_q, p.shape[-1], p.device), p[:n], u[1, :n], u[2, :n]).tolist() + fresh


@dataclass(frozen=True)
class MCSJD(SJD):
    name: ClassVar[str] = "mc_sjd"

    def redraw(self, guesses: torch.Tensor, q: torch.Tensor, p: torch.Tensor, lengths: torch.Tensor,
               state: DecodeState) -> list[list[int]]:
        """Each old guess's position coupled to it; the position after a row's last guess fresh."""
        starts = state.positions()[:, None]                     # also the stamp: the committed length grows every step
        u = redraw_uniforms(state, starts + torch.arange(p.shape[1], device=p.device), starts)
        fresh = sample(p, u[0])                                                     # (B, G+1)
        g = guesses.shape[1]
        if not g:
            return fresh.tolist()
        coupled = couple(guesses, q, p[:, :g], u[1, :, :g], u[2, :, :g])            # (B, G)
        old = torch.arange(g, device=p.device)[None] < lengths[:, None]
        return torch.cat([torch.where(old, coupled, fresh[:, :g]), fresh[:, g:]], 1).tolist()
