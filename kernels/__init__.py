"""GPU kernels shared by all decoders, each beside its pure-torch reference.

`kernels.op(name)` returns the implementation the dispatch table picks for the current setting
(`PARASUITE_KERNELS=torch|triton|auto`, default auto: Triton on CUDA tensors when Triton is
importable, the reference otherwise). The references are the defaults and the test oracles.
Importing this package imports neither Triton nor transformers.
"""
from .dispatch import OPS, op

__all__ = ["OPS", "op"]
