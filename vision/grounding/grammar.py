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

from functools import lru_cache

import torch

from .model import COORD0, END, EOS, GRID, NONE, OBJ


def allowed_mask(q: torch.Tensor, prompt_len: torch.Tensor, block: int, vocab: int) -> torch.Tensor:
    """q (B, N) target positions, prompt_len (B,) -> (B, N, V) bool, True = allowed: each slot's
    row of `rule_table`."""
    rules = [[0 if t < p else 1 if t == p else 2 + (t - p) % block for t in row]
             for row, p in zip(q.tolist(), prompt_len.tolist())]                # a few slots: plain Python
    return rule_table(block, vocab, q.device)[torch.tensor(rules, device=q.device)]


@lru_cache(maxsize=16)
def rule_table(block: int, vocab: int, device: torch.device) -> torch.Tensor:
    """(block + 2, V) bool: the tokens each rule allows. Rule 0 a prompt slot (no rule), 1 the first
    answer token, 2 + k slot k of a block."""
    allow = torch.zeros(block + 2, vocab, dtype=torch.bool, device=device)
    allow[0] = True
    allow[2, [OBJ, EOS]] = True
    allow[3:block + 1, COORD0:COORD0 + GRID + 1] = True
    allow[block + 1, END] = True
    allow[1] = allow[2]
    allow[1, NONE] = True
    return allow


class BoxGrammar:
    """Wraps a GroundingAdapter; each row's prompt length anchors the block layout. A grammar made
    with `prompt_lengths` (one per row, over an adapter bound to those rows) puts them into each
    cache it makes (`cache.row_inputs`), so rows of different requests run together through any
    grammar of the model (suite.scheduler moves them)."""

    def __init__(self, inner, prompt_lengths: list[int] | None = None):
        self.inner = inner
        self.block = inner.config.extra["block_size"]
        device = next(inner.model.parameters()).device
        self.prompt_len = None if prompt_lengths is None else \
            torch.tensor(prompt_lengths, dtype=torch.long, device=device)[:, None]

    def __getattr__(self, name):             # config, capabilities, task, encoder_states: the inner adapter's
        return getattr(self.inner, name)

    def new_cache(self, batch: int, max_len: int | None = None):
        cache = self.inner.new_cache(batch, max_len)
        if self.prompt_len is not None:
            cache.row_inputs["prompt_len"] = self.prompt_len
        return cache

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        logits = self.inner(tokens, positions, cache, attention_mask, logits_from=logits_from)   # (B, N', V)
        q = positions[:, logits_from:].to(logits.device) + 1
        prompt_len = cache.row_inputs["prompt_len"][:, 0].to(logits.device)
        allow = allowed_mask(q, prompt_len, self.block, logits.shape[-1])
        return logits.masked_fill(~allow, float("-inf"))
