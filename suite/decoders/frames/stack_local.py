"""Frame stacking with a local transformer: the backbone steps 2 frames per forward (as `stack`,
frames grouped as in VALL-E 2's grouped code modeling), and a small local transformer spanning
both frames samples their 2Q codes one after another (RQ-Transformer's depth decoding, Lee et al.
2022, stretched over the group):
p(f_2i, f_2i+1 | h) = prod_j p(c_j | h, c_<j), j over the 2Q codes, frame by frame.

So the second frame is sampled knowing the first (what `stack`'s independent heads lack).
floor(T / 2) + 1 backbone forwards for T frames (prefill included; the EOS marker is a frame too),
like `stack`; then 2Q local passes per forward, each over at most 2Q + 1 slots. Codebook 0 of
either frame may say EOS: the row ends there (codebooks q > 0 never emit EOS).

Exact: ancestral sampling of the stack-local model's own factorisation (nothing dropped or
approximated; greedy equals the reference computation without any cache, tested). That model is
not `flat`'s (its backbone state moves on every second frame); the bench reports the quality cost.
The adapter's forward returns a `LocalHeadOutput` whose local transformer spans 2 frames
(speech: FrameTTSAdapter(stack_model, output="local"), trained by `python -m speech.train tts-stack`).
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
class StackLocal(FrameDecoder):

    name: ClassVar[str] = "stack_local"
    output: ClassVar[str] = "local"

    def next_frames(self, state: DecodeState, draft: Draft, out, rows: list[int]) -> list[list[tuple]]:
        if out.frames < 2:
            raise ValueError("stack_local needs a local transformer spanning 2 frames (the tts_stack checkpoint): "
                             "train it with `python -m speech.train tts-stack`")
        h = last_frame_hidden(draft, out, rows)                                        # (M, D)
        q = self.codebooks
        codes = torch.full((len(rows), 2 * q), out.mask_id, dtype=torch.long, device=h.device)   # (M, 2Q)
        u = code_uniforms(state, rows, (2 * q,))                                       # (M, 2Q)
        for j in range(2 * q):                           # one local pass per code, frame by frame
            logits = only_head0_ends(out.local(h, codes, "ar").unflatten(1, (2, q)), self.eos)[:, j // q, j % q]
            codes[:, j] = sample(logits_to_probs(logits, state.params), u[:, j])
        return [frames_until_end([both[:q], both[q:]], self.eos) for both in codes.tolist()]   # the one host sync
