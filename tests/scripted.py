"""A scripted ModelAdapter: logits are a known function of each query's own history.

The history of a query is read from the cache (token ids stored as 'keys' of one layer, so the
real KVCache bookkeeping, rollback and compaction are exercised) plus the visible draft slots."""
from __future__ import annotations

import torch

from suite import AdapterConfig, KVCache


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


class ScriptedModel:
    """next_token(history) -> int decides a one-hot-ish logit row (a large margin, so greedy is exact)."""

    supports_custom_mask = True
    supports_rollback = True

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
