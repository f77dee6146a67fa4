"""Classifier-free guidance as a model adapter (Ho & Salimans 2022), so every decoder gets CFG.

The wrapped batch is doubled: conditional rows, then unconditional rows whose prompt tokens are
replaced by `uncond_ids` (e.g. the null class), position by position. logits = u + s (c - u).
Each row's unconditional prompt and scale travel in the cache it makes (`cache.row_inputs`), so
rows of requests with other prompts and scales run together through one instance over the same
model (suite.scheduler) and leave or join a running batch.
"""
from __future__ import annotations

import torch

from .cache import KVCache
from .models.adapters import AdapterBase
from .models.capabilities import Capabilities


class ClassifierFreeGuidance(AdapterBase):
    def __init__(self, model, scale: float, uncond_ids: torch.Tensor):
        if scale < 0:
            raise ValueError(f"guidance scale must be >= 0 (1 = no guidance), got {scale}")
        self.model, self.scale = model, float(scale)
        self.uncond_ids = torch.as_tensor(uncond_ids)   # (B, P) unconditional prompt tokens
        self.config = model.config
        inner = model.capabilities         # what the inner model can do, but no cost model: a step is two rows
        widths = inner.row_widths and tuple((most // 2, slots) for most, slots in inner.row_widths)   # a row is two
        self.capabilities = Capabilities(custom_mask=inner.custom_mask, row_moves=inner.row_moves,
                                         plain_mask=inner.plain_mask, row_widths=widths)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        """The inner model's cache of 2 x batch rows, seen as batch rows, carrying this instance's
        unconditional prompts and scale as its rows' inputs."""
        uncond = self.uncond_ids[:batch]           # an empty batch (rows join it later) carries none
        if len(uncond) != batch:
            raise ValueError(f"classifier-free guidance has {len(self.uncond_ids)} unconditional prompts for "
                             f"{batch} rows: give one per row")
        cache = self.model.new_cache(2 * batch, max_len).grouped(2)
        uncond = uncond.to(cache.valid.device)     # the request's device: its cache's
        cache.row_inputs = {**cache.row_inputs, "uncond_ids": uncond,
                            "uncond_lengths": torch.full((batch, 1), uncond.shape[1], device=uncond.device),
                            "guidance": torch.full((batch, 1), self.scale, device=uncond.device)}
        return cache

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        rows = cache.row_inputs
        uncond_ids = rows["uncond_ids"]
        in_prompt = positions < rows["uncond_lengths"]
        uncond = torch.where(in_prompt, uncond_ids.gather(1, positions.clamp(max=uncond_ids.shape[1] - 1)), tokens)
        both = torch.cat([tokens, uncond])
        doubled = _Doubled(cache)
        mask = None if attention_mask is None else torch.cat([attention_mask, attention_mask])
        logits = self.model(both, torch.cat([positions, positions]), doubled, mask, logits_from=logits_from)
        cond, unc = logits.chunk(2)
        scale = rows["guidance"].to(logits.dtype).view(-1, *(1,) * (logits.dim() - 1))
        return unc + scale * (cond - unc)


class _Doubled:
    """A view of a fanout-2 cache as the inner adapter's batch of 2B rows."""

    def __init__(self, cache: KVCache):
        self.backend, self._cache = cache.backend, cache

    @property
    def valid(self) -> torch.Tensor:         # built only when a forward asks for a mask
        return torch.cat([self._cache.valid, self._cache.valid])

    @property
    def positions(self) -> torch.Tensor:
        return torch.cat([self._cache.positions, self._cache.positions])

    @property
    def num_slots(self) -> int:
        return self._cache.num_slots

    @property
    def row_inputs(self) -> dict:            # the adapter's per-row inputs, as its cache made them
        return self._cache.row_inputs

    @property
    def capacity(self) -> int | None:        # a static cache's slots (suite.models.static_cache)
        return self._cache.capacity

    def make_room(self, n: int) -> None:
        self._cache.make_room(n)

    def read_window(self, n: int, whole: bool = False) -> int:
        return self._cache.read_window(n, whole)

    def attention_mask(self, draft_mask):
        return KVCache.attention_mask(self, draft_mask)
