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


def log_mel(audio: torch.Tensor) -> torch.Tensor:
    """(B, S) or (S,) float audio -> (B, 80, F) or (80, F) log-mel, F = S // 160 + 1."""
    return torch.log(_mel().to(audio.device)(audio) + 1e-5)


def log_magnitude(audio: torch.Tensor) -> torch.Tensor:
    """(B, S) -> (B, 257, F) log STFT magnitude."""
    spec = torch.stft(audio, N_FFT, HOP, WIN, window=torch.hann_window(WIN), return_complex=True)
    return torch.log(spec.abs() + 1e-5)


def griffin_lim(log_mag: torch.Tensor, n_iter: int = 32, momentum: float = 0.99) -> torch.Tensor:
    """(B, 257, F) or (257, F) log magnitude -> audio (B, (F-1)*160) via fast Griffin-Lim (Perraudin et al.
    2013; momentum as torchaudio's GriffinLim takes it, applied as momentum / (1 + momentum)). Its random
    starting phase comes from a generator of its own, seeded 0: the same audio for the same magnitudes
    whatever the process's RNG and whatever other threads decode meanwhile."""
    magnitude = log_mag.exp()
    window = torch.hann_window(WIN, device=magnitude.device)
    generator = torch.Generator(device=magnitude.device).manual_seed(0)
    phase = torch.rand(magnitude.shape, dtype=torch.complex64, device=magnitude.device, generator=generator)

    def to_audio(phase: torch.Tensor) -> torch.Tensor:
        return torch.istft(magnitude * phase, N_FFT, HOP, WIN, window=window)

    step = momentum / (1 + momentum)
    previous = torch.zeros((), dtype=torch.complex64, device=magnitude.device)
    for _ in range(n_iter):
        rebuilt = torch.stft(to_audio(phase), N_FFT, HOP, WIN, window=window, pad_mode="reflect", return_complex=True)
        phase = rebuilt - step * previous          # the momentum step, then back to unit modulus
        phase = phase / (phase.abs() + 1e-16)
        previous = rebuilt
    audio = to_audio(phase)
    peak = audio.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    return audio * torch.clamp(0.9 / peak, max=1.0)
