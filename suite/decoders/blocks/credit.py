"""CreditDecoding (Wang et al. 2025, "CreditDecoding: Accelerating Parallel Decoding in Diffusion
Large Language Models with Trace Credits"): a slot's confidence is fused with the credit its value
earned in earlier forwards, so a value the model has kept predicting commits before its single-step
confidence crosses the threshold.

Trace credit, per target position and value: every forward that scores the position decays its
credits by `decay` and adds p^`power` to the value then on top (p its raw softmax probability).
Fused log-probabilities: log p(v) + `alpha` * log(1 + credit(v)), renormalised; an open slot is
committed when the fused probability of its chosen value is at least `threshold` (the head always).
A position's credits are dropped once it is committed.

Trades: history stands in for certainty. A value the model predicts forward after forward gets
through a threshold its current confidence misses (fewer forwards); a value that was consistently
top but is wrong given what has been committed since gets through too (errors that a fresh
threshold would have refined away). alpha = 0 is `block_diffusion` with the same threshold.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...loop import DecodeState
from .block_diffusion import BlockCommit, BlockRow, OpenSlots


def add_credit(credits: torch.Tensor, probs: torch.Tensor, decay: float, power: float) -> torch.Tensor:
    """One forward's update of positions' credits (K, V) (float64, one row per position): decay
    all, credit each position's top value with p ** power (probs (K, V) raw softmax)."""
    top = probs.argmax(-1, keepdim=True)                                       # (K, 1)
    earned = probs.gather(-1, top).double() ** power
    return (credits * decay).scatter_add(-1, top, earned)


def fused_confidence(logits: torch.Tensor, credits: torch.Tensor, tokens: torch.Tensor, alpha: float) -> torch.Tensor:
    """(K,) probabilities of `tokens` after adding alpha * log(1 + credit) to the log-probabilities
    (logits and credits (K, V); a value without credit gains nothing)."""
    fused = torch.log_softmax(logits.float(), -1) + alpha * torch.log1p(credits.float())
    return torch.softmax(fused, -1).gather(-1, tokens[:, None])[:, 0]


@dataclass
class CreditRow(BlockRow):
    credit: dict[int, torch.Tensor] = field(default_factory=dict)   # position -> (V,) credit per value (float64)


@dataclass(frozen=True)
class CreditDecoding(BlockCommit):
    block_size: int = 8
    threshold: float = 0.95
    alpha: float = 1.0                 # weight of the credit in the fused log-probabilities
    decay: float = 0.7                 # credit kept from one forward to the next
    power: float = 0.5                 # credit earned by a top value of probability p: p ** power
    mask_token_id: int | None = None   # default: the adapter config's extra["mask_token_id"]
    prefix_only: bool = False          # fill only the committed run right after the head
    hold_repeats: bool = False         # never fill a slot with the token right before it (BlockCommit)

    name: ClassVar[str] = "credit"
    row_type: ClassVar[type] = CreditRow

    def setup(self, state: DecodeState) -> None:
        if self.threshold < 0 or self.alpha < 0 or self.power < 0 or not 0 <= self.decay <= 1:
            raise ValueError("threshold, alpha and power must be >= 0 and decay in [0, 1], got "
                             f"{self.threshold}, {self.alpha}, {self.power}, {self.decay}")

    def commit(self, state: DecodeState, b: int, slots: OpenSlots) -> torch.Tensor:
        trace = state.rows[b].credit
        for q in [q for q in trace if q <= slots.positions[0]]:        # committed (the head's and before)
            del trace[q]
        probs = torch.softmax(slots.logits[1:].float(), -1)              # the noisy slots (K-1, V)
        fresh = probs.new_zeros(probs.shape[-1], dtype=torch.float64)
        credits = add_credit(torch.stack([trace.get(q, fresh) for q in slots.positions[1:]])
                             if len(slots.positions) > 1 else probs.new_zeros(probs.shape, dtype=torch.float64),
                             probs, self.decay, self.power)
        for q, row in zip(slots.positions[1:], credits):
            trace[q] = row
        conf = fused_confidence(slots.logits[1:], credits, slots.tokens[1:], self.alpha)
        return torch.cat([conf.new_ones(1, dtype=torch.bool), conf.double() >= self.threshold])
