"""Entropy-bounded commits (EB-Sampler, Ben-Hamu et al. 2025, "Accelerated Sampling from Masked
Diffusion Models via Entropy Bounded Unmasking"): take the open slots in order of increasing
entropy and commit the largest set U whose summed entropy, less its largest member's, stays within
`gamma`: sum_{i in U} H_i - max_{i in U} H_i <= gamma. The paper bounds the error of decoding U in
parallel (against one at a time) by the dependence among U's tokens, which their entropies bound.

Trades: the budget is shared, so many near-certain slots can go together where one uncertain slot
goes alone; a confidence threshold looks only at the top probability, this rule at the whole
distribution (a flat tail counts against a slot). gamma = 0 commits only slots of zero entropy
(besides the first); a larger gamma fills more slots per forward and more that disagree.
Entropies are of the processed distribution when sampling, the raw softmax when greedy (in nats).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import DecodeState
from ...sampling import logits_to_probs
from .block_diffusion import BlockCommit, OpenSlots


def entropies(logits: torch.Tensor, state: DecodeState) -> torch.Tensor:
    """(K, V) logits -> (K,) entropy in nats of each slot's distribution."""
    probs = torch.softmax(logits.float(), -1) if state.params.greedy else logits_to_probs(logits, state.params)
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


def entropy_bounded_commit(h: torch.Tensor, gamma: float) -> torch.Tensor:
    """(K,) entropies, slot 0 committed first -> (K,) bool: the other slots join in order of
    increasing entropy while sum(H) - max(H) over the committed set stays <= gamma."""
    order = h[1:].argsort() + 1
    joined = torch.cat([h[:1], h[order]]).double()            # the head, then by increasing entropy
    within = joined.cumsum(0) - joined.cummax(0).values <= gamma
    keep = torch.zeros(h.shape[0], dtype=torch.bool, device=h.device)
    keep[0] = True
    keep[order] = within[1:].long().cumprod(0).bool()         # until the first slot over the budget
    return keep


@dataclass(frozen=True)
class EntropyBounded(BlockCommit):
    block_size: int = 8
    gamma: float = 0.1                 # entropy budget in nats
    mask_token_id: int | None = None   # default: the adapter config's extra["mask_token_id"]
    prefix_only: bool = False          # fill only the committed run right after the head
    hold_repeats: bool = False         # never fill a slot with the token right before it (BlockCommit)

    name: ClassVar[str] = "entropy_bounded"

    def setup(self, state: DecodeState) -> None:
        if self.gamma < 0:
            raise ValueError(f"gamma must be >= 0, got {self.gamma}")

    def commit(self, state: DecodeState, b: int, slots: OpenSlots) -> torch.Tensor:
        return entropy_bounded_commit(entropies(slots.logits, state), self.gamma)
