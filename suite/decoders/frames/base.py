"""Helpers for multi-codebook decoders: a row's committed tokens are frames, tuples of Q ids, and
drafts carry tokens (B, N, Q). The adapter returns logits (B, N', Q, V)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, ClassVar

import torch

from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import SAMPLE
from ...sampling import logits_to_probs, sample
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
    batch_independent: ClassVar[bool] = True    # each row's frames drawn from its own stream, sized by its own state
    output: ClassVar[str] = "frame"     # what the adapter's forward must return (config.extra['output'])

    def bind(self, model):
        return replace(self, **require_frames(self, model, output=self.output))

    def start(self, state: DecodeState) -> None:
        if self.codebooks is None:
            raise ValueError(f"{self.name} needs the codebook constants: decode through speech's TTS or call .bind(model)")

    def propose(self, state: DecodeState) -> Draft:
        return frame_draft(state, self.codebooks, self.pad)

    def accept(self, state: DecodeState, draft: Draft, out) -> Acceptance:
        rows = live_rows(state)
        return frame_acceptance(draft, rows, self.next_frames(state, draft, out, rows) if rows else [])

    def next_frames(self, state: DecodeState, draft: Draft, out, rows: list[int]) -> list[list[tuple]]:
        """What each live row `rows[i]` commits from the forward's output `out`: its next frame(s),
        all rows sampled at once (one host sync)."""
        raise NotImplementedError


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


def live_rows(state: DecodeState) -> list[int]:
    """The rows still decoding (known on the host)."""
    return [b for b in range(state.batch) if not state.done[b]]


def last_slots(draft: Draft, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(M,) batch and slot indices of the listed rows' last pending frames in the forward's output."""
    dev = draft.valid.device
    slots = [draft.meta.num_pending[b] - 1 - draft.logits_from for b in rows]
    return torch.tensor(rows, dtype=torch.long, device=dev), torch.tensor(slots, dtype=torch.long, device=dev)


def last_frame_logits(draft: Draft, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """(M, Q, V) logits at the listed rows' last pending frames: they predict each row's next frame."""
    return logits[last_slots(draft, rows)]


def sample_frames(state: DecodeState, draft: Draft, logits: torch.Tensor, rows: list[int], eos: int) -> list:
    """The next frame(s) of each listed row sampled in one batch, codebook 0 alone may say EOS: host
    lists (M, *code shape), read in the step's one host sync."""
    frame_logits = only_head0_ends(last_frame_logits(draft, logits, rows), eos)     # (M, ..., V)
    u = code_uniforms(state, rows, tuple(frame_logits.shape[1:-1]))
    return sample(logits_to_probs(frame_logits, state.params), u).tolist()


def code_uniforms(state: DecodeState, rows: list[int], shape: tuple[int, ...], first_draw: int = 0) -> torch.Tensor:
    """(R, *shape) uniforms of the codes rows `rows` sample in this step: keyed by each row's next
    frame position, draw = the code's flat index in `shape` (+ first_draw: a later pass's)."""
    count = 1
    for n in shape:
        count *= n
    draws = torch.arange(first_draw, first_draw + count, device=state.device).reshape(1, *shape)
    positions = state.positions(rows).reshape(-1, *[1] * len(shape))
    return state.streams.uniform(positions, SAMPLE, draws, rows=rows)


def frame_acceptance(draft: Draft, rows: list[int], frames: list[list[tuple]]) -> Acceptance:
    """Rows `rows` commit `frames` (one list each; the other rows, done, nothing); every pending
    frame's K/V stays (nothing is speculative here)."""
    committed = [[] for _ in draft.meta.num_pending]
    for b, row_frames in zip(rows, frames):
        committed[b] = row_frames
    pending = torch.tensor(draft.meta.num_pending, device=draft.valid.device)
    keep = torch.arange(draft.valid.shape[1], device=draft.valid.device)[None] < pending[:, None]
    return Acceptance(committed, keep, kept=list(draft.meta.num_pending))


def require_frames(decoder, model, output: str = "frame") -> dict:
    """The codebook constants a frame decoder reads from the adapter's config; `output` is what the
    adapter's forward must return: "frame" logits (B, N', Q, V), "stack" logits (B, N', S, Q, V) or
    "local" a LocalHeadOutput."""
    from ...models.adapters import ModelAdapter
    extra = (model.config.extra or {}) if isinstance(model, ModelAdapter) else {}   # else: a clear error below
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
    return out.hidden[last_slots(draft, rows)]


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
