"""A slot-indexed KV cache with per-row validity, so rows roll back independently.

The model's own cache (a transformers `DynamicCache`) stores K/V in slots along one axis S
shared by the batch. Here each row b tracks which slots hold its live tokens (`valid`, (B, S))
and their logical positions (`positions`, (B, S)). Rejected drafts are discarded by marking
their slots invalid (one visible call, `discard`); `compact` then drops slots no row needs,
cropping a common tail cheaply or gathering each row's live slots to the front. Validity
changes only through `append`, `keep_new`, `drop_tail`, `discard`, `select` and `extend`: the cache
tracks on the host whether it has holes, so a step without rejections needs neither a mask nor a
compaction.

Rows leave and join a running batch (continuous batching): `select` keeps some rows (and drops the
slots no remaining row uses), `extend` appends another cache's rows after this one's, padding the
shorter slot axis with dead slots.
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
    capacity: int | None = None     # slots a fixed-size cache holds (suite.models.static_cache); None: it grows

    def __init__(self, batch: int, backend=None, fanout: int = 1, device=None):
        self.backend = growing_cache() if backend is None else backend   # the model's cache object
        self.fanout = fanout            # backend rows per logical row (2 under CFG)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        self.positions = torch.zeros(batch, 0, dtype=torch.long, device=device)
        self.holes = False     # some slot may be dead for some row (host-side, conservative: no sync to know)
        self._dirty = False    # slots died since the last compact
        # per-row inputs an adapter reads beside the K/V, (B, L, ...) each (an encoder-decoder's encoder
        # states): they move with their rows (select, extend), so the adapter itself holds nothing per
        # row; rows of different L join zero-padded to the longest (`inputs_padded`: the adapter masks)
        self.row_inputs: dict[str, torch.Tensor] = {}
        self.inputs_padded = False
        self.encdec = None     # an encoder-decoder's cross-attention cache (its adapter's new_cache sets it)

    def grouped(self, fanout: int) -> "KVCache":
        """This cache seen as batch/fanout logical rows of `fanout` backend rows each (CFG); row inputs
        are per logical row too (the first copy's: the copies of a row share what they read)."""
        view = copy.copy(self)
        view.fanout = fanout
        rows = self.batch // fanout
        view.valid, view.positions = self.valid[:rows], self.positions[:rows]
        view.row_inputs = {name: t[:rows] for name, t in self.row_inputs.items()}
        return view

    @property
    def num_slots(self) -> int:
        return self.valid.shape[1]

    def make_room(self, n: int) -> None:
        """Make room for n more slots before a forward writes them (a fixed-size cache grows; this one
        grows as it appends)."""

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
        self.holes = self._compact(max_dead_fraction)

    def _compact(self, max_dead_fraction: float) -> bool:
        """Crop, and gather when worth it; whether holes are left. One host read: the used width,
        the live slots' total and the longest and shortest row's."""
        live = self.lengths()
        slot = torch.arange(1, self.num_slots + 1, device=self.valid.device)
        none = live.new_zeros(1)
        end, total, longest, shortest = torch.cat([
            (self.valid.any(0) * slot).max().reshape(1) if self.num_slots else none, live.sum().reshape(1),
            torch.cat([live, none]).max().reshape(1), live.min().reshape(1) if len(live) else none]).tolist()
        self._crop_to(end)
        if end == 0 or 1 - total / len(live) / end <= max_dead_fraction:
            return total != len(live) * end
        keep = longest
        order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :keep]  # (B, keep)
        self.valid = self.valid.gather(1, order)
        self.positions = self.positions.gather(1, order)
        self._gather_backend(order)
        return shortest != longest

    def _crop_to(self, end: int) -> None:
        """Drop every slot from `end` on (no row uses them)."""
        if end < self.num_slots:
            self.backend.crop(end - self.num_slots)  # transformers 5: negative = drop that many
            self.valid, self.positions = self.valid[:, :end], self.positions[:, :end]

    def _gather_backend(self, order: torch.Tensor) -> None:
        idx = order.repeat(self.fanout, 1)  # (fanout*B, keep): copies are stacked, not interleaved
        keep = idx.shape[1]
        for layer in self.backend.layers:
            kv = layer_tensors(layer)
            if kv is None or kv[0].numel() == 0:
                continue
            if hasattr(layer, "seat"):           # GrowingLayer: into a buffer with spare slots (no regrow next)
                seat_layer(layer, *(gather_slots(t, idx, slots_for(layer, keep)) for t in kv), keep)
            else:
                layer.keys, layer.values = (gather_slots(t, idx) for t in kv)

    def select(self, index) -> None:
        """Keep only the logical rows `index` (a list of ints, in that order), in place: validity,
        positions and every layer's K/V rows (each row's `fanout` stacked copies), the cross-attention
        K/V too (`encdec`). Then the slots no remaining row uses go (`compact`: the tail crop, the gather
        past 25% dead slots; no slot at all for zero rows), so a finished long row leaves no wide cache
        behind. Without holes it stays without holes and costs no host sync; with holes, compaction
        reads whether some remain (one sync)."""
        index = list(index)
        if any(not 0 <= i < self.batch for i in index):
            raise ValueError(f"select: rows {index} are not all rows of this cache (0 .. {self.batch - 1})")
        rows = torch.as_tensor(index, dtype=torch.long, device=self.valid.device)
        copies = torch.cat([rows + f * self.batch for f in range(self.fanout)])   # backend rows, stacked copies
        self.valid, self.positions = self.valid.index_select(0, rows), self.positions.index_select(0, rows)
        self._select_backend(copies)
        self.row_inputs = {name: t.index_select(0, rows) for name, t in self.row_inputs.items()}
        if self.encdec is not None:
            for layer in self.encdec.cross_attention_cache.layers:
                _select_layer(layer, copies)
        if self.batch == 0:
            self.drop_tail(self.num_slots)
            self.holes = self._dirty = False
        elif self.holes:
            self._dirty = True
            self.compact()

    def extend(self, other: "KVCache") -> None:
        """Append `other`'s rows after this cache's (a cache of the same model and fanout, e.g. a new
        request prefilled alone), in place. The shorter slot axis is padded with dead slots (valid
        False, zero K/V) at its end, so rows of both sides keep their slots; any padding, or holes on
        either side, set `holes` (forwards take the masked path until compaction removes them). An
        empty side (no rows, or no slots: a request not prefilled yet) is fine."""
        if other.fanout != self.fanout:
            raise ValueError(f"cannot join a cache of fanout {other.fanout} to one of fanout {self.fanout}: "
                             "rows of one batch run through one adapter (CFG doubles every row)")
        if type(other) is not type(self):
            raise ValueError(f"cannot join a {type(other).__name__} to a {type(self).__name__}: rows of one batch "
                             "run through one adapter, whose new_cache builds both")
        if self.batch == 0:                      # nothing of ours survives: no slots, no holes
            self.drop_tail(self.num_slots)
            self.holes = self._dirty = False
        if other.batch == 0:
            return
        length = max(self.num_slots, other.num_slots)
        padded = self.batch > 0 and self.num_slots != other.num_slots
        self.row_inputs = _join_row_inputs(self, other)
        self._extend_backend(other, length)
        _extend_cross(self, other)
        self.valid = torch.cat([_pad_slots(self.valid, length), _pad_slots(other.valid, length)])
        self.positions = torch.cat([_pad_slots(self.positions, length), _pad_slots(other.positions, length)])
        self.holes = self.holes or other.holes or padded
        self._dirty = self._dirty or other._dirty or padded

    def _select_backend(self, copies: torch.Tensor) -> None:
        for layer in self.backend.layers:
            _select_layer(layer, copies)

    def _extend_backend(self, other: "KVCache", length: int) -> None:
        """Each layer's K/V: this cache's rows, then other's, each zero-padded to `length` slots."""
        _join_layers(self.backend, other.backend, self.fanout, self.batch, other.batch, length)

    def attention_mask(self, draft_mask: torch.Tensor, past_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Cached slots (by validity, AND past_mask (B, N, S) if given) ++ the draft's own
        visibility (B, N, N) -> (B, 1, N, S+N) bool."""
        n = draft_mask.shape[1]
        past = self.valid[:, None, :].expand(-1, n, -1)
        if past_mask is not None:
            past = past & past_mask
        return torch.cat([past, draft_mask], 2)[:, None]


def row_inputs_shape(cache: KVCache) -> tuple:
    """What rows must share to join one cache: the names of their row inputs and each one's
    dimensions past its length axis."""
    return tuple((name, tuple(t.shape[2:])) for name, t in sorted(cache.row_inputs.items()))


def _join_row_inputs(cache: KVCache, other: KVCache) -> dict[str, torch.Tensor]:
    """Both sides' row inputs, rows stacked; a shorter length axis is zero-padded (`inputs_padded`)."""
    if not cache.batch:
        cache.inputs_padded = other.inputs_padded
        return dict(other.row_inputs)
    if row_inputs_shape(cache) != row_inputs_shape(other):
        raise ValueError(f"cannot join rows with inputs {row_inputs_shape(other)} to rows with "
                         f"{row_inputs_shape(cache)}: rows of one batch read inputs of one kind")
    joined = {}
    for name, mine in cache.row_inputs.items():
        theirs = other.row_inputs[name]
        length = max(mine.shape[1], theirs.shape[1])
        cache.inputs_padded |= other.inputs_padded or mine.shape[1] != theirs.shape[1]
        joined[name] = torch.cat([_pad_slots(mine, length), _pad_slots(theirs, length)])
    return joined


def _pad_slots(t: torch.Tensor, length: int) -> torch.Tensor:
    """(B, S, ...) -> (B, length, ...): the new slots are zero (dead, for `valid`)."""
    if t.shape[1] >= length:
        return t
    return torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, length - t.shape[1]))


