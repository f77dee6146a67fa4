"""Sampling parameters and the one logits -> probabilities transform.

Every distribution the decoders compare (target p, draft q, residual) goes through
`logits_to_probs`, so a speculative rule sees p and q processed the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy (a one-hot on the argmax)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}; use 0 for greedy decoding")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def repeatable(self) -> bool:
        """Sampled with a seed: the request must give the same tokens every time, so no choice
        that changes them (a draft's size, auto's candidate) may read the clock."""
        return not self.greedy and self.seed is not None


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(..., V) logits -> (..., V) float32 probabilities after temperature, top-k and top-p.

    Greedy gives a one-hot on the argmax (ties: lowest index, like torch.argmax)."""
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k is not None and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p is not None and params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always the top token)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        drop_sorted = mass_before >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def draw(logits: torch.Tensor, params: SamplingParams, rng=None) -> torch.Tensor:
    """(..., V) logits -> (...) tokens: `sample(logits_to_probs(logits, params), rng)`, with
    greedy taking the argmax directly (what sampling its one-hot returns) and spending no uniforms."""
    if params.greedy:
        return logits.argmax(-1)
    return sample(logits_to_probs(logits, params), rng)


def uniforms_for(shape, rng, device) -> torch.Tensor:
    """`rng` as uniforms of `shape`: a tensor of them as given (a row stream's, suite.random_streams),
    else torch.rand from a torch.Generator (None: torch's global one)."""
    if isinstance(rng, torch.Tensor):
        return rng.reshape(shape).to(device)
    return torch.rand(shape, generator=rng, device=device)


def sample(probs: torch.Tensor, rng=None) -> torch.Tensor:
    """Draw one index per row of (..., V) probabilities -> (...) long; rng: (...) uniforms (a row
    stream's) or a torch.Generator."""
    flat = probs.reshape(-1, probs.shape[-1])
    # inverse-CDF sampling with one uniform per row: deterministic for given uniforms or a seeded generator
    u = uniforms_for((flat.shape[0], 1), rng, flat.device)
    cdf = flat.cumsum(-1)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp(max=flat.shape[-1] - 1)
    # never return a zero-probability index (float round-off at the top of the CDF)
    idx = torch.where(flat.gather(1, idx) > 0, idx, flat.argmax(-1, keepdim=True))
    return idx.reshape(probs.shape[:-1])
