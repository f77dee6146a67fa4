"""A preallocated KV cache and the fixed-shape (compilable) forward over it.

`StaticKVCache` keeps K/V in a transformers `StaticCache` of `capacity` slots per layer: a forward
writes its N slots at the fill pointer (on a fixed step's ragged rows: each row right after its own live
slots, `StaticKVCache.row_slots`), and rolling back (dropping a rejected tail) only moves the
pointer back; the stale slots are overwritten by the next forward and masked until then. So every
compiled decode step of width N sees tensors of fixed shapes — tokens (B, N), mask (B, 1, N, capacity) —
which is what `torch.compile` and CUDA graphs need; an eager step reads only the filled slots, rounded
up to a bucket (`attention_window`: mask (B, 1, N, window)).

`StaticHFCausalLM` is `HFCausalLM` over that cache; forwards whose width is in `compiled_widths`
(1 for `ar`, the window for jacobi/sjd/ngram drafts) run through `torch.compile`, others (the
prefill) eagerly. Both compute the same function, so decoding stays exact (tested against eager).
A model whose forward cannot take a `StaticCache` (recurrent or custom-cache families; one probe
forward tells) falls back to the dynamic cache and eager forwards, without an error.
"""
from __future__ import annotations

import contextlib

import torch
from transformers.cache_utils import StaticLayer

from .adapters import HFCausalLM
from .hf_fields import ConfigFields
from .lean_forward import lean_forward
from .linear_forms import one_form_per_layer
from ..cache import KVCache, join_rows, refuse_sliding


WINDOW_BUCKET = 64     # attention reads the filled slots rounded up to a multiple of this


def row_bucket(rows: int) -> int:
    """The rows a static cache's buffers hold for `rows` live ones: the next power of two, so rows join
    into reserved rows (and leave in place) and the buffers are allocated again only when a batch
    outgrows its bucket; a forward runs the live rows only (a lone request pays for one)."""
    return 1 << max(rows - 1, 0).bit_length()


