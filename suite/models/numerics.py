"""Which rounding decides whether a wide forward and a one-token forward agree in bfloat16.

A lossless decoder returns `ar`'s tokens only if its verification forward over N tokens scores
them as N one-token forwards would. In float32 the two differ by accumulation order only (about
1e-6 relative); in bfloat16 (`model.to(torch.bfloat16)`) every matmul output, the residual stream,
the norms and the logits are rounded to 8 bits of mantissa, so that difference can cross a rounding
boundary and grow into a different argmax. A bf16 matmul on native hardware (AMX, AVX-512 BF16,
CUDA) reads bf16 operands and accumulates in float32; whether its *output* stays float32 is the
arrangement's choice. `bf16_operands(model)` computes exactly what a bf16 GEMM with float32
accumulation and float32 output gives, on any CPU: the weights rounded to bf16 once (kept as float32
values), each linear layer's input rounded to bf16, everything else (residual stream, norms,
softmax, logits, K/V) in float32. Comparing its agreement with its own `ar` against full bf16's
tells which part decides agreement (text.bench --peers --numerics); it runs at float32 speed, so it
measures numerics, not speed.

Measured 2026-12-05 (AMD EPYC, 2 threads, 4 held-out chat prompts x 48 greedy tokens, fixed draft
sizes, prompts whose tokens equal their mode's own `ar`): full bfloat16 ngram 2/4, lookahead 1/4,
jacobi 1/4 (first differing token 7-37); bf16 operands 3/4 each (first differing token 42-47).
Float32 outputs and residual stream delay and thin the disagreements, but rounding the activations
to bf16, which every native bf16 GEMM does, is enough to part a wide forward from a one-token one:
float32's 100% (tests/core/test_exact.py) needs float32 operands.
"""
from __future__ import annotations

import torch
from torch import nn


def _round_input(module, args):
    x = args[0]
    if x.dtype == torch.float32:
        return (x.to(torch.bfloat16).to(torch.float32), *args[1:])
    return None


def bf16_operands(model: nn.Module) -> nn.Module:
    """`model` (float32, in place) computing as bf16 operands with float32 accumulation and outputs:
    every nn.Linear's weight rounded to bf16 (stored as float32) and its input rounded to bf16 on
    each call (a forward pre-hook); embeddings, norms, attention and logits stay float32. Returns it."""
    if next(model.parameters()).dtype != torch.float32:
        raise ValueError("bf16_operands takes a float32 model: load it with dtype='float32'")
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.copy_(m.weight.to(torch.bfloat16).to(torch.float32))
                if m.bias is not None:
                    m.bias.copy_(m.bias.to(torch.bfloat16).to(torch.float32))
                m.register_forward_pre_hook(_round_input)
    return model


__all__ = ["bf16_operands"]
