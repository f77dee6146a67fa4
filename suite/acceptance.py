"""Pure acceptance rules shared by every decoder. The greedy-prefix and speculative rules exist
once, batched, in kernels (a pure-torch reference and its Triton form); here they are read one
row at a time, for decoders whose rows verify different structures.

Shapes: N draft length, V vocabulary. `p` always holds N+1 target distributions: p[i] is the
target's distribution for draft position i (p[N] is the bonus position after the last draft).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import kernels

from .sampling import sample, uniforms_for


@dataclass(frozen=True)
class Verdict:
    """`num_accepted` drafts kept, then `next_token` (sampled or corrected) is committed."""

    num_accepted: int
    next_token: int


def accept_greedy_prefix(draft: torch.Tensor, target: torch.Tensor) -> Verdict:
    """draft (N,), target (N+1,) argmax tokens: keep the longest prefix where they agree (one row
    of the batched rule, kernels' `greedy_prefix`)."""
    accepted, following = kernels.op("greedy_prefix", target.device.type)(draft[None], target[None])
    return Verdict(int(accepted[0]), int(following[0]))


def accept_speculative(draft: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, rng=None) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), one row of the batched
    rule (kernels' `speculative_accept`, which every decoder family uses).

    draft (N,) tokens drawn from q (N, V); q=None means point-mass drafts (n-gram, lookup).
    Accept draft i with probability min(1, p_i(x)/q_i(x)); at the first rejection sample the
    residual norm(max(0, p_i - q_i)); if all N pass, sample the bonus from p_N.
    The committed tokens are distributed exactly as the target's (greedy p is one-hot).
    rng: a torch.Generator, or the uniforms (u (N,), u_next ()) of a row stream (`RowStreams.chain`)."""
    n = draft.shape[0]
    u, u_next = rng if isinstance(rng, tuple) else (rng, rng)
    u, u_next = uniforms_for((1, n), u, p.device), uniforms_for((1,), u_next, p.device)
    accepted, following = kernels.op("speculative_accept", p.device.type)(
        draft[None].to(p.device), None if q is None else q[None], p[None], u, u_next)
    return Verdict(int(accepted[0]), int(following[0]))


def accept_multi_draft(p: torch.Tensor, candidates: list[int], rng=None) -> tuple[int, bool]:
    """Several point-mass drafts for one position (SpecInfer-style multi-draft sampling).

    p (V,). Try the candidates in order: accept x with probability p(x); on rejection set
    p(x)=0 and renormalise. Returns (token, True) for an accepted candidate, or a sample from
    the final residual with False. Lossless; greedy p (one-hot) accepts exactly the argmax.
    rng: a torch.Generator, or (len(candidates) + 1,) uniforms: each candidate's test, then the
    residual's draw (a row stream's, `RowStreams.row`)."""
    p = p.clone()
    u = uniforms_for((len(candidates) + 1,), rng, p.device)
    for i, x in enumerate(candidates):
        if float(u[i]) < float(p[x]):
            return x, True
        p[x] = 0.0
        total = p.sum()
        if total <= 0:
            break
        p = p / total
    return int(sample(p, u[-1:])), False


def accept_by_confidence(probs: torch.Tensor, tokens: torch.Tensor, threshold: float | None = None,
                         top_k: int | None = None) -> torch.Tensor:
    """Which masked positions to commit in parallel (Fast-dLLM / SDAR threshold unmasking).

    probs (N, V), tokens (N,) the proposed values. Confidence = probs[i, tokens[i]]. Commit the
    positions with confidence >= threshold, or the top_k most confident; always at least one
    (the most confident). Returns an (N,) bool mask."""
    if (threshold is None) == (top_k is None):
        raise ValueError("accept_by_confidence takes exactly one of threshold= or top_k=")
    conf = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if threshold is not None:
        keep = conf >= threshold
    else:
        keep = torch.zeros_like(conf, dtype=torch.bool)
        keep[conf.topk(min(top_k, conf.shape[0])).indices] = True
    keep[conf.argmax().reshape(1)] = True      # an index tensor: no host sync
    return keep
