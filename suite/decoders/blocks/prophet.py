"""Prophet-style early commit (Li et al. 2025, "Diffusion Language Models Know the Answer Before
Decoding"): when the gap between the top-2 candidates is large, go "all-in" and decode every
remaining slot in one step instead of refining further.

Per forward and row: the top-2 gap of each open slot is log p1 - log p2 (the log-odds of its best
value over the runner-up). When the mean gap over the block's open noisy slots is at least
`margin`, every open slot is committed at once; otherwise the step falls back to the confidence
threshold (`threshold`, at least the head). Prophet schedules its gap threshold by decoding
progress; a line's length is unknown in advance here, so the margin is one number.

Trades: the all-in step judges the block as a whole, so one unsure slot among sure ones is carried
in by the mean (fewer forwards, more errors of that kind); the gap ignores how much mass the tail
holds, which a confidence threshold would see. margin = inf is `block_diffusion` with the same
threshold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import DecodeState
from .block_diffusion import BlockCommit, OpenSlots


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """(K, V) logits -> (K,) log p1 - log p2 of each slot."""
    top = logits.float().topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


def prophet_commit(logits: torch.Tensor, conf: torch.Tensor, margin: float, threshold: float) -> torch.Tensor:
    """(K,) bool: every slot when the mean top-2 gap of the noisy slots (1..K-1) is >= margin,
    else the slots with confidence >= threshold; slot 0 (the head) always."""
    keep = conf >= threshold
    keep[0] = True
    if conf.shape[0] > 1:                                 # a tensor test: no host sync
        keep |= top2_gap(logits[1:]).mean().double() >= margin
    return keep


@dataclass(frozen=True)
class Prophet(BlockCommit):
    block_size: int = 8
    margin: float = 4.0                # mean top-2 log-odds gap that sends the whole block in
    threshold: float = 0.95            # the fallback step's confidence threshold
    mask_token_id: int | None = None   # default: the adapter config's extra["mask_token_id"]
    prefix_only: bool = False          # fill only the committed run right after the head
    hold_repeats: bool = False         # never fill a slot with the token right before it (BlockCommit)

    name: ClassVar[str] = "prophet"

    def setup(self, state: DecodeState) -> None:
        if self.margin < 0 or self.threshold < 0 or math.isnan(self.margin):
            raise ValueError(f"margin and threshold must be >= 0, got {self.margin}, {self.threshold}")

    def commit(self, state: DecodeState, b: int, slots: OpenSlots) -> torch.Tensor:
        return prophet_commit(slots.logits, slots.conf, self.margin, self.threshold)
