"""Helpers for multi-codebook decoders: a row's committed tokens are frames, tuples of Q ids, and
drafts carry tokens (B, N, Q). The adapter returns logits (B, N', Q, V)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, ClassVar

import torch

from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import SAMPLE
from ..base import DecoderBase


@dataclass(frozen=True)
class FrameDecoder(DecoderBase):
    """What every frame decoder shares: the codebook constants bound from the adapter's config,
    and a draft of one slot per row holding its last committed frame(s)."""
    codebooks: int | None = None    # Q; bound from the adapter's config
    bos: int | None = None
    eos: int | None = None
    pad: int | None = None

    name: ClassVar[str] = "frames"
    requires: ClassVar[frozenset] = frozenset()
    output: ClassVar[str] = "frame"     # what the adapter's forward must return (config.extra['output'])

    def bind(self, model):
        return replace(self, **require_frames(self, model, output=self.output))

    def start(self, state: DecodeState) -> None:
        if self.codebooks is None:
            raise ValueError(f"{self.name} needs the codebook constants: decode through speech's TTS or call .bind(model)")

    def propose(self, state: DecodeState) -> Draft:
        return frame_draft(state, self.codebooks, self.pad)


@dataclass
class FrameMeta:
    num_pending: list[int]


def frame_draft(state: DecodeState, num_codebooks: int, pad: int) -> Draft:
    """Each active row's pending frames (the prompt at prefill, then its last committed frame) at
    consecutive positions; tokens (B, N, Q), causal among themselves."""
    pending = [[] if state.done[b] else state.pending(b) for b in range(state.batch)]
    n = max(1, max(len(p) for p in pending))
    dev = state.device      # built on the host, sent to the device once per tensor
    rows = [[list(f) for f in frames] + [[pad] * num_codebooks] * (n - len(frames)) for frames in pending]
    tokens = torch.tensor(rows, dtype=torch.long, device=dev).reshape(state.batch, n, num_codebooks)
    positions = torch.tensor([[state.num_cached[b] + i if i < len(p) else 0 for i in range(n)]
                              for b, p in enumerate(pending)], dtype=torch.long, device=dev)
    lengths = torch.tensor([len(p) for p in pending], device=dev)
    slot = torch.arange(n, device=dev)
    valid = slot[None] < lengths[:, None]                                                     # (B, N)
    causal = slot[None, :] <= slot[:, None]                                                   # (N, N)
    mask = (causal[None] & valid[:, :, None]) | torch.eye(n, dtype=torch.bool, device=dev)[None]  # padding: itself
    active = [len(p) - 1 for p in pending if p]
    return Draft(tokens, positions, mask, valid, FrameMeta([len(p) for p in pending]),
                 logits_from=min(active, default=0))


def last_frame_logits(draft: Draft, logits: torch.Tensor, b: int) -> torch.Tensor:
    """(Q, V) logits at row b's last pending frame: they predict the next frame."""
    return logits[b, draft.meta.num_pending[b] - 1 - draft.logits_from]


def code_uniforms(state: DecodeState, rows: list[int], shape: tuple[int, ...], first_draw: int = 0) -> torch.Tensor:
    """(R, *shape) uniforms of the codes rows `rows` sample in this step: keyed by each row's next
    frame position, draw = the code's flat index in `shape` (+ first_draw: a later pass's)."""
    count = 1
    for n in shape:
        count *= n
    draws = torch.arange(first_draw, first_draw + count, device=state.device).reshape(1, *shape)
    positions = state.positions(rows).reshape(-1, *[1] * len(shape))
    return state.streams.uniform(positions, SAMPLE, draws, rows=rows)


def frame_acceptance(draft: Draft, committed: list[list[tuple]]) -> Acceptance:
    """Keep every pending frame's K/V (nothing is speculative here)."""
    keep = torch.zeros_like(draft.valid)
    for b, n in enumerate(draft.meta.num_pending):
        keep[b, :n] = True
    return Acceptance(committed, keep)


def require_frames(decoder, model, output: str = "frame") -> dict:
    """The codebook constants a frame decoder reads from the adapter's config; `output` is what the
    adapter's forward must return: "frame" logits (B, N', Q, V), "stack" logits (B, N', S, Q, V) or
    "local" a LocalHeadOutput."""
    extra = getattr(getattr(model, "config", None), "extra", {}) or {}   # any object: a clear error below
    missing = [k for k in ("codebooks", "bos", "eos", "pad") if k not in extra]
    if missing:
        raise ValueError(f"decoder {decoder.name!r} needs a multi-codebook model adapter whose config.extra has "
                         f"codebooks, bos, eos and pad (e.g. speech's FrameTTSAdapter); missing {missing}")
    if extra.get("output", "frame") != output:
        raise ValueError(f"decoder {decoder.name!r} needs a frame adapter whose forward returns {output!r} "
                         f"(config.extra['output']), this one returns {extra.get('output', 'frame')!r}; "
                         f"e.g. speech's FrameTTSAdapter(model, output={output!r})")
    return {k: int(extra[k]) for k in ("codebooks", "bos", "eos", "pad")}


@dataclass
class LocalHeadOutput:
    """What a frame adapter with a local (depth) transformer returns per forward: the backbone's
    hidden states (B, N', D) and the local transformer to run on them,
    local(h (M, D), codes (M, n) with `mask_id` where unknown, mode "ar"|"maskgit") -> logits (M, n, V),
    over the first n <= frames * Q code slots of the next `frames` frames, frame by frame."""

    hidden: torch.Tensor
    local: Callable
    mask_id: int
    frames: int = 1


def last_frame_hidden(draft: Draft, out: LocalHeadOutput, rows: list[int]) -> torch.Tensor:
    """(M, D) states at the last pending frame of each listed row."""
    return torch.stack([out.hidden[b, draft.meta.num_pending[b] - 1 - draft.logits_from] for b in rows])


def frames_until_end(frames: list[list[int]], eos: int) -> list[tuple]:
    """Sampled frames (lists of Q ids) -> what a row commits: each frame as a tuple, up to the first
    whose codebook 0 says EOS, which becomes the end marker (Q EOS ids) and ends the row."""
    out = []
    for frame in frames:
        if frame[0] == eos:
            return out + [(eos,) * len(frame)]
        out.append(tuple(frame))
    return out


def only_head0_ends(logits: torch.Tensor, eos: int) -> torch.Tensor:
    """(..., Q, V): codebooks q > 0 never emit EOS (only codebook 0 may end the utterance)."""
    logits = logits.clone()
    logits[..., 1:, eos] = float("-inf")
    return logits
