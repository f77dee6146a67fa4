"""MaskGIT over the codebooks of a frame (Chang et al. 2022, "MaskGIT: Masked Generative Image
Transformer"; per-codebook masked generation as in MaskGCT, Wang et al. 2024), run by the local
transformer on the backbone's state.

One backbone forward per frame (T + 1 for T frames, prefill included); then `steps` local passes:
all codebooks start masked; each pass predicts every masked codebook at once (bidirectional,
given h_t and the unmasked ones), samples them, keeps the most confident and re-masks the rest,
so that after pass s, Q - ceil(cos(pi/2 * s / steps) * Q) codebooks are fixed (cosine schedule,
at least one more per pass).
Codebook 0 may say EOS: the row ends (codebooks q > 0 never emit EOS).

Not exact: codebooks fixed in the same pass are sampled independently given the rest; with
steps < Q this is a cheaper approximation of the local model's joint p(c_t | h_t) (fewer local
passes than `local_ar`'s Q). Its quality cost is reported by `python -m speech.bench`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import DecodeState, Draft
from ...sampling import logits_to_probs, sample
from .base import (FrameDecoder, code_uniforms, frames_until_end, last_frame_hidden,
                   only_head0_ends)


@dataclass(frozen=True)
class LocalMaskGIT(FrameDecoder):
    steps: int = 2                  # local passes per frame

    name: ClassVar[str] = "local_maskgit"
    output: ClassVar[str] = "local"

    def start(self, state: DecodeState) -> None:
        super().start(state)
        if not 1 <= self.steps <= self.codebooks:
            raise ValueError(f"local_maskgit steps must be in [1, {self.codebooks}] (one per codebook at most), "
                             f"got {self.steps}")

    def next_frames(self, state: DecodeState, draft: Draft, out, rows: list[int]) -> list[list[tuple]]:
        h = last_frame_hidden(draft, out, rows)                                      # (M, D)
        codes = torch.full((len(rows), self.codebooks), out.mask_id, dtype=torch.long, device=h.device)   # (M, Q)
        for s in range(1, self.steps + 1):
            u = code_uniforms(state, rows, (self.codebooks,), (s - 1) * self.codebooks)   # (M, Q) this pass's
            codes = self._pass(state, out, h, codes, fixed_after(s, self.steps, self.codebooks), u)
        return [frames_until_end([frame], self.eos) for frame in codes.tolist()]   # the step's one host sync

    def _pass(self, state, out, h, codes, target: int, u: torch.Tensor) -> torch.Tensor:
        """Sample every masked codebook, keep the most confident until `target` are fixed per row."""
        masked = codes == out.mask_id                                                # (M, Q)
        probs = logits_to_probs(only_head0_ends(out.local(h, codes, "maskgit"), self.eos), state.params)
        drawn = sample(probs, u)                                                     # (M, Q)
        confidence = probs.gather(-1, drawn[..., None])[..., 0].masked_fill(~masked, float("inf"))
        rank = confidence.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)   # 0 = most confident
        keep = masked & (rank < target)
        return torch.where(keep, drawn, codes)


def fixed_after(step: int, steps: int, q: int) -> int:
    """Codebooks fixed after pass `step` of `steps`: the cosine schedule, with at least one new
    codebook per pass and one left for each later pass (all of them after the last)."""
    cosine = q - math.ceil(math.cos(math.pi / 2 * step / steps) * q - 1e-9)
    return min(max(cosine, step), q - (steps - step))
