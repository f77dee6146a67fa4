"""Delay-pattern decoding of multi-codebook tokens (MusicGen: Copet et al. 2023, "Simple and
Controllable Music Generation"; also Parler-TTS).

Codebook k is shifted right by k frames, so at delayed step s one forward predicts codebook 0 of
frame s, codebook 1 of frame s-1, ..., codebook K-1 of frame s-K+1, all K heads at once. A
model trained on this layout needs T + K - 1 forwards for T frames (prefill included) instead
of T * K when flattened: codebook 0 emits EOS at step T, then K - 2 more steps flush the other
codebooks (their lagging frames), and the row ends. Slots outside the pattern are forced to the
training layout (BOS before codebook k starts, EOS/PAD after it ends), never sampled.

Exact: this IS the delay-layout model's own factorisation (each step samples the heads the
model was trained to predict jointly); there is nothing slower it approximates. Committed tokens
are delayed columns (tuples of K ids); `undelay` undoes the shift. A model without an EOS whose
length the request fixes (MusicGen: bos = eos = pad = its start id) passes `fixed_frames=T`. Lags other
than k (Dia: codebook k lags `delays[k]` frames, e.g. 0, 8, 9, ..., 15) pass `delays`; a cap on the frames
of a model that ends by EOS (Dia's max length: codebook 0 is forced to EOS at frame T_max) passes
`max_frames`. This file is the delay layout's one home: the training layout (`delay_pattern`) and the
forced slots (`delay_column`) with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import DecodeState, Draft
from .base import FrameDecoder, sample_frames


@dataclass
class DelayRow:
    num_frames: int | None = None     # T of the row once known (codebook 0 ended, or fixed_frames)


@dataclass(frozen=True)
class Delay(FrameDecoder):
    fixed_frames: int | None = None   # T known in advance for a model without an EOS (MusicGen: its
                                      # max_length minus K); None: codebook 0's EOS ends a row
    delays: tuple[int, ...] | None = None   # frames codebook k lags; None: k (MusicGen's layout)
    max_frames: int | None = None     # codebook 0 forced to EOS at this frame if it has not ended (Dia)

    name: ClassVar[str] = "delay"

    def start(self, state: DecodeState) -> None:
        super().start(state)
        if self.fixed_frames is not None and self.fixed_frames < 1:
            raise ValueError(f"fixed_frames must be >= 1, got {self.fixed_frames}")
        if self.delays is not None and (len(self.delays) != self.codebooks or self.delays[0] != 0
                                        or any(d < 0 for d in self.delays)):
            raise ValueError(f"delays must give one lag >= 0 per codebook ({self.codebooks}), codebook 0's being 0; "
                             f"got {self.delays}")
        state.rows = [DelayRow(self.fixed_frames) for _ in range(state.batch)]

    @staticmethod
    def num_frames(state: DecodeState, b: int) -> int | None:
        """Row b's frame count T once its codebook 0 has ended (None before)."""
        return state.rows[b].num_frames

    def next_frames(self, state: DecodeState, draft: Draft, logits, rows: list[int]) -> list[list[tuple]]:
        drawn = sample_frames(state, draft, logits, rows, self.eos)      # (M, K): one draw per codebook
        return [self._step(state, b, d) for b, d in zip(rows, drawn)]

    def _step(self, state: DecodeState, b: int, drawn: list[int]) -> list[tuple]:
        """The delayed column of step s = columns committed so far (the drawn codes where the layout
        does not force them); end the row after the flush."""
        step = len(state.new_tokens(b))
        row = state.rows[b]
        num_frames = row.num_frames
        if num_frames is None and step == self.max_frames:      # the cap: codebook 0 says EOS now
            num_frames = row.num_frames = step
        lags = lags_of(self.delays, self.codebooks)
        column = []
        for k in range(self.codebooks):
            forced = delay_column(step, lags[k], num_frames, self.bos, self.eos, self.pad)
            column.append(drawn[k] if forced is None else forced)
        if num_frames is None and column[0] == self.eos:
            num_frames = row.num_frames = step
        out = [tuple(column)]
        if num_frames is not None and step >= num_frames + max(lags) - 1:
            out.append((self.eos,) * self.codebooks)             # the end marker: the row is done
        return out


def lags_of(delays: tuple[int, ...] | None, q: int) -> tuple[int, ...]:
    """The lag of each of Q codebooks: `delays`, or k for codebook k."""
    return tuple(delays) if delays is not None else tuple(range(q))


def delay_pattern(codes: torch.Tensor, bos: int, eos: int, pad: int, delays=None) -> torch.Tensor:
    """codes (Q, T) -> delayed columns (Q, T + D + 1), D the largest lag d_k (Q - 1 by default):
    row k is [BOS]*d_k, codes k, EOS, PAD..."""
    q, t = codes.shape
    lags = lags_of(delays, q)
    out = torch.full((q, t + max(lags) + 1), pad, dtype=torch.long, device=codes.device)
    for k, d in enumerate(lags):
        out[k, :d] = bos
        out[k, d:d + t] = codes[k]
        out[k, d + t] = eos
    return out


def undelay(columns: torch.Tensor, num_frames: int, delays=None) -> torch.Tensor:
    """Delayed columns (Q, S) -> codes (Q, T): codes[k, t] = columns[k, t + d_k] (d_k = k by default)."""
    lags = lags_of(delays, columns.shape[0])
    return torch.stack([columns[k, d:d + num_frames] for k, d in enumerate(lags)])


def delay_column(step: int, lag: int, num_frames: int | None, bos: int, eos: int, pad: int) -> int | None:
    """The forced value of a codebook lagging `lag` frames at delayed step `step`, or None when it is
    to be sampled. num_frames is T once codebook 0 has emitted EOS (None before)."""
    if step < lag:
        return bos
    if num_frames is not None and step - lag == num_frames:
        return eos
    if num_frames is not None and step - lag > num_frames:
        return pad
    return None