# -- transformers' cache layers: the one place that reads what their classes may lack ---------------

def layer_tensors(layer) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A backend layer's (keys, values) as it holds them, or None (empty, or a layer without K/V)."""
    keys = getattr(layer, "keys", None)
    return None if keys is None else (keys, layer.values)


def refuse_sliding(layer, fix: str) -> None:
    """A layer that keeps a sliding window holds no slot per token: rows cannot move in it."""
    if getattr(layer, "is_sliding", False):
        raise ValueError(f"{type(layer).__name__} keeps a sliding window, not one slot per token: rows cannot "
                         f"be selected or joined in it; {fix}")


def new_layer(backend):
    """A fresh layer for `backend` (its `layer_class_to_replicate`), or None when it cannot make one."""
    make = getattr(backend, "layer_class_to_replicate", None)
    return make() if make is not None else None


def _kv(layer) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A layer's (keys, values), (B, H, S, D) each, or None when it holds none yet."""
    refuse_sliding(layer, "use suite's growing cache (the default backend)")
    kv = layer_tensors(layer)
    return kv if kv is not None and kv[0].dim() == 4 else None


def _select_layer(layer, copies: torch.Tensor) -> None:
    if _kv(layer) is None:
        return
    if hasattr(layer, "seat"):                  # GrowingLayer: gathers its buffer, keeps spare slots
        layer.batch_select_indices(copies)
    else:
        layer.keys, layer.values = layer.keys.index_select(0, copies), layer.values.index_select(0, copies)


