"""A small residual-VQ audio codec (SoundStream-style RVQ, Zeghidour et al. 2021) over spectra.

encoder: log-mel (80, 100 Hz) -> conv stack, stride 2 -> latent (D, 50 Hz)
RVQ:     Q codebooks of C codes; codebook q quantises the residual left by codebooks < q (EMA updates)
decoder: codes -> summed code vectors -> conv stack, upsample 2 -> log-magnitude STFT (257, 100 Hz)
vocoder: Griffin-Lim (torchaudio) -> 16 kHz audio.
One frame = 20 ms = Q codes. Weights: speech/weights/codec/ (config.json + model.safetensors).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from suite.runtime.storage import ConfigModule

from . import features

WEIGHTS = Path(__file__).parent / "weights"


@dataclass
class CodecConfig:
    num_codebooks: int = 4      # Q
    codebook_size: int = 256    # C
    latent_dim: int = 64        # D of the code vectors
    channels: int = 160
    stride: int = 2             # mel frames per codec frame
    sample_rate: int = 16000
    hop_length: int = 160

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / (self.hop_length * self.stride)


class ResBlock(nn.Module):
    def __init__(self, ch: int, dilation: int):
        super().__init__()
        self.net = nn.Sequential(nn.GELU(), nn.Conv1d(ch, ch, 3, padding=dilation, dilation=dilation),
                                 nn.GELU(), nn.Conv1d(ch, ch, 1))

    def forward(self, x):
        return x + self.net(x)


class ResidualVQ(nn.Module):
    """Q codebooks (Q, C, D) with EMA updates and dead-code restarts."""

    def __init__(self, q: int, c: int, d: int, decay: float = 0.95):
        super().__init__()
        self.decay = decay
        self.register_buffer("codebooks", torch.randn(q, c, d) * 0.1)
        self.register_buffer("ema_count", torch.ones(q, c))
        self.register_buffer("ema_sum", self.codebooks.clone())
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    def encode(self, z: torch.Tensor) -> torch.Tensor:
        """(B, D, T) -> codes (B, Q, T)."""
        residual, codes = z.transpose(1, 2), []
        for book in self.codebooks:
            idx = torch.cdist(residual, book[None].expand(residual.shape[0], -1, -1)).argmin(-1)
            codes.append(idx)
            residual = residual - book[idx]
        return torch.stack(codes, 1)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, Q, T) -> (B, D, T) summed code vectors."""
        return sum(self.codebooks[q][codes[:, q]] for q in range(codes.shape[1])).transpose(1, 2)

    def forward(self, z: torch.Tensor):
        """Quantise with straight-through gradients; EMA-update codebooks in training."""
        flat = z.transpose(1, 2).reshape(-1, z.shape[1])   # (B*T, D)
        if self.training and not bool(self.initialised):
            self._init_from(flat)
        residual, quantised, commit = flat, torch.zeros_like(flat), 0.0
        for q in range(self.codebooks.shape[0]):
            book = self.codebooks[q]
            idx = torch.cdist(residual.detach(), book).argmin(-1)
            chosen = book[idx]
            commit = commit + ((residual - chosen.detach()) ** 2).mean()
            if self.training:
                self._ema_update(q, residual.detach(), idx)
            quantised = quantised + chosen
            residual = residual - chosen.detach()
        out = flat + (quantised - flat).detach()
        return out.reshape(z.shape[0], z.shape[2], -1).transpose(1, 2), commit

    @torch.no_grad()
    def _init_from(self, flat: torch.Tensor) -> None:
        residual = flat
        for q in range(self.codebooks.shape[0]):
            pick = torch.randint(len(residual), (self.codebooks.shape[1],), device=residual.device)
            self.codebooks[q] = residual[pick]
            self.ema_sum[q] = self.codebooks[q].clone()
            idx = torch.cdist(residual, self.codebooks[q]).argmin(-1)
            residual = residual - self.codebooks[q][idx]
        self.initialised.fill_(True)

    @torch.no_grad()
    def _ema_update(self, q: int, residual: torch.Tensor, idx: torch.Tensor) -> None:
        onehot = torch.nn.functional.one_hot(idx, self.codebooks.shape[1]).float()   # (N, C)
        self.ema_count[q].mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
        self.ema_sum[q].mul_(self.decay).add_(onehot.T @ residual, alpha=1 - self.decay)
        self.codebooks[q] = self.ema_sum[q] / self.ema_count[q].clamp(min=1e-3)[:, None]
        dead = self.ema_count[q] < 0.05
        if dead.any():   # restart unused codes on random current residuals
            pick = torch.randint(len(residual), (int(dead.sum()),), device=residual.device)
            self.codebooks[q][dead] = residual[pick]
            self.ema_sum[q][dead] = residual[pick]
            self.ema_count[q][dead] = 1.0


class Codec(ConfigModule, nn.Module):
    model_type, config_class, what = "parasuite-rvq-codec", CodecConfig, "codec"
    train_command, default_folder = "python -m speech.train codec", WEIGHTS / "codec"

    def __init__(self, config: CodecConfig):
        super().__init__()
        self.config = c = config
        self.encoder = nn.Sequential(
            nn.Conv1d(features.N_MELS, c.channels, 3, padding=1),
            ResBlock(c.channels, 1), ResBlock(c.channels, 2),
            nn.Conv1d(c.channels, c.channels, 2 * c.stride, stride=c.stride, padding=c.stride // 2),
            ResBlock(c.channels, 1), ResBlock(c.channels, 2),
            nn.GELU(), nn.Conv1d(c.channels, c.latent_dim, 1))
        self.rvq = ResidualVQ(c.num_codebooks, c.codebook_size, c.latent_dim)
        self.decoder = nn.Sequential(
            nn.Conv1d(c.latent_dim, c.channels, 3, padding=1),
            ResBlock(c.channels, 1), ResBlock(c.channels, 2), ResBlock(c.channels, 4),
            nn.ConvTranspose1d(c.channels, c.channels, 2 * c.stride, stride=c.stride, padding=c.stride // 2),
            ResBlock(c.channels, 1), ResBlock(c.channels, 2),
            nn.GELU(), nn.Conv1d(c.channels, features.N_FFT // 2 + 1, 3, padding=1))

    def encode_mel(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, 80, F) log-mel -> latent (B, D, T), T = F // stride."""
        f = mel.shape[-1] - mel.shape[-1] % self.config.stride
        return self.encoder(mel[..., :f])

    def decode_latent(self, z: torch.Tensor) -> torch.Tensor:
        """(B, D, T) -> (B, 257, T*stride) log magnitude."""
        return self.decoder(z)

    @torch.no_grad()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """(B, S) 16 kHz audio -> codes (B, Q, T)."""
        return self.rvq.encode(self.encode_mel(features.log_mel(audio)))

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, Q, T) -> audio (B, S), S = (stride T - 1) hop samples (none for T = 0)."""
        t = codes.shape[-1]
        if t < 2:     # the decoder's convolutions and Griffin-Lim need 2 frames: decode one twice, keep one
            audio = self.decode(codes.repeat(1, 1, 2)) if t else torch.zeros(codes.shape[0], 0, device=codes.device)
            return audio[:, :max(self.config.stride * t - 1, 0) * self.config.hop_length]
        return features.griffin_lim(self.decode_latent(self.rvq.decode(codes)))

