"""Local autoregressive decoding over codebooks (RQ-Transformer, Lee et al. 2022, "Autoregressive
Image Generation using Residual Quantization"; Moshi's depth transformer, Défossez et al. 2024).

One backbone forward per frame (T + 1 for T frames, prefill included) gives the state h_t; a small
local transformer then samples the frame's Q codebooks one after another,
p(c_t) = prod_q p(c_t,q | h_t, c_t,<q): Q local passes per frame, each over at most Q + 1 slots.
Codebook 0 may say EOS: the row ends (codebooks q > 0 never emit EOS).

Exact: this is ancestral sampling of the local-head model's own factorisation (nothing is dropped
or approximated; greedy equals the reference computation without any cache, tested).
The adapter's forward returns a `LocalHeadOutput` (speech: FrameTTSAdapter(model, output="local")).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import DecodeState, Draft
from ...sampling import logits_to_probs, sample
from .base import (FrameDecoder, code_uniforms, frames_until_end, last_frame_hidden,
                   only_head0_ends)


@dataclass(frozen=True)
class LocalAR(FrameDecoder):

    name: ClassVar[str] = "local_ar"
    output: ClassVar[str] = "local"

    def next_frames(self, state: DecodeState, draft: Draft, out, rows: list[int]) -> list[list[tuple]]:
        h = last_frame_hidden(draft, out, rows)                                      # (M, D)
        codes = torch.full((len(rows), self.codebooks), out.mask_id, dtype=torch.long, device=h.device)   # (M, Q)
        u = code_uniforms(state, rows, (self.codebooks,))                            # (M, Q)
        for q in range(self.codebooks):                  # one local pass per codebook
            logits = only_head0_ends(out.local(h, codes, "ar"), self.eos)[:, q]       # (M, V)
            codes[:, q] = sample(logits_to_probs(logits, state.params), u[:, q])
        return [frames_until_end([frame], self.eos) for frame in codes.tolist()]   # the step's one host sync
