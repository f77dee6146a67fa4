"""A transformers cache layer that appends in place (suite.cache.growing_cache builds caches of it)."""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """A transformers `DynamicLayer` whose K/V live in a buffer with spare slots: a forward's N new
    slots are written in place (O(N)) instead of concatenated onto the whole cache (O(S) a step,
    O(S^2) a request; 74% of a video step at S = 2048). The buffer grows by half when full; `keys`
    and `values` are views of its first slots, so a crop is a view and transformers sees the usual
    tensors. Whoever replaces `keys` (a gather, a batch select) hands the layer a new buffer (`seat`)."""

    _kbuf = _vbuf = None

    @staticmethod
    def capacity(end: int) -> int:
        """Slots a buffer holding `end` of them gets (spare for the appends that follow)."""
        return max(64, end + end // 2)

    def seat(self, kbuf: torch.Tensor, vbuf: torch.Tensor, length: int) -> None:
        """Take buffers (B, H, capacity, D) whose first `length` slots are this layer's K/V (rows joined
        or selected): appends go on writing into them."""
        self._kbuf, self._vbuf = kbuf, vbuf
        self.keys, self.values = kbuf[..., :length, :], vbuf[..., :length, :]
        self.device, self.is_initialized = kbuf.device, True

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows `indices` (any order; at any length, 0 slots included): one gather of the buffer."""
        if self.keys is None or self.keys.dim() != 4:
            return
        if self._kbuf is not None and self.keys.data_ptr() == self._kbuf.data_ptr():
            self.seat(self._kbuf.index_select(0, indices), self._vbuf.index_select(0, indices), self.keys.shape[-2])
        else:
            self.keys, self.values = self.keys.index_select(0, indices), self.values.index_select(0, indices)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        end = n + key_states.shape[-2]
        if not self._owns_views(key_states) or end > self._kbuf.shape[-2]:
            self._regrow(n, end, key_states, value_states)
        self._kbuf[..., n:end, :] = key_states
        self._vbuf[..., n:end, :] = value_states
        self.keys, self.values = self._kbuf[..., :end, :], self._vbuf[..., :end, :]
        return self.keys, self.values

    def _owns_views(self, new: torch.Tensor) -> bool:
        """keys/values are still views of the buffer's first slots, for rows and heads like `new`'s."""
        return (self._kbuf is not None and self._kbuf.shape[:-2] == new.shape[:-2]
                and self.keys.data_ptr() == self._kbuf.data_ptr() and self.values.data_ptr() == self._vbuf.data_ptr())

    def _regrow(self, n: int, end: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        capacity = self.capacity(end)
        bufs = []
        for old, new in ((self.keys, key_states), (self.values, value_states)):
            buf = new.new_empty(*new.shape[:-2], capacity, new.shape[-1])
            if n:
                buf[..., :n, :] = old[..., :n, :]
            bufs.append(buf)
        self._kbuf, self._vbuf = bufs
