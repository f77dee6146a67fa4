"""Subtitles of a processed video: SubRip (SRT) cues from the speech of its audio track (voiced
stretches found by short-time energy, each transcribed alone) or from its on-screen text (a cue
per stretch of frames showing the same text)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Cue:
    start: float          # seconds
    end: float
    text: str


def srt_time(seconds: float) -> str:
    """12.5 -> '00:00:12,500' (SubRip: hours:minutes:seconds,milliseconds)."""
    ms = int(round(max(seconds, 0.0) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d},{ms:03d}"


def to_srt(cues: list[Cue]) -> str:
    """Numbered SRT blocks separated by blank lines; empty cues are left out."""
    blocks = []
    for cue in (c for c in cues if c.text.strip()):
        blocks.append(f"{len(blocks) + 1}\n{srt_time(cue.start)} --> {srt_time(cue.end)}\n{cue.text.strip()}\n")
    return "\n".join(blocks)


def screen_cues(times: list[tuple[float, float]], texts: list[str]) -> list[Cue]:
    """One cue per run of consecutive frames showing the same (non-empty) text; `times` holds
    each frame's (start, end)."""
    cues: list[Cue] = []
    for (start, end), text in zip(times, texts):
        if cues and cues[-1].text == text and abs(cues[-1].end - start) < 1e-6:
            cues[-1] = Cue(cues[-1].start, end, text)
        elif text.strip():
            cues.append(Cue(start, end, text))
    return cues


def voiced_segments(audio: np.ndarray, sample_rate: int, threshold_db: float = -35.0, window_s: float = 0.02,
                    min_silence_s: float = 0.3, min_voice_s: float = 0.15, pad_s: float = 0.1,
                    max_s: float = 25.0) -> list[tuple[float, float]]:
    """(start, end) seconds of the stretches of `audio` louder than `threshold_db` below its
    loudest window, joined across pauses shorter than `min_silence_s`, padded by `pad_s`, at
    least `min_voice_s` long, and cut into pieces of at most `max_s` (the recogniser's window)."""
    hop = max(1, int(sample_rate * window_s))
    n = len(audio) // hop
    if n == 0:
        return []
    rms = np.sqrt(np.mean(audio[:n * hop].reshape(n, hop).astype(np.float64) ** 2, axis=1))
    if rms.max() <= 0:
        return []
    voiced = 20 * np.log10(rms / rms.max() + 1e-12) > threshold_db
    runs, start = [], None
    for k, v in enumerate(np.append(voiced, False)):
        if v and start is None:
            start = k
        elif not v and start is not None:
            if runs and (start - runs[-1][1]) * window_s < min_silence_s:
                runs[-1] = (runs[-1][0], k)
            else:
                runs.append((start, k))
            start = None
    total = len(audio) / sample_rate
    out = []
    for a, b in runs:
        if (b - a) * window_s < min_voice_s:
            continue
        lo, hi = max(0.0, a * window_s - pad_s), min(total, b * window_s + pad_s)
        pieces = int(np.ceil((hi - lo) / max_s))
        out += [(lo + (hi - lo) * i / pieces, lo + (hi - lo) * (i + 1) / pieces) for i in range(pieces)]
    return out
