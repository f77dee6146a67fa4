"""Triton implementations of the ops in `reference.py` (same signatures, same decisions).

One program per batch row; loops over the vocabulary in blocks (V is a compile-time constant:
one compilation per vocabulary size). They run on CUDA
tensors, and on CPU tensors under the Triton interpreter (TRITON_INTERPRET=1, used by the tests).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference

BLOCK_V = 1024


@triton.jit
def _greedy_prefix_kernel(draft_ptr, target_ptr, accepted_ptr, next_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    idx = tl.arange(0, BLOCK_N)
    inside = idx < N
    d = tl.load(draft_ptr + row * N + idx, mask=inside, other=0)
    t = tl.load(target_ptr + row * (N + 1) + idx, mask=inside, other=0)
    first_miss = tl.min(tl.where(inside & (d != t), idx, N), axis=0)
    tl.store(accepted_ptr + row, first_miss)
    tl.store(next_ptr + row, tl.load(target_ptr + row * (N + 1) + first_miss))


def greedy_prefix(draft: torch.Tensor, target: torch.Tensor):
    b, n = draft.shape
    if n == 0:
        return reference.greedy_prefix(draft, target)
    draft, target = draft.contiguous(), target.contiguous()
    accepted = torch.empty(b, dtype=torch.long, device=draft.device)
    nxt = torch.empty(b, dtype=torch.long, device=draft.device)
    _greedy_prefix_kernel[(b,)](draft, target, accepted, nxt, n, BLOCK_N=triton.next_power_of_2(n))
    return accepted, nxt


@triton.jit
def _speculative_kernel(draft_ptr, q_ptr, p_ptr, u_ptr, unext_ptr, len_ptr, accepted_ptr, next_ptr, N,
                        V: tl.constexpr, HAS_Q: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, BLOCK_N)
    n_real = tl.load(len_ptr + row)
    inside = i < n_real
    x = tl.load(draft_ptr + row * N + i, mask=inside, other=0)
    p_x = tl.load(p_ptr + (row * (N + 1) + i) * V + x, mask=inside, other=0.0)
    if HAS_Q:
        q_x = tl.load(q_ptr + (row * N + i) * V + x, mask=inside, other=1.0)
    else:
        q_x = tl.full([BLOCK_N], 1.0, tl.float32)
    u = tl.load(u_ptr + row * N + i, mask=inside, other=0.0)
    k = tl.min(tl.where(inside & (u * q_x >= p_x), i, n_real), axis=0)     # first rejection, or n_real
    rejected_token = tl.sum(tl.where(i == k, x, 0), axis=0)
    p_row = p_ptr + (row * (N + 1) + k) * V
    # pass 1: mass of the residual norm(max(0, p_k - q_k)) (q_len = 0)
    total = 0.0
    for start in range(0, V, BLOCK):
        v = start + tl.arange(0, BLOCK)
        p_k = tl.load(p_row + v, mask=v < V, other=0.0)
        q_k = _q_row(q_ptr, row, k, N, n_real, V, v, rejected_token, HAS_Q)
        total += tl.sum(tl.maximum(p_k - q_k, 0.0), axis=0)
    use_p = total <= 0.0
    if use_p:
        total = 0.0
        for start in range(0, V, BLOCK):
            v = start + tl.arange(0, BLOCK)
            total += tl.sum(tl.load(p_row + v, mask=v < V, other=0.0), axis=0)
    # pass 2: inverse CDF at u_next * total
    threshold = tl.load(unext_ptr + row) * total
    running = 0.0
    found = V - 1
    for start in range(0, V, BLOCK):
        v = start + tl.arange(0, BLOCK)
        p_k = tl.load(p_row + v, mask=v < V, other=0.0)
        q_k = _q_row(q_ptr, row, k, N, n_real, V, v, rejected_token, HAS_Q)
        w = tl.where(use_p, p_k, tl.maximum(p_k - q_k, 0.0))
        cdf = running + tl.cumsum(w, axis=0)
        hit = tl.min(tl.where((cdf > threshold) & (v < V), v, V), axis=0)
        found = tl.minimum(found, hit)
        running += tl.sum(w, axis=0)
    tl.store(accepted_ptr + row, k)
    tl.store(next_ptr + row, found)


@triton.jit
def _q_row(q_ptr, row, k, N, n_real, V: tl.constexpr, v, rejected_token, HAS_Q: tl.constexpr):
    if HAS_Q:
        return tl.load(q_ptr + (row * N + k) * V + v, mask=(v < V) & (k < n_real), other=0.0)
    return tl.where((v == rejected_token) & (k < n_real), 1.0, 0.0)


def speculative_accept(draft, q, p, u, u_next, lengths=None):
    b, n = draft.shape
    v = p.shape[-1]
    if lengths is None:
        lengths = torch.full((b,), n, dtype=torch.long, device=p.device)
    accepted = torch.empty(b, dtype=torch.long, device=p.device)
    nxt = torch.empty(b, dtype=torch.long, device=p.device)
    q_arg = q.float().contiguous() if q is not None else p   # unused when HAS_Q is False
    _speculative_kernel[(b,)](draft.contiguous(), q_arg, p.float().contiguous(), u.float().contiguous(),
                              u_next.float().contiguous(), lengths.contiguous(), accepted, nxt, n, v, HAS_Q=q is not None,
                              BLOCK_N=max(2, triton.next_power_of_2(max(n, 1))), BLOCK=min(BLOCK_V, triton.next_power_of_2(v)))
    return accepted, nxt


@triton.jit
def _sample_kernel(logits_ptr, u_ptr, out_ptr, V: tl.constexpr, inv_temperature, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row * V
    top = -float("inf")
    for start in range(0, V, BLOCK):
        v = start + tl.arange(0, BLOCK)
        top = tl.maximum(top, tl.max(tl.load(base + v, mask=v < V, other=-float("inf")) * inv_temperature, axis=0))
    total = 0.0
    for start in range(0, V, BLOCK):
        v = start + tl.arange(0, BLOCK)
        z = tl.load(base + v, mask=v < V, other=-float("inf")) * inv_temperature
        total += tl.sum(tl.exp(z - top), axis=0)
    threshold = tl.load(u_ptr + row) * total
    running = 0.0
    found = V - 1
    for start in range(0, V, BLOCK):
        v = start + tl.arange(0, BLOCK)
        w = tl.exp(tl.load(base + v, mask=v < V, other=-float("inf")) * inv_temperature - top)
        cdf = running + tl.cumsum(w, axis=0)
        found = tl.minimum(found, tl.min(tl.where((cdf > threshold) & (v < V), v, V), axis=0))
        running += tl.sum(w, axis=0)
    tl.store(out_ptr + row, found)


def sample_logits(logits, temperature, u, top_k=None, top_p=None):
    """Fused temperature sampling; top-k / top-p and greedy fall back to the reference."""
    if temperature == 0 or top_k is not None or top_p is not None:
        return reference.sample_logits(logits, temperature, u, top_k, top_p)
    b, v = logits.shape
    out = torch.empty(b, dtype=torch.long, device=logits.device)
    _sample_kernel[(b,)](logits.float().contiguous(), u.float().contiguous(), out, v, 1.0 / temperature,
                         BLOCK=min(BLOCK_V, triton.next_power_of_2(v)))
    return out
