"""A slot-indexed KV cache with per-row validity, so rows roll back independently.

The model's own cache (a transformers `DynamicCache`) stores K/V in slots along one axis S
shared by the batch. Here each row b tracks which slots hold its live tokens (`valid`, (B, S))
and their logical positions (`positions`, (B, S)). Rejected drafts are discarded by marking
their slots invalid (one visible call, `discard`); `compact` then drops slots no row needs,
cropping a common tail cheaply or gathering each row's live slots to the front. Validity
changes only through `append`, `keep_new`, `drop_tail` and `discard`: the cache tracks on the
host whether it has holes, so a step without rejections needs neither a mask nor a compaction.
"""
from __future__ import annotations

import copy

import torch


def growing_cache():
    """A transformers `DynamicCache` of `GrowingLayer`s (appends in place): a KVCache's default backend.
    (transformers is imported here, not at the top: `import suite` stays light.)"""
    from transformers import DynamicCache

    from .growing_layer import GrowingLayer
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


class KVCache:
    def __init__(self, batch: int, backend=None, fanout: int = 1, device=None):
        self.backend = growing_cache() if backend is None else backend   # the model's cache object
        self.fanout = fanout            # backend rows per logical row (2 under CFG)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.positions = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self.holes = False     # some slot may be dead for some row (host-side, conservative: no sync to know)
        self._dirty = False    # slots died since the last compact

    def grouped(self, fanout: int) -> "KVCache":
        """This cache seen as batch/fanout logical rows of `fanout` backend rows each (CFG)."""
        view = copy.copy(self)
        view.fanout = fanout
        view.valid, view.positions = self.valid[:self.batch // fanout], self.positions[:self.batch // fanout]
        return view

    @property
    def num_slots(self) -> int:
        return self.valid.shape[1]

    @property
    def batch(self) -> int:
        return self.valid.shape[0]

    def lengths(self) -> torch.Tensor:
        """(B,) live tokens per row."""
        return self.valid.sum(1)

    def append(self, positions: torch.Tensor, valid: torch.Tensor, dense: bool = False) -> slice:
        """Record N new slots the forward just wrote (dense: the caller knows `valid` is all
        True); returns their slots, `slice(start, start + N)`."""
        start = self.num_slots
        self.positions = torch.cat([self.positions, positions], 1)
        self.valid = torch.cat([self.valid, valid], 1)
        if not dense:
            self.holes = self._dirty = True
        return slice(start, self.num_slots)

    def drop_tail(self, n: int) -> None:
        """Forget the last n slots of every row (a rollback: the backend crops them)."""
        if n > 0:
            self.backend.crop(-n)     # transformers 5: negative = drop that many
            self.valid, self.positions = self.valid[:, :-n], self.positions[:, :-n]

    def keep_new(self, slots: slice, keep: torch.Tensor) -> None:
        """Of the slots just appended, only those with `keep` (B, N) stay live."""
        self.valid[:, slots] &= keep
        self.holes = self._dirty = True

    def discard(self, slots: torch.Tensor) -> None:
        """Mark slots (B, S) bool as dead: their K/V is never attended again."""
        self.valid &= ~slots
        self.holes = self._dirty = True

    def compact(self, max_dead_fraction: float = 0.25) -> None:
        """Free dead slots: crop the tail no row uses; gather live slots to the front of each
        row once holes take more than `max_dead_fraction` of the slots. Nothing to do (and no
        host sync) when no slot died since the last call."""
        if not self._dirty:
            return
        self._dirty = False
        self._compact(max_dead_fraction)
        self.holes = not bool(self.valid.all())

    def _compact(self, max_dead_fraction: float) -> None:
        used = self.valid.any(0).nonzero()
        end = int(used[-1]) + 1 if used.numel() else 0
        if end < self.num_slots:
            self.backend.crop(end - self.num_slots)  # transformers 5: negative = drop that many
            self.valid, self.positions = self.valid[:, :end], self.positions[:, :end]
        live = self.lengths()
        if self.num_slots == 0 or 1 - float(live.sum()) / live.numel() / self.num_slots <= max_dead_fraction:
            return
        keep = int(live.max())
        order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :keep]  # (B, keep)
        self.valid = self.valid.gather(1, order)
        self.positions = self.positions.gather(1, order)
        self._gather_backend(order)

    def _gather_backend(self, order: torch.Tensor) -> None:
        idx = order.repeat(self.fanout, 1)  # (fanout*B, keep): copies are stacked, not interleaved
        for layer in self.backend.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                if t is None or t.numel() == 0:
                    continue
                g = idx[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                setattr(layer, name, t.gather(2, g))

    def attention_mask(self, draft_mask: torch.Tensor, past_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Cached slots (by validity, AND past_mask (B, N, S) if given) ++ the draft's own
        visibility (B, N, N) -> (B, 1, N, S+N) bool."""
        n = draft_mask.shape[1]
        past = self.valid[:, None, :].expand(-1, n, -1)
        if past_mask is not None:
            past = past & past_mask
        return torch.cat([past, draft_mask], 2)[:, None]