def join_rows(a: torch.Tensor | None, b: torch.Tensor | None, fanout: int, rows_a: int, rows_b: int,
              capacity: int) -> torch.Tensor:
    """(fanout*rows_a, H, Sa, D) ++ (fanout*rows_b, H, Sb, D) (None: no K/V yet, zeros) ->
    (fanout*(rows_a+rows_b), H, capacity, D): each stacked copy holds a's rows then b's, every slot
    past a part's own is zero (dead: masked, and no NaN garbage to leak through a zero weight)."""
    t = a if a is not None else b
    out = t.new_zeros(fanout * (rows_a + rows_b), t.shape[1], capacity, t.shape[3])
    grid = out.view(fanout, rows_a + rows_b, *out.shape[1:])
    for part, start, rows in ((a, 0, rows_a), (b, rows_a, rows_b)):
        if part is not None and part.shape[2] and rows:
            grid[:, start:start + rows, :, :part.shape[2]] = part.reshape(fanout, rows, *part.shape[1:])
    return out


def _join_layers(mine, theirs, fanout: int, rows_a: int, rows_b: int, length: int) -> None:
    """Every layer of backend `mine` takes its rows then `theirs`' (a layer only one side has yet is
    created from the backend's layer class), zero-padded to `length` slots."""
    for i in range(max(len(mine.layers), len(theirs.layers))):
        a = _kv(mine.layers[i]) if i < len(mine.layers) else None
        b = _kv(theirs.layers[i]) if i < len(theirs.layers) else None
        if a is None and b is None:
            continue
        if i == len(mine.layers):
            made = new_layer(mine)
            mine.layers.append(made if made is not None else copy.copy(theirs.layers[i]))
        layer = mine.layers[i]
        k, v = (join_rows(a and a[j], b and b[j], fanout, rows_a, rows_b, slots_for(layer, length)) for j in (0, 1))
        seat_layer(layer, k, v, length)


