"""Audio features shared by the codec and the recogniser (torchaudio transforms, 16 kHz).

log-mel: 80 bins, 25 ms window, 10 ms hop (100 frames per second).
log-magnitude STFT: 257 bins, same window and hop; Griffin-Lim turns it back into audio.
"""
from __future__ import annotations

import functools

import torch

SAMPLE_RATE = 16000
N_FFT, WIN, HOP, N_MELS = 512, 400, 160, 80


@functools.lru_cache(maxsize=1)
def _mel():
    import torchaudio
    return torchaudio.transforms.MelSpectrogram(sample_rate=SAMPLE_RATE, n_fft=N_FFT, win_length=WIN,
                                                hop_length=HOP, n_mels=N_MELS, power=2.0)


@functools.lru_cache(maxsize=1)
def _griffin_lim(n_iter: int = 32):
    import torchaudio
    return torchaudio.transforms.GriffinLim(n_fft=N_FFT, win_length=WIN, hop_length=HOP, power=1.0,
                                            n_iter=n_iter, momentum=0.99)


def log_mel(audio: torch.Tensor) -> torch.Tensor:
    """(B, S) or (S,) float audio -> (B, 80, F) or (80, F) log-mel, F = S // 160 + 1."""
    return torch.log(_mel().to(audio.device)(audio) + 1e-5)


def log_magnitude(audio: torch.Tensor) -> torch.Tensor:
    """(B, S) -> (B, 257, F) log STFT magnitude."""
    spec = torch.stft(audio, N_FFT, HOP, WIN, window=torch.hann_window(WIN), return_complex=True)
    return torch.log(spec.abs() + 1e-5)


def griffin_lim(log_mag: torch.Tensor) -> torch.Tensor:
    """(B, 257, F) or (257, F) log magnitude -> audio (B, (F-1)*160) via Griffin-Lim (32 iterations)."""
    gl = _griffin_lim().to(log_mag.device)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(0)                       # Griffin-Lim starts from random phase: keep it repeatable
    audio = gl(log_mag.exp())
    torch.random.set_rng_state(gen_state)
    peak = audio.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    return audio * torch.clamp(0.9 / peak, max=1.0)
