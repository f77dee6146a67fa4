"""Audio in and out of the speech pipelines, shared by our models and the transformers families
(speech/hf_asr.py, speech/hf_tts.py): the recognisers' input checks and file reading, and the
result types."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .data import SAMPLE_RATE, resample

MAX_SECONDS = 30.0


@dataclass
class ASRResult:
    text: str
    stats: object            # suite.DecodeStats: decoder forwards, tokens, wall time (encoder included)
    audio_seconds: float

    @property
    def real_time_factor(self) -> float:
        return self.stats.wall_time_s / max(self.audio_seconds, 1e-9)


def check_audio(audio, sample_rate, max_seconds: float | None = MAX_SECONDS) -> np.ndarray:
    """Any mono/stereo float or int array at any rate -> float32 mono 16 kHz; clear ValueErrors.
    max_seconds None: any length (recognisers that window long audio)."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer (Hz), got {sample_rate!r}")
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu().numpy()
    audio = np.asarray(audio)
    if audio.dtype.kind not in "fiu":
        raise ValueError(f"audio must be a numeric array of samples, got dtype {audio.dtype}")
    if audio.dtype.kind in "iu":
        audio = audio.astype(np.float32) / float(np.iinfo(audio.dtype).max)
    if audio.ndim == 2:   # (channels, S) or (S, channels): mix down
        audio = audio.mean(axis=0 if audio.shape[0] < audio.shape[1] else 1)
    if audio.ndim != 1:
        raise ValueError(f"audio must be 1-D (mono) or 2-D (channels), got shape {audio.shape}")
    if audio.size == 0:
        raise ValueError("audio is empty; pass at least 0.1 s of speech")
    if not np.isfinite(audio).all():
        raise ValueError("audio contains NaN or infinite samples; clean the signal first")
    audio = resample(audio.astype(np.float32), int(sample_rate))
    seconds = len(audio) / SAMPLE_RATE
    if seconds < 0.1:
        raise ValueError(f"audio is {seconds * 1000:.0f} ms long; pass at least 0.1 s of speech")
    if max_seconds is not None and seconds > max_seconds:
        raise ValueError(f"audio is {seconds:.1f} s long; split it into pieces of at most {max_seconds:.0f} s")
    peak = float(np.abs(audio).max())
    if peak < 1e-3:
        raise ValueError("audio is silent (peak below -60 dBFS); check the recording or its gain")
    if float(np.mean(np.abs(audio) >= 0.999)) > 0.05:
        raise ValueError("audio is clipped (over 5% of samples at full scale); record it again with lower gain")
    return audio


def read_audio(path) -> tuple[np.ndarray, int]:
    import soundfile as sf
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file; pass an audio file or a folder of them")
    try:
        audio, sr = sf.read(str(path), dtype="float32", always_2d=False)
    except Exception as exc:  # soundfile raises its own LibsndfileError / RuntimeError
        raise ValueError(f"{path} is not a readable audio file ({exc}); convert it to WAV or FLAC") from None
    return audio, sr


@dataclass
class TTSResult:
    audio: np.ndarray         # (S,) float32
    sample_rate: int
    codes: torch.Tensor       # (Q, T)
    stats: object             # suite.DecodeStats of the backbone decode (wall time includes the vocoder)
    phonemes: str

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate

    @property
    def real_time_factor(self) -> float:
        return self.stats.wall_time_s / max(self.seconds, 1e-9)


def family_result(text, audio: list[np.ndarray], codes: list[torch.Tensor], sample_rate: int, stats) -> TTSResult:
    """A family's TTSResult: one row's for a str; for a list, stacked when every row has the same
    length, else the lists of waveforms and (Q, T_b) codes."""
    if isinstance(text, str):
        return TTSResult(audio[0], sample_rate, codes[0], stats, "")
    same = len({c.shape[1] for c in codes}) == 1
    return TTSResult(np.stack(audio) if same else audio, sample_rate, torch.stack(codes) if same else codes, stats, "")


@torch.no_grad()
def decode_each(codes: list[torch.Tensor], decode, device) -> list[np.ndarray]:
    """Each row's (Q, T_b) codes through the codec on its own (`decode` of (1, Q, T_b) on `device`
    -> audio values); an empty row is empty audio."""
    return [np.zeros(0, dtype=np.float32) if row.shape[1] == 0 else
            decode(row[None].to(device)).reshape(-1).cpu().numpy() for row in codes]
