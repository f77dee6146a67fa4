"""Per-width matmul forms for a model's linear layers on the CPU: a load-time module swap.

On a CPU, which BLAS kernel a linear layer reaches depends on how the product is written: with
MKL sgemm, `F.linear(x, W)` over a few rows (the 2..32 tokens a decoder verifies) can take 2-3x
longer than `x @ W.T` with the transpose stored contiguous, or than oneDNN's packed weights,
and on this project's AMD EPYC oneDNN's packed weight beats `F.linear` at one row too (timed
cache-cold: SmolLM2's LM head 3.7 ms against 7.3 ms). So, as quantisation libraries do, `swap_linears`
replaces every `nn.Linear` of a model by a `FormLinear` (same parameters, same state dict) whose
forward dispatches on the input's row count to the form measured fastest for that width:

  * "linear": `F.linear(x, W, b)` (what nn.Linear does);
  * "wxt":    `(W @ x.T).T`, made contiguous;
  * "xwt":    `x @ Wt` with `Wt = W.T` stored contiguous (one extra copy of W);
  * "onednn": oneDNN's matmul over a weight packed once (`torch.ops.mkldnn`, one extra copy).

Each layer holds at most one extra layout. The projections of one input (q/k/v, gate/up) are
fused: `FusedLinear` members keep their own parameters, and the first one computes the stacked
product in one GEMM (the group's own per-width form) that the others slice, so the forward makes
fewer, bigger calls with transformers' attention and MLP code untouched. The swap also sets the model's attention to
"parasuite_sdpa" (registered through transformers' public `AttentionInterface`): transformers'
SDPA copies grouped K/V to every query head (`repeat_kv`) whenever a mask is given, which on a CPU
costs more than the attention itself over a few hundred cached tokens; this one lets SDPA read the
grouped heads (`enable_gqa`, the same result bit for bit) and otherwise is transformers' SDPA. The measurement runs once per weight shape, thread
count, CPU and torch build (about a second) and is cached on disk under the cache folder. Every
form computes the same product (float rounding aside), on the CPU without grad only; elsewhere
(CUDA, training) the layer is a plain `F.linear`. `describe(model)` tells what was chosen.

A fixed step (suite.models.step) runs every layer in one form at every row count, `pinned`: a GEMM
library may round a row differently by how many rows share the call (MKL sgemm here: one row, 2-8
and 16+ rows each round their own way; bf16 at 256 rows of K=1536 too), and with per-width forms a
row alone (8 slots) and the same row in a batch (8 slots a row) would reach different forms. The
pinned form is the fastest at a fixed step's row counts among the forms checked row-independent on
this CPU (`row_independent`, cached with the timings); `one_form_per_layer()` turns it on for the
forwards within, so a request's tokens are the same alone and in a batch.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import platform
import threading
import time
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .hf_fields import ConfigFields

WIDTHS = (1, 2, 4, 8, 16, 32)      # the token widths the decoders' forwards use
FORMS = ("linear", "wxt", "xwt", "onednn")
_LAYOUT = {"xwt": "transposed", "onednn": "packed"}   # forms that need an extra copy of W
_MARGIN = 0.05                     # another form must beat F.linear by 5% to replace it
STEP_ROWS = (8, 16, 32)            # a fixed step's row counts: 8 slots a row, one row or more
_PINNED = threading.local()        # within one_form_per_layer(): every layer runs its pinned form


@contextlib.contextmanager
def one_form_per_layer():
    """Within: every swapped layer of this thread runs its pinned form at every row count, so a row's
    product does not depend on how many rows share the forward (a fixed step's forwards)."""
    before = getattr(_PINNED, "on", False)
    _PINNED.on = True
    try:
        yield
    finally:
        _PINNED.on = before


def _pinned_now() -> bool:
    return getattr(_PINNED, "on", False)


def _has_onednn(dtype=torch.float32) -> bool:
    """oneDNN's packed linear in this torch build, for this dtype (bf16: where the CPU runs it natively)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and native_bf16())


def native_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX, as oneDNN sees it)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and _cpu_flags() & {"avx512_bf16", "amx_bf16"} != set()
    except (AttributeError, RuntimeError):
        return False


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return set()


def _layout(weight: torch.Tensor, kind: str | None) -> torch.Tensor | None:
    if kind == "transposed":
        return weight.detach().t().contiguous()
    if kind == "packed":
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8)
    return None


def _apply(form: str, x2: torch.Tensor, weight: torch.Tensor, extra, bias) -> torch.Tensor:
    """One form over rows x2 (R, K) -> (R, O)."""
    if form == "xwt":
        return x2 @ extra if bias is None else torch.addmm(bias, x2, extra)
    if form == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x2, extra, bias, "none", [], "")
    if form == "wxt":
        out = (weight @ x2.t()).t().contiguous()   # a strided output would push attention off its fast kernel
        return out if bias is None else out + bias
    return F.linear(x2, weight, bias)


class FormLinear(nn.Linear):
    """An nn.Linear (same `weight`/`bias` parameters) whose CPU inference forward uses, for an
    input of R rows, `forms[w]` of the smallest measured width w >= R (R > max width: F.linear),
    or its `pinned` form at every R within one_form_per_layer()."""

    @classmethod
    def from_linear(cls, linear: nn.Linear, forms: dict[int, str], pinned: str | None = None) -> "FormLinear":
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.forms, self.pinned = dict(sorted(forms.items())), pinned
        widths = list(self.forms)
        self._by_rows = tuple(self.forms[next(w for w in widths if w >= r)] for r in range(widths[-1] + 1))
        kinds = {_LAYOUT[f] for f in [*self.forms.values(), pinned] if f in _LAYOUT}
        if len(kinds) > 1:
            raise ValueError(f"a FormLinear holds one extra layout, got forms {sorted(set(self.forms.values()))}")
        self._kind = kinds.pop() if kinds else None
        self._extra, self._stamp = None, None
        return self

    def _extra_layout(self):
        """The extra copy of W, rebuilt whenever the weight changes (in place or replaced)."""
        w = self.weight
        stamp = (w.data_ptr(), w._version, w.dtype)
        if stamp != self._stamp:
            self._extra, self._stamp = _layout(w, self._kind), stamp
        return self._extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features if self.in_features else 0
        pinned = self.pinned if _pinned_now() else None
        if ((rows >= len(self._by_rows) and pinned is None) or x.device.type != "cpu"
                or self.weight.device.type != "cpu" or (torch.is_grad_enabled() and self.weight.requires_grad)
                or x.dtype != self.weight.dtype
                or torch.compiler.is_compiling()):     # a compiled graph picks its own kernels (none of ours lower)
            return F.linear(x, self.weight, self.bias)
        form = pinned or self._by_rows[rows]
        if form == "linear":
            return F.linear(x, self.weight, self.bias)
        out = _apply(form, x.reshape(rows, self.in_features), self.weight, self._extra_layout(), self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", forms=" + _forms_text(self.forms, self.pinned)


def _forms_text(forms: dict[int, str], pinned: str | None) -> str:
    return ",".join(f"{w}:{f}" for w, f in forms.items()) + (f" pinned:{pinned}" if pinned else "")


# -- fused projections --------------------------------------------------------------------------

FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))   # projections of one input


class _FusedGroup:
    """The shared product of a group of projections of one input (q/k/v, gate/up): one GEMM over
    the members' weights stacked in a single layout, computed once per input; each member returns
    its slice of it (a view)."""

    def __init__(self, members: list["FusedLinear"], forms: dict[int, str], pinned: str | None = None):
        self.members = members
        self.forms, self.pinned = dict(sorted(forms.items())), pinned
        widths = list(self.forms)
        self._by_rows = tuple(self.forms[next(w for w in widths if w >= r)] for r in range(widths[-1] + 1))
        self.out_features = sum(m.out_features for m in members)
        self.has_bias = members[0].bias is not None
        self._stamp, self._weight, self._bias, self._extra = None, None, None, None
        self._input, self._version, self._out, self._served = None, None, None, 0

    def _layouts(self):
        ws = [m.weight for m in self.members] + [m.bias for m in self.members if m.bias is not None]
        stamp = tuple((t.data_ptr(), t._version, t.dtype) for t in ws)
        if stamp != self._stamp:
            weight = torch.cat([m.weight.detach() for m in self.members])
            self._bias = torch.cat([m.bias.detach() for m in self.members]) if self.has_bias else None
            used = {*self.forms.values(), self.pinned} - {None}
            kinds = {_LAYOUT[f] for f in used if f in _LAYOUT}
            self._extra = _layout(weight, kinds.pop() if kinds else None)
            # the stacked weight itself only where a form reads it (an extra layout replaces it otherwise)
            self._weight = weight if used - set(_LAYOUT) else None
            self._stamp = stamp
        return self._weight, self._bias, self._extra

    def product(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        weight, bias, extra = self._layouts()
        pinned = self.pinned if _pinned_now() else None
        form = pinned or self._by_rows[min(rows, len(self._by_rows) - 1)]   # past the widths: the widest's form
        x2 = x.reshape(rows, x.shape[-1])
        out = F.linear(x2, weight, bias) if form == "linear" else _apply(form, x2, weight, extra, bias)
        return out.reshape(*x.shape[:-1], self.out_features)

    def serve(self, member: "FusedLinear", x: torch.Tensor) -> torch.Tensor | None:
        """The member's slice of the group's product for x: the first member computes it, the
        others read it while it is for this very input (same tensor, unchanged); None otherwise."""
        if member.index == 0:
            self._input, self._version, self._out, self._served = weakref.ref(x), x._version, self.product(x), 0
        elif self._out is None or self._input() is not x or self._version != x._version:
            return None
        out = self._out.narrow(-1, member.offset, member.out_features)
        self._served += 1
        if self._served == len(self.members):      # everyone has its slice: let the product go
            self._input, self._out = None, None
        return out


class FusedLinear(nn.Linear):
    """One projection of a fused group (same `weight`/`bias` parameters, same state dict): on the
    CPU without grad, the group's first member computes every member's product in one GEMM and
    the others return their slice of it, so LlamaAttention's `q_proj(h)`, `k_proj(h)`, `v_proj(h)`
    (and LlamaMLP's `gate_proj(x)`, `up_proj(x)`) cost one call, with transformers' code as it is.
    A member called on another input (or out of order) computes its own product, F.linear."""

    @classmethod
    def group(cls, linears: list[nn.Linear], forms: dict[int, str], pinned: str | None = None) -> list["FusedLinear"]:
        members, offset = [], 0
        for i, linear in enumerate(linears):
            self = cls.__new__(cls)
            nn.Module.__init__(self)
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.weight, self.bias = linear.weight, linear.bias
            self.index, self.offset = i, offset
            offset += linear.out_features
            members.append(self)
        shared = _FusedGroup(members, forms, pinned)
        for m in members:
            object.__setattr__(m, "_group", shared)     # not a submodule: the members keep their own parameters
        return members

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type == "cpu" and self.weight.device.type == "cpu" and x.dtype == self.weight.dtype
                and not (torch.is_grad_enabled() and self.weight.requires_grad)
                and not torch.compiler.is_compiling()):      # a compiled graph fuses by itself (no weakref tricks)
            out = self._group.serve(self, x)
            if out is not None:
                return out
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        names = "+".join(str(m.out_features) for m in self._group.members)
        return super().extra_repr() + f", fused {names}, forms=" + _forms_text(self._group.forms, self._group.pinned)


def _fusable(parent: nn.Module, names: tuple[str, ...]) -> list[nn.Linear] | None:
    children = dict(parent.named_children())
    linears = [children.get(n) for n in names]
    if not all(type(m) in (nn.Linear, FormLinear) for m in linears):
        return None
    first = linears[0]
    if any(m.in_features != first.in_features or (m.bias is None) != (first.bias is None)
           or m.weight.dtype != first.weight.dtype for m in linears):
        return None
    return linears


# -- measurement ---------------------------------------------------------------------------------

def _machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name} x{torch.get_num_threads()} torch {torch.__version__}"


def _clock():
    """Thread CPU time when torch runs one thread (robust to other load on a shared CPU), else wall time."""
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def _last_level_cache_bytes() -> int:
    """The CPU's last-level cache size (Linux sysfs; 32 MiB when unknown)."""
    try:
        sizes = [Path(p).read_text().strip() for p in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size")]
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return max(int(v[:-1]) * units[v[-1]] if v[-1] in units else int(v) for v in sizes)
    except (OSError, ValueError):
        return 32 << 20


@torch.no_grad()
def measure_forms(out_features: int, in_features: int, bias: bool, dtype=torch.float32,
                  widths=WIDTHS, repeats: int = 7) -> dict[str, dict[int, float]]:
    """Seconds of each candidate form (the fastest of `repeats` interleaved runs) per width, on
    random weights of this shape; CPU seconds of the thread when torch runs one thread. The runs
    cycle through enough copies of the weight to overflow the last-level cache: inside a model
    each layer's weight comes from memory, and a cache-hot timing would favour the wrong form."""
    gen = torch.Generator(device="cpu").manual_seed(0)      # the forms are measured on this CPU
    nbytes = out_features * in_features * torch.finfo(dtype).bits // 8
    copies = max(1, min(64, -(-2 * _last_level_cache_bytes() // nbytes)))
    weights = [torch.randn(out_features, in_features, generator=gen, device="cpu").to(dtype) for _ in range(copies)]
    b = torch.randn(out_features, generator=gen, device="cpu").to(dtype) if bias else None
    forms = [f for f in FORMS if f != "onednn" or _has_onednn(dtype)]
    extras = [{f: _layout(w, _LAYOUT.get(f)) for f in forms} for w in weights]
    best, turn = {f: {} for f in forms}, 0
    for w in widths:
        x = torch.randn(w, in_features, generator=gen, device="cpu").to(dtype)
        for f in forms:
            _apply(f, x, weights[0], extras[0][f], b)        # warm up
        times, clock = {f: float("inf") for f in forms}, _clock()
        for _ in range(repeats):
            for f in forms:
                turn = (turn + 1) % copies
                t0 = clock()
                _apply(f, x, weights[turn], extras[turn][f], b)
                times[f] = min(times[f], clock() - t0)
        for f in forms:
            best[f][w] = times[f]
    return best


def pick_forms(seconds: dict[str, dict[int, float]], pinned: str | None = None) -> dict[int, str]:
    """The fastest form per width, one row included, with at most one extra layout for the layer
    (the layout family that saves the most time overall, or the `pinned` form's where it has one)
    and F.linear kept unless beaten by `_MARGIN`. (Until the forms were timed cache-cold, one row
    kept F.linear: cache-hot timings had favoured forms that made SmolLM2's one-token forward slower. Timed cold, oneDNN's packed
    weight makes it about 1.5x faster on this project's AMD EPYC, so one row is now picked too.)"""
    widths = sorted(seconds["linear"])

    def choice(allowed):
        out = {}
        for w in widths:
            f = min(allowed, key=lambda f: seconds[f][w])
            out[w] = f if seconds[f][w] < (1 - _MARGIN) * seconds["linear"][w] else "linear"
        return out

    plain = [f for f in seconds if f not in _LAYOUT]
    if pinned in _LAYOUT:
        return choice(plain + [pinned])
    options = [choice(plain)] + [choice(plain + [f]) for f in seconds if f in _LAYOUT]
    return min(options, key=lambda c: sum(seconds[c[w]][w] for w in widths))


@torch.no_grad()
def row_independent(out_features: int, in_features: int, bias: bool, dtype=torch.float32) -> list[str]:
    """The forms whose product for a row does not depend on how many rows share the call, checked on
    this CPU: 384 rows at once against the same rows in blocks of 8, 24, 64, 128 and 192 (at most
    1024 output columns: a GEMM's rounding of a row depends on its reduction over the inputs)."""
    gen = torch.Generator(device="cpu").manual_seed(1)
    w = torch.randn(min(out_features, 1024), in_features, generator=gen, device="cpu").to(dtype)
    b = torch.randn(w.shape[0], generator=gen, device="cpu").to(dtype) if bias else None
    x = torch.randn(384, in_features, generator=gen, device="cpu").to(dtype)
    independent = []
    for f in (f for f in FORMS if f != "onednn" or _has_onednn(dtype)):
        extra = _layout(w, _LAYOUT.get(f))
        whole = _apply(f, x, w, extra, b)
        if all(torch.equal(whole, torch.cat([_apply(f, part, w, extra, b) for part in x.split(rows)]))
               for rows in (8, 24, 64, 128, 192)):
            independent.append(f)
    return independent


def pick_pinned(seconds: dict[str, dict[int, float]], independent: list[str]) -> str | None:
    """The one form a fixed step runs at every row count: the fastest at STEP_ROWS among the
    row-independent forms (its extra layout, if any, is then the layer's: `pick_forms`); None when no
    form is row-independent here."""
    return min(independent, key=lambda f: sum(seconds[f][w] for w in STEP_ROWS), default=None)


def choose_forms(out_features: int, in_features: int, bias: bool, dtype=torch.float32,
                 refresh: bool = False) -> tuple[dict[int, str], str | None]:
    """The per-width forms for a layer of this shape on this machine and its pinned form (a fixed
    step's, `pick_pinned`), measured once and cached."""
    from ..runtime.storage import cache_dir, read_json, write_json
    shape = f"{out_features}x{in_features}{'+b' if bias else ''} {str(dtype).replace('torch.', '')}"
    recipe = "cold, per width, one row included; pinned: row-independent, its layout the layer's"
    key = hashlib.sha256(f"{_machine()}\n{shape}\n{WIDTHS}\n{recipe}".encode()).hexdigest()[:16]
    if not refresh and key in _MEMORY:
        return _MEMORY[key]
    path = cache_dir("linear_forms", f"{key}.json")
    data = None if refresh else read_json(path, default=None)
    if not (isinstance(data, dict) and isinstance(data.get("forms"), dict) and "pinned" in data):
        seconds = measure_forms(out_features, in_features, bias, dtype)
        pinned = pick_pinned(seconds, row_independent(out_features, in_features, bias, dtype))
        data = {"shape": shape, "machine": _machine(), "pinned": pinned,
                "forms": {str(w): f for w, f in pick_forms(seconds, pinned).items()},
                "seconds": {f: {str(w): s for w, s in row.items()} for f, row in seconds.items()}}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, data)
        except OSError:   # a read-only cache folder: keep the choice for this process only
            pass
    _MEMORY[key] = {int(w): f for w, f in data["forms"].items()}, data["pinned"]
    return _MEMORY[key]


_MEMORY: dict[str, tuple[dict[int, str], str | None]] = {}


# -- grouped-query attention without the K/V copy -------------------------------------------------

ATTENTION = "parasuite_sdpa"


def gqa_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                       is_causal=None, **kwargs):
    """transformers' SDPA attention, except that a masked multi-token query over grouped K/V
    heads on the CPU runs SDPA with `enable_gqa` instead of copying K/V per query head."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    groups = getattr(module, "num_key_value_groups", 1)
    if (groups == 1 or attention_mask is None or query.shape[2] == 1 or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
    if ATTENTION not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(ATTENTION, gqa_sdpa_attention)
        AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_gqa_attention(model: nn.Module) -> bool:
    """Switch a transformers model that uses "sdpa" to "parasuite_sdpa" (see the module doc);
    True when the model now uses it."""
    current = ConfigFields.of(model).attn_implementation
    if current == ATTENTION:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    _register_attention()
    model.set_attn_implementation(ATTENTION)
    return True


# -- the swap ------------------------------------------------------------------------------------

def swap_linears(model: nn.Module, refresh: bool = False, forms: dict[int, str] | None = None,
                 fuse: bool = True, pinned: str | None = None) -> dict[str, int]:
    """Replace every nn.Linear of a CPU model (in place) by a `FormLinear` with the forms chosen
    for its shape and its pinned form (`forms` given: those and `pinned` for every layer,
    unmeasured), and with fuse, the
    projections of one input (`FUSED_GROUPS`: q/k/v, gate/up) by `FusedLinear` members computed
    in one GEMM; parameters, tied weights and the state dict are unchanged. A no-op for a model
    off the CPU or already swapped. Returns `describe(model)`."""
    if forms is not None and (set(forms.values()) - set(FORMS) or not forms or pinned not in (None, *FORMS)):
        raise ValueError(f"forms maps widths to some of {', '.join(FORMS)} (and pinned is one), got {forms!r}, "
                         f"{pinned!r}")
    param = next(iter(model.parameters()), None)
    if param is None or param.device.type != "cpu":
        return describe(model)
    use_gqa_attention(model)

    def chosen(out_features, in_features, bias, dtype):
        return (forms, pinned) if forms else choose_forms(out_features, in_features, bias, dtype, refresh)

    for parent in list(model.modules()):
        for names in FUSED_GROUPS if fuse else ():
            linears = _fusable(parent, names)
            if linears:
                first = linears[0]
                group, pinned = chosen(sum(m.out_features for m in linears), first.in_features,
                                       first.bias is not None, first.weight.dtype)
                for name, member in zip(names, FusedLinear.group(linears, group, pinned)):
                    setattr(parent, name, member)
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                forms_here, pinned = chosen(child.out_features, child.in_features, child.bias is not None,
                                            child.weight.dtype)
                if any(f != "linear" for f in [*forms_here.values(), pinned or "linear"]):
                    setattr(parent, name, FormLinear.from_linear(child, forms_here, pinned))
    return describe(model)


def unswap_linears(model: nn.Module) -> None:
    """Undo `swap_linears`: plain nn.Linear modules over the same parameters, "sdpa" attention."""
    if ConfigFields.of(model).attn_implementation == ATTENTION:
        model.set_attn_implementation("sdpa")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, (FormLinear, FusedLinear)):
                plain = nn.Linear.__new__(nn.Linear)
                nn.Module.__init__(plain)
                plain.in_features, plain.out_features = child.in_features, child.out_features
                plain.weight, plain.bias = child.weight, child.bias
                setattr(parent, name, plain)


def describe(model: nn.Module) -> dict[str, int]:
    """How many layers use each per-width choice, e.g. {"1:linear,2:xwt,...": 60}, and
    {"attention:parasuite_sdpa": 1} when that attention is on; {} when nothing is swapped (what
    the adapter records in config.extra["linear_forms"])."""
    out: dict[str, int] = {}
    if ConfigFields.of(model).attn_implementation == ATTENTION:
        out["attention:" + ATTENTION] = 1
    for m in model.modules():
        if isinstance(m, FormLinear):
            key = _forms_text(m.forms, m.pinned)
            out[key] = out.get(key, 0) + 1
        elif isinstance(m, FusedLinear) and m.index == 0:
            key = "fused " + "+".join(str(n.out_features) for n in m._group.members) + " " + _forms_text(
                m._group.forms, m._group.pinned)
            out[key] = out.get(key, 0) + 1
    return out


__all__ = ["ATTENTION", "FORMS", "FUSED_GROUPS", "STEP_ROWS", "FormLinear", "FusedLinear", "WIDTHS", "choose_forms",
           "describe", "gqa_sdpa_attention", "measure_forms", "native_bf16", "one_form_per_layer", "pick_forms",
           "pick_pinned", "row_independent", "swap_linears", "unswap_linears", "use_gqa_attention"]
