"""The one dispatch table: op name -> implementation per backend."""
from __future__ import annotations

import importlib
import os

from . import reference

OPS = {
    "greedy_prefix": "greedy_prefix",
    "speculative_accept": "speculative_accept",
    "sample_logits": "sample_logits",
}
BACKENDS = ("auto", "torch", "triton")


def _triton_module():
    try:
        return importlib.import_module(".triton_ops", __package__)
    except ImportError:
        return None


def backend_for(device_type: str) -> str:
    """PARASUITE_KERNELS=torch|triton|auto (default auto: triton for CUDA tensors if importable)."""
    choice = os.environ.get("PARASUITE_KERNELS", "auto")
    if choice not in BACKENDS:
        raise ValueError(f"PARASUITE_KERNELS={choice!r}; use one of {', '.join(BACKENDS)}")
    if choice == "auto":
        interpreted = os.environ.get("TRITON_INTERPRET") == "1"
        return "triton" if (device_type == "cuda" or interpreted) and _triton_module() else "torch"
    if choice == "triton" and _triton_module() is None:
        raise ValueError("PARASUITE_KERNELS=triton but Triton is not importable; install triton or use torch")
    return choice


def op(name: str, device_type: str = "cpu"):
    """The implementation of `name` for tensors on `device_type`."""
    if name not in OPS:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(OPS)}")
    module = _triton_module() if backend_for(device_type) == "triton" else reference
    return getattr(module, OPS[name])