def gather_slots(t: torch.Tensor, order: torch.Tensor, slots: int | None = None) -> torch.Tensor:
    """(B, H, keep, D): row b's slots order[b] (order (B, keep)) of t (B, H, S, D), as one index_select over
    t's rows of D values (a gather along S reads element by element: 3x slower in float32 on a CPU, 9x in
    bfloat16); slots: in the first keep slots of a new (B, H, slots, D) buffer (spare slots behind them)."""
    b, h, s, d = t.shape
    if not (t.stride(3) == 1 and t.stride(2) == d and t.stride(1) % d == 0 and t.stride(0) == h * t.stride(1)):
        t = t.contiguous()
    per_head = t.stride(1) // d                              # rows of D from one head's first slot to the next's
    rows = t.as_strided(((b * h - 1) * per_head + s, d), (d, 1))   # every slot of t, as rows (and gaps between heads)
    heads = torch.arange(b * h, device=order.device)[:, None] * per_head
    picked = rows.index_select(0, (heads + order.repeat_interleave(h, 0)).reshape(-1)).view(b, h, -1, d)
    if slots is None:
        return picked
    out = t.new_empty(b, h, slots, d)
    out[:, :, :picked.shape[2]] = picked
    return out


def slots_for(layer, length: int) -> int:
    """The slot axis a backend layer takes for `length` live slots (a GrowingLayer keeps spare room)."""
    return layer.capacity(length) if hasattr(layer, "seat") else length


def seat_layer(layer, k: torch.Tensor, v: torch.Tensor, length: int) -> None:
    """Put K/V (rows, H, slots_for(layer, length), D) holding `length` live slots into a backend layer."""
    if hasattr(layer, "seat"):                  # GrowingLayer
        layer.seat(k, v, length)
    else:
        layer.keys, layer.values = k, v
        if hasattr(layer, "is_initialized"):
            layer.is_initialized, layer.device = True, k.device


def _extend_cross(cache: KVCache, other: KVCache) -> None:
    """An encoder-decoder cache's cross-attention K/V (`cache.encdec`, filled by a request's first
    forward) joins too: rows of different encoder lengths are zero-padded to the longest, slots the
    adapter's encoder mask must hide (it pads its encoder states and mask the same way)."""
    mine, theirs = cache.encdec, other.encdec
    if mine is None and theirs is None:
        return
    if mine is None or theirs is None:
        raise ValueError("cannot join an encoder-decoder cache and a decoder-only one: rows of one batch "
                         "run through one adapter")
    ours = _encoder_length(mine.cross_attention_cache) if cache.batch else 0
    new = _encoder_length(theirs.cross_attention_cache)
    if cache.batch and (ours > 0) != (new > 0):
        raise ValueError("cannot join rows whose cross-attention K/V is computed to rows whose is not yet: "
                         "run the new rows' first forward (their prefill) in their own cache, then extend")
    if not new:
        if not cache.batch:                      # ours had no rows: drop its stale cross K/V
            mine.cross_attention_cache.reset()
            mine.is_updated = {i: False for i in mine.is_updated}
        return
    _join_layers(mine.cross_attention_cache, theirs.cross_attention_cache, cache.fanout, cache.batch, other.batch,
                 max(ours, new))
    mine.is_updated = {i: True for i in range(len(mine.cross_attention_cache.layers))}


def _encoder_length(cross) -> int:
    """Slots of a cross-attention cache (0 before the first forward fills it)."""
    return max((kv[0].shape[2] for layer in cross.layers if (kv := _kv(layer)) is not None), default=0)
