"""Phone duration predictor (FastSpeech's, Ren et al. 2019): phone embeddings -> 3 convolutions
(kernel 3, both directions) -> log(1 + frames) per phone, trained by squared error on flite's
timings. The TTS decodes frames against these durations, so the text-audio alignment is fixed
before decoding and every decoder sees the same conditioning."""
from __future__ import annotations

import torch
from torch import nn


class DurationPredictor(nn.Module):
    def __init__(self, num_symbols: int, hidden: int = 128, layers: int = 3):
        super().__init__()
        self.embed = nn.Embedding(num_symbols + 1, hidden)        # last id: padding
        self.convs = nn.ModuleList(nn.Conv1d(hidden, hidden, 3, padding=1) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.out = nn.Linear(hidden, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, P) phone indices (num_symbols = padding) -> (B, P) predicted log(1 + frames)."""
        x = self.embed(ids)
        for conv, norm in zip(self.convs, self.norms):
            x = norm(x + torch.relu(conv(x.transpose(1, 2))).transpose(1, 2))
        return self.out(x)[..., 0]

    def loss(self, ids: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """Mean squared error in log(1 + frames) over the non-padding phones."""
        keep = ids != self.embed.num_embeddings - 1
        err = (self(ids) - torch.log1p(frames.float())) ** 2
        return err[keep].mean()

    @torch.no_grad()
    def frames(self, ids: list[int], pace: float = 1.0) -> list[int]:
        """Whole frames per phone (the running total rounded, so no rounding drift; at least one frame)."""
        pred = torch.expm1(self(torch.tensor([ids], device=self.embed.weight.device))[0]).clamp(min=0) * pace
        ends = torch.cumsum(pred, 0).round().long()
        out = torch.diff(ends, prepend=ends.new_zeros(1)).tolist()
        if sum(out) == 0:
            out[0] = 1
        return out
