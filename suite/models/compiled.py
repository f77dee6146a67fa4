"""Compiled decode steps: the inductor settings by name, and their artifacts cached on disk.

`torch.compile` of a model's forward over a static cache (suite.models.static_cache) compiles one
graph per decode width. Inductor keeps what it compiled (its FX graph cache) in
$TORCHINDUCTOR_CACHE_DIR; `use_disk_cache` points that at the parasuite cache folder
(~/.cache/parasuite/inductor) unless the user set it, so a second process start reuses the
generated kernels and pays only dynamo's tracing.

Settings (what `--compile` / `compile=` take), measured per machine with `python -m text.bench_compile`:
  * "default":      inductor as it comes;
  * "freezing":     weights folded into the graph as constants (inductor may prepack them);
  * "cpp_wrapper":  freezing, and the graph's Python wrapper replaced by C++ (less per-step host time);
  * "max-autotune": inductor benchmarks GEMM templates per shape at compile time (no CUDA graphs off CUDA).
"""
from __future__ import annotations

import os

SETTINGS = ("default", "freezing", "cpp_wrapper", "max-autotune")


def compile_kwargs(setting: str, device) -> dict:
    """The keyword arguments of `torch.compile` for a named setting on `device` (CUDA gets CUDA graphs
    where the setting allows them)."""
    import torch
    cuda = torch.device(device).type == "cuda"
    if setting == "default":
        return {"mode": "reduce-overhead" if cuda else None}
    if setting == "freezing":
        return {"options": {"freezing": True}}
    if setting == "cpp_wrapper":
        return {"options": {"freezing": True, "cpp_wrapper": True}}
    if setting == "max-autotune":
        return {"mode": "max-autotune" if cuda else "max-autotune-no-cudagraphs"}
    raise ValueError(f"unknown compile setting {setting!r}: pass one of {', '.join(SETTINGS)}")


def use_disk_cache() -> str:
    """Point inductor's on-disk cache at the parasuite cache folder (unless $TORCHINDUCTOR_CACHE_DIR is
    set) and return the folder in use."""
    from suite.runtime.storage import cache_dir
    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir("inductor")))
