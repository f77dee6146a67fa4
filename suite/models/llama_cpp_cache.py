"""The KV cache of the llama.cpp engine: each row is one llama.cpp sequence (`seq_id`) of one shared context.

llama.cpp keeps K/V in its own cells, tagged by sequence and position; a token attends to the cells of its
sequence at positions up to its own. So a row's live K/V is simply "positions 0 .. filled-1 of its sequence",
and every change of validity the loop makes (`drop_tail`, `keep_new`, `discard`, `append` of padded slots)
removes the dead positions from the sequence at once (`llama_memory_seq_rm`). The slot bookkeeping of
`KVCache` (valid, positions, holes, compaction) runs unchanged on top; nothing is ever gathered or copied.
Rows hold chains (consecutive positions): decoders that need custom masks (trees) do not run here.
"""
from __future__ import annotations

import weakref

import torch

from ..cache import KVCache


class _NoBackend:
    """What `KVCache` calls on its backend: nothing to crop or gather (llama.cpp holds the K/V)."""
    layers: list = []

    def crop(self, n: int) -> None:
        pass


class LlamaCppCache(KVCache):
    def __init__(self, batch: int, engine):
        super().__init__(batch, backend=_NoBackend(), device=torch.device("cpu"))
        self.engine = engine
        self.seqs: list[int] = engine.take_seqs(batch)   # row b is llama.cpp sequence seqs[b]
        self.filled = [0] * batch            # positions 0 .. filled[b]-1 of row b are in llama.cpp's memory
        self.submitted = [0] * batch         # real slots the last forward wrote per row (`append` checks them)
        self._owned = list(self.seqs)        # freed when this cache goes (a finished request)
        weakref.finalize(self, engine.release_seqs, self._owned)

    # -- validity changes: the dead positions leave llama.cpp's memory --------------------------------

    def append(self, positions: torch.Tensor, valid: torch.Tensor, dense: bool = False) -> slice:
        """The loop records the slots the forward wrote; a slot the forward took as real but `valid`
        marks as padding (a row whose whole draft is padding at position 0) leaves the sequence now."""
        counts = valid.sum(1).tolist()     # not `dense`: a fixed-shape step appends its padding as dense too
        for b, (wrote, real) in enumerate(zip(self.submitted, counts)):
            if real > wrote:
                raise ValueError("the llama.cpp engine decodes chains: each row's draft continues its cached "
                                 "positions one by one; this decoder drafts otherwise (a tree or out-of-order "
                                 "slots) and needs an adapter with custom_mask (the torch engine)")
            if real < wrote:
                self._forget(b, wrote - real)
        self.submitted = [0] * self.batch
        return super().append(positions, valid, dense)

    def drop_tail(self, n: int) -> None:
        if n > 0:
            dead = self.valid[:, -n:].sum(1).tolist()
            for b, d in enumerate(dead):
                self._forget(b, d)
        super().drop_tail(n)

    def keep_new(self, slots: slice, keep: torch.Tensor) -> None:
        self._forget_slots(self.valid[:, slots] & ~keep, self.positions[:, slots])
        super().keep_new(slots, keep)

    def discard(self, slots: torch.Tensor) -> None:
        self._forget_slots(self.valid & slots, self.positions)
        super().discard(slots)

    def _forget_slots(self, dead: torch.Tensor, positions: torch.Tensor) -> None:
        """Remove the positions of the `dead` slots (B, S) of each row: they must be the row's last ones."""
        for b in range(self.batch):
            gone = positions[b][dead[b]].tolist()
            if gone and sorted(gone) != list(range(self.filled[b] - len(gone), self.filled[b])):
                raise ValueError("the llama.cpp engine drops only a row's rejected tail; this decoder drops "
                                 "slots inside a row (a tree draft): use an adapter with custom_mask (the torch engine)")
            self._forget(b, len(gone))

    def _forget(self, b: int, count: int) -> None:
        """Drop the last `count` positions of row b from its llama.cpp sequence."""
        if count > 0:
            self.filled[b] -= count
            self.engine.seq_rm(self.seqs[b], self.filled[b], -1)

    # -- rows leave and join: sequence ids move with their rows ----------------------------------------

    def _gather_backend(self, order: torch.Tensor) -> None:
        pass     # llama.cpp's cells are found by (sequence, position), not by slot

    def _select_backend(self, copies: torch.Tensor) -> None:
        pass

    def _extend_backend(self, other: KVCache, length: int) -> None:
        pass

    def select(self, index) -> None:
        index = list(index)
        kept = set(index)
        gone = [s for b, s in enumerate(self.seqs) if b not in kept]
        super().select(index)
        self.seqs = [self.seqs[b] for b in index]
        self.filled = [self.filled[b] for b in index]
        self.submitted = [self.submitted[b] for b in index]
        self._release(gone)

    def extend(self, other: KVCache) -> None:
        if not isinstance(other, LlamaCppCache) or other.engine is not self.engine:
            raise ValueError("cannot join rows of another model to a llama.cpp cache: rows of one batch run "
                             "through one adapter, whose new_cache builds both")
        if self.batch == 0:
            self._release(list(self.seqs))
            self.seqs, self.filled, self.submitted = [], [], []
        super().extend(other)
        self.seqs += other.seqs
        self.filled += other.filled
        self.submitted += other.submitted
        self._owned += other.seqs            # this cache frees them now; the other one no longer does
        other._owned.clear()
        other.seqs, other.filled, other.submitted = [], [], []

    def _release(self, seqs: list[int]) -> None:
        for s in seqs:
            self._owned.remove(s)
        self.engine.release_seqs(seqs)
