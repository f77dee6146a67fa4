"""The answer grammar as a logit filter: a wrapping adapter that lets each slot predict only the
tokens its place in the answer allows, for every decoder alike (compose, don't copy).

After a prompt of P tokens, the token at position q (q >= P) is slot k = (q - P) mod B of a block:
k = 0 the block head (<obj>, or </s>; <none> only as the first answer token), 1..B-2 coordinate
tokens, B-1 the block end </obj>. A slot at position p predicts the token at p + 1, clean or MASK
alike, so the filter needs only positions and each row's prompt length. Out-of-distribution images
(real photos) then still give well-formed boxes; on the generated scenes the model rarely breaks
the grammar by itself.
"""
from __future__ import annotations

import torch

from .model import COORD0, END, EOS, GRID, NONE, OBJ


def allowed_mask(q: torch.Tensor, prompt_len: torch.Tensor, block: int, vocab: int) -> torch.Tensor:
    """q (B, N) target positions, prompt_len (B,) -> (B, N, V) bool, True = allowed."""
    k = torch.remainder(q - prompt_len[:, None], block)                        # (B, N)
    inside = q >= prompt_len[:, None]
    allow = torch.zeros(*q.shape, vocab, dtype=torch.bool)
    head, last = inside & (k == 0), inside & (k == block - 1)
    allow[..., OBJ] |= head
    allow[..., EOS] |= head
    allow[..., NONE] |= inside & (q == prompt_len[:, None])
    allow[..., END] |= last
    allow[..., COORD0:COORD0 + GRID + 1] |= (inside & (k > 0) & (k < block - 1))[..., None]
    allow |= ~inside[..., None]                                                 # prompt slots: no rule
    return allow


class BoxGrammar:
    """Wraps a bound GroundingAdapter; `prompt_lengths` (one per row) anchor the block layout."""

    def __init__(self, inner, prompt_lengths: list[int]):
        self.inner = inner
        self.prompt_len = torch.tensor(prompt_lengths, dtype=torch.long)
        self.block = inner.config.extra["block_size"]

    def __getattr__(self, name):             # config, capabilities, new_cache, task, encoder_states
        return getattr(self.inner, name)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        logits = self.inner(tokens, positions, cache, attention_mask, logits_from=logits_from)   # (B, N', V)
        q = positions[:, logits_from:].to(logits.device) + 1
        allow = allowed_mask(q, self.prompt_len.to(logits.device), self.block, logits.shape[-1])
        return logits.masked_fill(~allow, float("-inf"))
