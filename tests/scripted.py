"""A scripted ModelAdapter: logits are a known function of each query's own history.

The history of a query is read from the cache (token ids stored as 'keys' of one layer, so the
real KVCache bookkeeping, rollback and compaction are exercised) plus the visible draft slots."""
from __future__ import annotations

import torch

from suite import AdapterConfig, KVCache
from vision.grounding.model import COORD0, END, EOS, GRID, MASK, NONE, OBJ
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities


class _Layer:
    def __init__(self):
        self.keys = torch.zeros(0, 1, 0, 1, dtype=torch.long)
        self.values = torch.zeros(0, 1, 0, 1, dtype=torch.long)


class _Backend:
    def __init__(self, batch: int):
        self.layers = [_Layer()]
        self.layers[0].keys = torch.zeros(batch, 1, 0, 1, dtype=torch.long)
        self.layers[0].values = torch.zeros(batch, 1, 0, 1, dtype=torch.long)

    def crop(self, n: int) -> None:
        for layer in self.layers:
            layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]

    def write(self, tokens: torch.Tensor) -> None:
        layer = self.layers[0]
        layer.keys = torch.cat([layer.keys, tokens[:, None, :, None]], 2)
        layer.values = layer.keys


class ScriptedModel(AdapterBase):
    """next_token(history) -> int decides a one-hot-ish logit row (a large margin, so greedy is exact)."""

    capabilities = Capabilities(custom_mask=True)

    def __init__(self, next_token, vocab: int = 16, eos: int | None = None):
        self.next_token = next_token
        self.config = AdapterConfig(vocab_size=vocab, eos_token_ids=frozenset() if eos is None else {eos},
                                    pad_token_id=0, max_length=10_000)
        self.calls = 0

    def new_cache(self, batch: int, max_len=None) -> KVCache:
        return KVCache(batch, _Backend(batch))

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        self.calls += 1
        cached = cache.backend.layers[0].keys[:, 0, :, 0]          # (B, S) token ids by slot
        slot_tokens = torch.cat([cached, tokens], 1)               # (B, S+N)
        slot_pos = torch.cat([cache.positions, positions], 1)
        b, n = tokens.shape
        logits = torch.full((b, n, self.config.vocab_size), -10.0)
        for r in range(b):
            for i in range(n):
                seen = attention_mask[r, 0, i].nonzero().flatten()
                order = seen[slot_pos[r, seen].argsort()]
                history = slot_tokens[r, order].tolist()
                logits[r, i, self.next_token(history)] = 10.0
        cache.backend.write(tokens)
        return logits[:, logits_from:]


def successor(vocab: int):
    """The next token is the last one plus one (mod vocab)."""
    return lambda history: (history[-1] + 1) % vocab


# ---------------------------------------------------------------- a scripted grounding model

C = COORD0
PROMPT = [1, 5, 1100, 1101, 4]                    # BOS, task, two query tokens, SEP
TWO_BOXES = [OBJ, C + 100, C + 200, C + 300, C + 400, END, OBJ, C + 500, C + 50, C + 900, C + 350, END, EOS]


class BoxScript(ScriptedModel):
    """Clean slots predict the scripted answer; MASK (noisy) slots call `noisy(target, slot in block)`:
    a token (logit 10), or {token: logit} for a draft with runners-up."""

    def __init__(self, answers, noisy=lambda t, j: t, block=6):
        super().__init__(lambda h: 0, vocab=COORD0 + GRID + 1 + 200, eos=EOS)
        self.answers, self.noisy, self.block = answers, noisy, block
        self.config = AdapterConfig(
            vocab_size=self.config.vocab_size, eos_token_ids=frozenset([EOS, NONE]), pad_token_id=0, max_length=200,
            extra={"mask_token_id": MASK, "block_size": block, "block_head_id": OBJ, "block_end_id": END,
                   "coord_lo": COORD0, "coord_hi": COORD0 + GRID, "box_format": "xyxy"})

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        self.calls += 1
        b, n = tokens.shape
        logits = torch.full((b, n, self.config.vocab_size), -10.0)
        for r in range(b):
            seq = PROMPT + self.answers[r]
            for i in range(n):
                p = int(positions[r, i])
                target = seq[p + 1] if p + 1 < len(seq) else EOS
                if int(tokens[r, i]) == MASK:
                    first = min(int(q) for q, t in zip(positions[r], tokens[r]) if int(t) == MASK)
                    target = self.noisy(target, p - first + 2)          # slot index in its block (2..B-1)
                for t, v in (target.items() if isinstance(target, dict) else [(target, 10.0)]):
                    logits[r, i, t] = v
        cache.backend.write(tokens)
        return logits[:, logits_from:]
