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

from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from ..loop import Acceptance, DecodeState, Draft
from ..sampling import logits_to_probs, sample
from ._frames import frame_acceptance, frame_draft, last_frame_hidden, only_head0_ends, require_frames


@dataclass(frozen=True)
class LocalAR:
    codebooks: int | None = None    # Q; bound from the adapter's config
    bos: int | None = None
    eos: int | None = None
    pad: int | None = None

    name: ClassVar[str] = "local_ar"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, model) -> "LocalAR":
        return replace(self, **require_frames(self, model, output="local"))

    def start(self, state: DecodeState) -> None:
        if self.codebooks is None:
            raise ValueError("local_ar needs the codebook constants: decode through speech's TTS or call .bind(model)")

    def propose(self, state: DecodeState) -> Draft:
        return frame_draft(state, self.codebooks, self.pad)

    def accept(self, state: DecodeState, draft: Draft, out) -> Acceptance:
        rows = [b for b in range(state.batch) if not state.done[b]]
        h = last_frame_hidden(draft, out, rows)                                      # (M, D)
        codes = torch.full((len(rows), self.codebooks), out.mask_id, dtype=torch.long)   # (M, Q)
        for q in range(self.codebooks):                  # one local pass per codebook
            logits = only_head0_ends(out.local(h, codes, "ar"), self.eos)[:, q]       # (M, V)
            codes[:, q] = sample(logits_to_probs(logits, state.params), state.generator)
        committed = [[] for _ in range(state.batch)]
        for frame, b in zip(codes.tolist(), rows):
            committed[b] = [(self.eos,) * self.codebooks] if frame[0] == self.eos else [tuple(frame)]
        return frame_acceptance(draft, committed)
