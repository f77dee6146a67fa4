"""Fast-dLLM's factor rule (Wu et al. 2025, "Fast-dLLM: Training-free Acceleration of Diffusion
LLM by Enabling KV Cache and Parallel Decoding", `get_transfer_index` with a factor): commit the
n most confident slots for the largest n with (n + 1) * (1 - c_n) <= factor, c_n the n-th highest
confidence. The paper's bound: when every committed token has confidence above 1 - eps, parallel
greedy equals sequential greedy if (n + 1) * eps <= 1, so `factor` scales how far past that
guarantee a step may go.

Trades: unlike one fixed threshold, the bar rises with the number of slots committed together
(1 - factor / (n + 1) for the n-th): two very confident slots may go together where a threshold
would also let a third, less sure one in; a lone confident slot needs less than a high threshold.
A larger factor commits more per forward and fills more slots that disagree with each other.

The head (the clean causal slot, exact AR) is always committed and counts as the first token.
Fast-dLLM's dual (prefix + suffix) KV cache does not apply here: the model is block-causal, so
the committed prefix's K/V is already exact and there is no masked suffix after the block to cache
(the approximate cache is for full-sequence bidirectional models such as LLaDA).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import DecodeState
from .block_diffusion import BlockCommit, OpenSlots


def factor_commit(conf: torch.Tensor, factor: float) -> torch.Tensor:
    """(K,) confidences, slot 0 committed first -> (K,) bool: the slots Fast-dLLM's factor rule
    commits. The other slots, most confident first, join while the n-th committed token (the head
    being the first) has confidence >= 1 - factor / (n + 1)."""
    order = conf[1:].argsort(descending=True) + 1
    n = torch.arange(2, conf.shape[0] + 1, device=conf.device)             # the n-th committed token
    joins = ((n + 1) * (1 - conf[order].double()) <= factor).long().cumprod(0).bool()   # until the first miss
    keep = torch.zeros(conf.shape[0], dtype=torch.bool, device=conf.device)
    keep[0] = True
    keep[order] = joins
    return keep


@dataclass(frozen=True)
class FastDLLMFactor(BlockCommit):
    block_size: int = 8
    factor: float = 1.0
    mask_token_id: int | None = None   # default: the adapter config's extra["mask_token_id"]
    prefix_only: bool = False          # fill only the committed run right after the head
    hold_repeats: bool = False         # never fill a slot with the token right before it (BlockCommit)

    name: ClassVar[str] = "fast_dllm_factor"

    def setup(self, state: DecodeState) -> None:
        if self.factor < 0:
            raise ValueError(f"factor must be >= 0, got {self.factor}; 0 commits only the head (ar)")

    def commit(self, state: DecodeState, b: int, slots: OpenSlots) -> torch.Tensor:
        return factor_commit(slots.conf, self.factor)
