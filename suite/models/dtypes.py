"""The dtype a model runs in: `resolve_dtype("auto" | "float32" | "bfloat16" | torch.dtype, device)`.

"auto" is bfloat16 on CUDA or where the CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX, as
`/proc/cpuinfo` and oneDNN see them), float32 elsewhere. bfloat16 on a CPU without native bf16
still runs (emulated, slowly) and says so once. Every domain's loader takes `dtype=` (None: the
process default, $PARASUITE_DTYPE or float32, which `python -m apps --dtype` sets) and casts the
model that decodes with `cast`; every CLI takes `--dtype` (`add_dtype_argument`).

What "exact" means per dtype: in float32 every lossless decoder returns `ar`'s tokens (the
suite's proofs, tests/core/test_exact.py). In bfloat16 a lossless decoder agrees with `ar`
computed in bfloat16 up to the rounding of forwards of different widths: a verification forward
over N tokens rounds differently from N one-token forwards, so where two tokens' logits tie
within bf16's precision the outputs may part (BENCHMARKS.md reports the share of identical
outputs).
"""
from __future__ import annotations

import os
import warnings

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16"}
CHOICES = ("auto", *DTYPES)
DTYPE_ENV = "PARASUITE_DTYPE"        # the process default (python -m apps --dtype sets it)
_WARNED: set[str] = set()


def resolve_dtype(dtype="auto", device=None) -> torch.dtype:
    """A torch dtype for a model on `device` (None: the CPU); ValueError naming the choices for
    anything else."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values() and dtype != torch.float16:
            raise ValueError(f"dtype {dtype} is not supported: use one of {', '.join(CHOICES)}")
        chosen = dtype
    elif isinstance(dtype, str) and ALIASES.get(dtype.lower(), dtype.lower()) in CHOICES:
        name = ALIASES.get(dtype.lower(), dtype.lower())
        on_cuda = device is not None and torch.device(device).type == "cuda"
        if name == "auto":
            from .linear_forms import native_bf16
            return torch.bfloat16 if on_cuda or native_bf16() else torch.float32
        chosen = DTYPES[name]
    else:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(CHOICES)}")
    if chosen == torch.bfloat16 and (device is None or torch.device(device).type == "cpu"):
        from .linear_forms import native_bf16
        if not native_bf16() and "slow-bf16" not in _WARNED:
            _WARNED.add("slow-bf16")
            warnings.warn("bfloat16 on a CPU without native bf16 (no avx512_bf16 / amx_bf16): it runs, emulated and "
                          "slower than float32; use --dtype float32 (or auto)", stacklevel=2)
    return chosen


def default_dtype(fallback: str = "float32") -> str:
    """The process default: $PARASUITE_DTYPE (set by `python -m apps --dtype`), else the domain's
    `fallback` (text's is "auto": native precision; the other domains' float32)."""
    return os.environ.get(DTYPE_ENV) or fallback


def cast(model: torch.nn.Module, dtype=None) -> torch.dtype:
    """Cast `model` (floating parameters and buffers) to `dtype` resolved on its device (None: the
    process default); returns the dtype it runs in."""
    device = next(model.parameters()).device
    chosen = resolve_dtype(default_dtype() if dtype is None else dtype, device)
    model.to(chosen)
    return chosen


def add_dtype_argument(parser, default: str | None = "float32") -> None:
    """A CLI's --dtype option (default None: the loader's, $PARASUITE_DTYPE or auto)."""
    parser.add_argument("--dtype", default=default, choices=CHOICES,
                        help=f"the model's dtype (default: {default or '$PARASUITE_DTYPE, else auto'}); auto = bfloat16 where the CPU runs it natively "
                             "(avx512_bf16 / amx_bf16) or on CUDA, else float32. In bfloat16 lossless decoders agree "
                             "with ar computed in bfloat16: bitwise for chain drafts on a fixed step (text's way in bfloat16), "
                             "elsewhere up to ties within bf16's rounding.")


__all__ = ["CHOICES", "DTYPE_ENV", "DTYPES", "add_dtype_argument", "cast", "default_dtype", "resolve_dtype"]