def attention_window(end: int, capacity: int) -> int:
    """The cache slots an eager forward whose last slot is `end` attends over: `end` rounded up to a
    multiple of WINDOW_BUCKET, at most `capacity`. The masked slots past `end` add exact zeros, so the
    logits do not depend on the window (tests/core/test_fixed_step.py: bitwise, windows of 4 slots)."""
    return min(capacity, -(-end // WINDOW_BUCKET) * WINDOW_BUCKET)


class StaticKVCache(KVCache):
    """A `KVCache` over a StaticCache's preallocated buffers. On a fixed step (`row_fill`) every row's
    live slots stay a prefix of its slot axis: a forward writes row b's N slots right after its own
    live ones (`row_slots`), not behind the longest row, so a row's keys sit at the slots they hold
    when the row runs alone, and attention sums them in the same order (a ragged batch's gaps would
    not). Rows of one length, the usual case, write at the common fill pointer as before."""

    def __init__(self, batch: int, backend, capacity: int, fanout: int = 1, device=None, row_fill: bool = False):
        super().__init__(batch, backend, fanout, device)
        self.capacity = capacity
        self.row_fill = row_fill
        self._written: torch.Tensor | None = None    # (B, N) the slots the last per-row append took

    def row_slots(self, n: int) -> torch.Tensor | None:
        """(B, n) the slots a forward of n writes per row, right after each row's live prefix, when
        they are not the common ones (a fixed step's cache with holes: rows of different lengths); else None."""
        if not (self.row_fill and self.holes):
            return None
        return self.lengths()[:, None] + torch.arange(n, device=self.valid.device)

    def append(self, positions: torch.Tensor, valid: torch.Tensor, dense: bool = False):
        slots = self.row_slots(positions.shape[1])
        if slots is None:
            self._written = None
            return super().append(positions, valid, dense)
        n = positions.shape[1]
        self.valid = torch.cat([self.valid, self.valid.new_zeros(self.batch, n)], 1)   # the common axis grows by n
        self.positions = torch.cat([self.positions, self.positions.new_zeros(self.batch, n)], 1)
        self.valid.scatter_(1, slots, valid)
        self.positions.scatter_(1, slots, positions)
        self.holes = self._dirty = True
        self._written = slots
        return slots

    def drop_tail(self, n: int) -> None:
        """After a per-row append: its last n slots of every row die (compaction crops the common tail)."""
        if self._written is None or n <= 0:
            return super().drop_tail(n)
        self.valid.scatter_(1, self._written[:, -n:], False)
        self._written = self._written[:, :-n]

    def keep_new(self, slots, keep: torch.Tensor) -> None:
        if isinstance(slots, slice):
            return super().keep_new(slots, keep)
        self.valid.scatter_(1, slots, self.valid.gather(1, slots) & keep)
        self.holes = self._dirty = True

    def attention_mask(self, draft_mask: torch.Tensor, past_mask: torch.Tensor | None = None) -> torch.Tensor:
        """As KVCache's, with the draft's own visibility at each row's slots when they are per row."""
        n = draft_mask.shape[1]
        slots = self.row_slots(n)
        if slots is None:
            return super().attention_mask(draft_mask, past_mask)
        past = self.valid[:, None, :].expand(-1, n, -1)
        if past_mask is not None:
            past = past & past_mask
        mask = torch.cat([past, past.new_zeros(*past.shape[:2], n)], 2)
        return mask.scatter_(2, slots[:, None, :].expand(-1, n, -1), draft_mask)[:, None]

    def _compact(self, max_dead_fraction: float) -> bool:
        """Per-row fill: every row's live slots are a prefix, so compaction crops the common tail only
        (checked in the same host read; any other layout is gathered as KVCache does)."""
        self._written = None
        if not self.row_fill:
            return super()._compact(max_dead_fraction)
        live = self.lengths()
        prefix = self.valid == (torch.arange(self.num_slots, device=live.device)[None] < live[:, None])
        none = live.new_zeros(1)
        longest, shortest, whole = torch.cat([torch.cat([live, none]).max().reshape(1),
                                              live.min().reshape(1) if len(live) else none,
                                              prefix.all().reshape(1).long()]).tolist()
        if not whole:
            return super()._compact(max_dead_fraction)
        self._crop_to(longest)
        return shortest != longest

    def read_window(self, n: int, whole: bool = False) -> int:
        """Before a forward of `n` slots (room made): the slots its attention reads, filled ones and its
        own rounded up to a bucket (`attention_window`), or all of them (`whole`), set
        on every layer."""
        window = self.capacity if whole else attention_window(self.num_slots + n, self.capacity)
        slots = self.row_slots(n)
        slots = None if slots is None else slots.repeat(self.fanout, 1)     # each backend copy of a row
        for layer in self.backend.layers:
            if isinstance(layer, WindowedLayer):
                layer.window = None if whole else window
                layer.row_slots = slots
        return window

    def make_room(self, n: int) -> None:
        """Before a forward of `n` slots (its mask already built over the slots as they are, so none
        may move now): when they would not fit behind the fill pointer, grow."""
        if self.num_slots + n > self.capacity:
            self.grow(max(self.num_slots + n, self.capacity + self.capacity // 4))

    def grow(self, capacity: int) -> None:
        """More slots: every layer's buffers copied into larger ones (a compiled step recompiles for
        the new shape). Only a ragged batch needs it: a row's draft is cut to that row's room, but the
        forward is as wide as the widest draft, behind the longest row."""
        if capacity <= self.capacity:
            return
        for layer in _static_layers(self.backend):
            if layer.is_initialized:
                reserve = _reserve(layer)
                k, v = (t.new_zeros(*t.shape[:2], capacity, t.shape[3]) for t in reserve)
                k[:, :, :self.capacity], v[:, :, :self.capacity] = reserve
                _seat(layer, k, v, layer.keys.shape[0])
            layer.max_cache_len = capacity
        self.capacity = capacity

    def _gather_backend(self, order: torch.Tensor) -> None:
        """Move each row's live slots to the front in place (the buffers keep their addresses),
        then set the fill pointer to the new slot count."""
        keep = order.shape[1]
        idx = order.repeat(self.fanout, 1)  # (fanout*B, keep)
        for layer in self.backend.layers:
            if not layer.is_initialized:
                continue
            for t in (layer.keys, layer.values):
                g = idx[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                t[:, :, :keep] = t.gather(2, g)
            layer.cumulative_length.fill_(keep)

    def _select_backend(self, copies: torch.Tensor) -> None:
        """Rows leave: each layer's remaining rows gathered to the front of its buffers, in place (the
        rows past them stay reserved for rows joining later); the fill pointer stays."""
        for layer in _static_layers(self.backend):
            if layer.is_initialized:
                keys, values = _reserve(layer)
                keys[:len(copies)], values[:len(copies)] = layer.keys[copies], layer.values[copies]
                _seat(layer, keys, values, len(copies))

    def _extend_backend(self, other: KVCache, length: int) -> None:
        """Rows join: other's rows copied behind this cache's into the rows its buffers reserve, or, past
        them, into buffers of the next row bucket (row_bucket), `capacity` slots each
        (slots past a side's own are dead); the fill pointer at `length`."""
        self.grow(other.capacity)                   # a grown cache takes a fresh one's rows, and back
        rows = self.fanout * (self.batch + other.batch)
        for mine, theirs in zip(_static_layers(self.backend), _static_layers(other.backend)):
            a = (mine.keys, mine.values) if mine.is_initialized and self.batch else None
            b = (theirs.keys, theirs.values) if theirs.is_initialized else None
            if a is None and b is None:
                if mine.is_initialized:          # no K/V on either side: the first forward allocates anew
                    mine.keys = mine.values = None
                    mine.is_initialized = False
                    mine.cumulative_length = torch.zeros_like(mine.cumulative_length)
                continue
            reserve = _reserve(mine) if a is not None else ()
            if self.fanout == 1 and reserve and reserve[0].shape[0] >= rows:      # in place: no new buffers
                for buffer, part in zip(reserve, b or (None, None)):
                    buffer[self.batch:rows] = 0
                    if part is not None:
                        buffer[self.batch:rows, :, :part.shape[2]] = part
            else:
                reserve = tuple(_bucketed(join_rows(a and a[j], b and b[j], self.fanout, self.batch, other.batch,
                                                    self.capacity)) for j in (0, 1))
            _seat(mine, *reserve, rows)
            mine.cumulative_length.fill_(length)


class WindowedLayer(StaticLayer):
    """A transformers `StaticLayer` whose forward reads only its first `window` slots (the filled ones
    and the step's, rounded up to `attention_window`'s bucket): attention, and a
    grouped-query model's K/V repeat, cost what the request has filled, not the whole capacity.
    None: all slots (transformers' own)."""

    def __init__(self, max_cache_len: int):
        super().__init__(max_cache_len=max_cache_len)
        self.window: int | None = None       # an instance attribute from the start: a compiled step's guards see one
        self.row_slots: torch.Tensor | None = None   # (rows, N): where each row's N slots go (StaticKVCache.row_slots)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.row_slots is None:
            keys, values = super().update(key_states, value_states, *args, **kwargs)
        else:                                # each row's slots right after its own live ones
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.cumulative_length.add_(key_states.shape[-2])    # the common slot axis grows as before
            # an indexed write touches the step's slots only (a scatter_ along the slot axis copied each
            # whole buffer: 65% of a batch of 8 rows' step time)
            rows = torch.arange(key_states.shape[0], device=key_states.device)[:, None]
            self.keys[rows, :, self.row_slots] = key_states.transpose(1, 2)
            self.values[rows, :, self.row_slots] = value_states.transpose(1, 2)
            keys, values = self.keys, self.values
        if self.window is None:
            return keys, values
        return keys[:, :, :self.window], values[:, :, :self.window]


def windowed(backend):
    """A StaticCache whose full-attention layers are `WindowedLayer`s (sliding ones are left as they are:
    `_static_layers` refuses them)."""
    backend.layers = [WindowedLayer(max_cache_len=layer.max_cache_len) if type(layer) is StaticLayer else layer
                      for layer in backend.layers]
    return backend


def _static_layers(backend):
    for layer in backend.layers:
        refuse_sliding(layer, "decode this model with HFCausalLM (the growing cache)")
    return backend.layers


def _reserve(layer) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's whole K/V buffers, whose first rows are its keys and values (its own buffers when
    transformers' lazy initialisation made them)."""
    reserve = getattr(layer, "reserve", None)
    if reserve is not None and reserve[0].data_ptr() == layer.keys.data_ptr():
        return reserve
    return layer.keys, layer.values


def _bucketed(t: torch.Tensor) -> torch.Tensor:
    """(B, H, S, D) -> the same rows in a buffer of row_bucket(B) rows (the rest zero)."""
    rows = row_bucket(t.shape[0])
    if rows == t.shape[0]:
        return t
    out = t.new_zeros(rows, *t.shape[1:])
    out[:t.shape[0]] = t
    return out


def _seat(layer, keys: torch.Tensor, values: torch.Tensor, rows: int | None = None) -> None:
    """Give a transformers StaticLayer (B, H, capacity, D) buffers, as its lazy initialisation would:
    the first `rows` rows (None: all) of `keys` and `values`, which it keeps reserved."""
    layer.reserve = (keys, values)
    if rows is not None:
        keys, values = keys[:rows], values[:rows]
    layer.keys, layer.values = keys, values
    layer.batch_size, layer.num_heads, _, layer.k_head_dim = keys.shape
    layer.v_head_dim, layer.device, layer.is_initialized = values.shape[-1], keys.device, True
    layer.cumulative_length = layer.cumulative_length.to(keys.device)
    if not torch.compiler.is_compiling():
        torch._dynamo.mark_static_address(layer.keys)
        torch._dynamo.mark_static_address(layer.values)
        torch._dynamo.mark_static_address(layer.cumulative_length)


def takes_static_cache(model) -> bool:
    """Whether `model`'s forward runs over a transformers `StaticCache`: one probe forward of one token."""
    from transformers import StaticCache
    dev = next(model.parameters()).device
    one = torch.zeros(1, 1, dtype=torch.long, device=dev)
    try:
        cache = StaticCache(config=model.config, max_cache_len=2)
        with torch.no_grad():
            model(input_ids=one, position_ids=one, cache=cache, use_cache=True, logits_to_keep=1,
                  attention_mask=torch.tensor([[[[True, False]]]], device=dev))     # (1, 1, 1, capacity)
    except (TypeError, ValueError, RuntimeError, IndexError, AttributeError, NotImplementedError):
        return False
    return True


def cuda_graph_mode(mode: str | None, device: torch.device) -> str | None:
    """`mode` for torch.compile on `device`: the CUDA-graph modes ("reduce-overhead", "max-autotune")
    compile without graphs (None, "max-autotune-no-cudagraphs") off CUDA, where inductor would warn
    once per compiled step that it skips them."""
    if torch.device(device).type == "cuda" or mode is None:
        return mode
    return {"reduce-overhead": None, "max-autotune": "max-autotune-no-cudagraphs"}.get(mode, mode)


class StaticHFCausalLM(HFCausalLM):
    """Any transformers causal LM over a `StaticKVCache` of `max_cache_len` slots, with the
    forwards of the widths in `compiled_widths` compiled (`mode="reduce-overhead"` adds CUDA
    graphs on a GPU). `max_cache_len` is the adapter's context (`config.max_length`): prompt + new
    tokens fit in it, as with any model's context (a longer prompt is refused by `suite.prepare`, rows
    stop there), every decoder cuts its drafts to the room left (`DecodeState.room`), and the cost
    curve is measured within it. So `max_cache_len` = the longest prompt + max_new_tokens is enough
    for one row; a longer request is refused before any forward (`check_request`). In a ragged batch
    a short row's draft may reach past the longest row's room, or dead slots (at most 25% between
    compactions) may push the fill pointer past it: the cache then grows (`StaticKVCache.grow`: new
    buffers, so a compiled step recompiles once) rather than fail."""

    def __init__(self, model, max_cache_len: int, compiled_widths=(1,), mode: str | None = None,
                 eos_token_id=None, pad_token_id=None, setting: str | None = None):
        """setting: a named inductor setting (suite.models.compiled: "default", "freezing", "cpp_wrapper",
        "max-autotune"), used instead of `mode`; compiled artifacts go to the parasuite cache folder."""
        super().__init__(model, eos_token_id, pad_token_id)
        self.max_cache_len = int(max_cache_len)
        if self.max_cache_len < 2:
            raise ValueError(f"max_cache_len must be at least 2 (a prompt token and a new one), got {max_cache_len}")
        self.static = takes_static_cache(model)       # False: the dynamic cache, eager forwards
        if self.static:                                # the cache is this adapter's context
            from dataclasses import replace
            own = self.config.max_length
            self.config = replace(self.config, max_length=min(own, self.max_cache_len) if own else self.max_cache_len)
        self.compiled_widths = frozenset(compiled_widths) if self.static else frozenset()
        self.mode = cuda_graph_mode(mode, next(model.parameters()).device)
        self._compiled = None
        if self.compiled_widths:
            from .compiled import compile_kwargs, use_disk_cache
            use_disk_cache()
            kwargs = compile_kwargs(setting, self.device) if setting is not None else {"mode": self.mode}
            self._compiled = torch.compile(self.model.forward, dynamic=False, **kwargs)
        self._ready = set(self.compiled_widths)      # widths whose steps run compiled (`warm` empties it first)
        self._lean = lean_forward(model) if self.static else None     # transformers' forward op for op, leaner

    def warm(self, background: bool = True, batch: int = 1, hidden: tuple[bool, ...] = (False,)):
        """Compile every width of `compiled_widths` now, one forward each over a scratch cache of `batch`
        rows (after an eager one that fills it, as a prefill would); until a width is compiled its steps
        run eagerly, so a server starts at once and gets faster when its steps are ready. background:
        in a daemon thread (returned; join it to wait), else here. hidden: compile the steps that also return
        hidden states (True: eagle, and auto with eagle among its candidates) and/or those that do not (False).
        Without compiled widths: nothing."""
        if self._compiled is None:
            return None
        self._ready = set()
        if not background:
            self._warm(batch, hidden)
            return None
        import threading
        thread = threading.Thread(target=self._warm, args=(batch, hidden), name="parasuite compile", daemon=True)
        thread.start()
        return thread

    def _warm(self, batch: int, hidden: tuple[bool, ...]) -> None:
        """One compiled forward per width over a scratch cache whose layers are allocated as a prefill
        would (no eager forward here: this may run beside the stepping thread's)."""
        dev, cap, cfg = self.device, self.max_cache_len, ConfigFields.of(self.model)
        kv = torch.zeros(batch, cfg.kv_heads, 1, cfg.head_size, dtype=self._param.dtype, device=dev)
        for w in sorted(self.compiled_widths):
            if w >= cap:
                continue
            cache = self.new_cache(batch).backend
            for layer in cache.layers:
                layer.lazy_initialization(kv, kv)
                layer.cumulative_length.fill_(1)              # one slot filled, as after a one-token prefill
            mask = torch.zeros(batch, 1, w, cap, dtype=torch.bool, device=dev)
            mask[..., 0] = True
            mask[..., 1:w + 1] = torch.ones(w, w, dtype=torch.bool, device=dev).tril()   # then w causal slots
            tokens = torch.zeros(batch, w, dtype=torch.long, device=dev)
            for states in hidden:
                with torch.no_grad():
                    self._compiled(input_ids=tokens, cache=cache, use_cache=True, attention_mask=mask, logits_to_keep=w,
                                   position_ids=torch.arange(1, w + 1, device=dev).expand(batch, w).contiguous(),
                                   output_hidden_states=states)
            self._ready.add(w)

    def cost_identity(self) -> list[str]:
        """A static cache: a compiled forward attends over all its slots, so its size is part of the cost."""
        return [*super().cost_identity(), f"{type(self).__name__} {self.max_cache_len}"]

    def check_request(self, rows: list[list[int]], max_new_tokens: int) -> None:
        """A request whose longest prompt + max_new_tokens exceeds the cache: refused (suite.prepare
        calls this before any forward), naming the size that fits."""
        need = max(map(len, rows)) + max_new_tokens + (self.capabilities.prefill_width or 0)   # a fixed step's padded chunk too
        if self.static and need > self.max_cache_len:
            raise ValueError(f"the static cache holds {self.max_cache_len} slots and this request needs {need} "
                             f"(its longest prompt + max_new_tokens): build StaticHFCausalLM with a larger "
                             f"max_cache_len, or ask for fewer new tokens")

    def new_cache(self, batch: int, max_len: int | None = None) -> StaticKVCache:
        if not self.static:
            return super().new_cache(batch, max_len)
        from transformers import StaticCache
        backend = windowed(StaticCache(config=self.model.config, max_cache_len=self.max_cache_len))
        return StaticKVCache(batch, backend, self.max_cache_len, device=self.device,
                             row_fill=bool(self.capabilities.step_width))

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0, output_hidden: bool = False):
        if not self.static:
            return super().__call__(tokens, positions, cache, attention_mask, logits_from, output_hidden)
        n = tokens.shape[1]
        cache.make_room(n)                              # grows when needed: the step always fits
        if attention_mask is None:
            causal = torch.ones(n, n, dtype=torch.bool, device=cache.valid.device).tril().expand(tokens.shape[0], n, n)
            attention_mask = cache.attention_mask(causal)
        dev = self.device
        compiled = self._compiled is not None and n in self._ready and logits_from == 0
        window = cache.read_window(n, whole=compiled)     # a compiled graph reads every slot: one graph a width
        mask = torch.zeros(*attention_mask.shape[:-1], window, dtype=torch.bool, device=dev)
        mask[..., :attention_mask.shape[-1]] = attention_mask.to(dev)   # (B, 1, N, window)
        forward = self._compiled if compiled else self._lean if self._lean and not output_hidden else self.model
        # a fixed step: each layer in one matmul form at every row count, so a row's logits do not depend on
        # its batch mates (suite.models.linear_forms, "pinned")
        with one_form_per_layer() if self.capabilities.step_width else contextlib.nullcontext():
            out = forward(input_ids=tokens.to(dev), position_ids=positions.to(dev), cache=cache.backend,
                          attention_mask=mask, use_cache=True, logits_to_keep=n - logits_from,
                          output_hidden_states=output_hidden)          # a compiled step: one graph per value
        return (out.logits, out.hidden_states[-1]) if output_hidden else out.logits
