"""Sampling parameters, and the decoders' entry to the one logits -> probabilities transform and
the one inverse-CDF draw (both in kernels: `filtered_probs`, `sample_probs`, `sample_logits`).

Every distribution the decoders compare (target p, draft q, residual) goes through
`logits_to_probs`, so a speculative rule sees p and q processed the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import kernels
from kernels.reference import filtered_probs, sample_probs


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
    """(..., V) logits -> (..., V) float32 probabilities after temperature, top-k and top-p
    (kernels' `filtered_probs`). Greedy gives a one-hot on the argmax (ties: lowest index, like torch.argmax)."""
    return filtered_probs(logits, params.temperature, params.top_k, params.top_p)


def draw(logits: torch.Tensor, params: SamplingParams, rng=None) -> torch.Tensor:
    """(..., V) logits -> (...) tokens: `sample(logits_to_probs(logits, params), rng)` (kernels'
    `sample_logits`: the reference, or its fused Triton form on CUDA), with greedy taking the argmax
    directly (what sampling its one-hot returns) and spending no uniforms."""
    if params.greedy:
        return logits.argmax(-1)
    flat = logits.reshape(-1, logits.shape[-1])
    u = uniforms_for((flat.shape[0], 1), rng, flat.device)[:, 0]
    tokens = kernels.op("sample_logits", flat.device.type)(flat, params.temperature, u, params.top_k, params.top_p)
    return tokens.reshape(logits.shape[:-1])


def uniforms_for(shape, rng, device) -> torch.Tensor:
    """`rng` as uniforms of `shape`: a tensor of them as given (a row stream's, suite.random_streams),
    else torch.rand from a torch.Generator (None: torch's global one)."""
    if isinstance(rng, torch.Tensor):
        return rng.reshape(shape).to(device)
    return torch.rand(shape, generator=rng, device=device)


def sample(probs: torch.Tensor, rng=None) -> torch.Tensor:
    """Draw one index per row of (..., V) probabilities -> (...) long; rng: (...) uniforms (a row
    stream's) or a torch.Generator. One uniform per row through the inverse CDF (kernels'
    `sample_probs`): deterministic for given uniforms or a seeded generator."""
    flat = probs.reshape(-1, probs.shape[-1])
    u = uniforms_for((flat.shape[0], 1), rng, flat.device)[:, 0]
    return sample_probs(flat, u).reshape(probs.shape[:-1])
