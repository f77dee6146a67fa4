"""Pure-torch references of the decoding ops every decoder shares: acceptance (greedy prefix,
speculative), sampling (filtered probabilities, inverse-CDF draws) and draft masks (causal, block
causal, tree). Batched, no host synchronisation (the masks are built from host lists).

Randomness comes in as explicit uniforms so every implementation makes the same decision for
the same inputs. Shapes: B batch, N draft length, V vocabulary.
"""
from __future__ import annotations

import torch


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One index per row of unnormalised weights (B, V) >= 0, with uniforms u (B,) in [0, 1)."""
    cdf = weights.cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
    return idx.clamp(max=weights.shape[-1] - 1)


def greedy_prefix(draft: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """draft (B, N), target (B, N+1) argmax tokens -> accepted (B,), next token (B,)."""
    agree = (draft == target[:, :-1]).long()
    accepted = agree.cumprod(-1).sum(-1)
    return accepted, target.gather(1, accepted[:, None]).squeeze(1)


def speculative_accept(draft: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, u: torch.Tensor,
                       u_next: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling over a batch. draft (B, N) drawn from q (B, N, V) (None: point masses),
    p (B, N+1, V) target probabilities, u (B, N) acceptance uniforms, u_next (B,) for the token
    after the accepted prefix; lengths (B,) real drafts per row of a ragged batch (default N: row b
    uses draft[b, :lengths[b]] and p[b, :lengths[b] + 1]). Accept draft i while
    u_i * q_i(x_i) < p_i(x_i); at the first rejection k sample norm(max(0, p_k - q_k)), or p_len
    when all pass."""
    b, n = draft.shape
    lengths = torch.full((b,), n, dtype=torch.long, device=p.device) if lengths is None else lengths
    inside = torch.arange(n, device=p.device) < lengths[:, None]
    p_x = p[:, :n].gather(2, draft[..., None]).squeeze(-1)
    q_x = torch.ones_like(p_x) if q is None else q.gather(2, draft[..., None]).squeeze(-1)
    accepted = ((u * q_x < p_x) & inside).long().cumprod(-1).sum(-1)           # (B,)
    rows = torch.arange(b, device=p.device)
    p_k = p[rows, accepted]                                                      # (B, V)
    rejected = accepted < lengths                                                # else q_len = 0: sample p_len
    if q is None:
        q_k = torch.zeros_like(p_k)
        at = draft.gather(1, accepted.clamp(max=n - 1)[:, None]) if n else torch.zeros(b, 1, dtype=torch.long)
        q_k[rows[rejected], at[rejected, 0]] = 1.0
    else:
        q_pad = torch.cat([q, q.new_zeros(b, 1, q.shape[-1])], 1)
        q_k = q_pad[rows, accepted] * rejected[:, None]
    residual = (p_k - q_k).clamp(min=0.0)
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_k)
    return accepted, inverse_cdf(residual, u_next)


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """(..., V) logits -> (..., V) float32 probabilities after temperature, top-k and top-p; temperature
    0 gives a one-hot on the argmax (ties: lowest index, like torch.argmax). Every distribution a
    decoder compares (target p, draft q, residual) goes through it (suite.logits_to_probs)."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always the top token)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_probs(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One index per row of probabilities (B, V) with uniforms u (B,): the inverse CDF, never a
    zero-probability index (float round-off at the top of the CDF gives the argmax instead)."""
    idx = inverse_cdf(probs, u)
    return torch.where(probs.gather(1, idx[:, None])[:, 0] > 0, idx, probs.argmax(-1))


def sample_logits(logits: torch.Tensor, temperature: float, u: torch.Tensor, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Temperature / top-k / top-p sampling of (B, V) logits with uniforms u (B,); temperature 0
    is the argmax: `sample_probs(filtered_probs(...), u)` (suite.draw)."""
    if temperature == 0:
        return logits.argmax(-1)
    return sample_probs(filtered_probs(logits, temperature, top_k, top_p), u)


# -- attention masks (True = may attend), (N, T) ------------------------------------------------------

def causal_mask(n: int, past: int = 0, device=None) -> torch.Tensor:
    """n new queries after `past` cached slots."""
    return torch.ones(n, past + n, dtype=torch.bool, device=device).tril(past)


def block_causal_mask(block_sizes: list[int], device=None) -> torch.Tensor:
    """Bidirectional inside each block, causal across blocks (block diffusion, LPD groups)."""
    block = torch.repeat_interleave(torch.arange(len(block_sizes), device=device),
                                    torch.tensor(block_sizes, dtype=torch.long, device=device))
    return block[:, None] >= block[None, :]


def tree_mask(parents: list[int], device=None) -> torch.Tensor:
    """Each node sees itself and its ancestors; parents[i] < i, or -1 for a root (tree drafts).
    Built on the host and sent to `device` once."""
    n = len(parents)
    rows: list[list[bool]] = []
    for i, parent in enumerate(parents):
        row = list(rows[parent]) if parent >= 0 else [False] * n
        row[i] = True
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool, device=device).reshape(n, n)
