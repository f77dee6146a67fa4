"""Phone alignment of the TTS voice: flite's own phone timings (`flite -psdur`) turned into a
phone per codec frame, and per-frame conditioning ids (the phone, its neighbours, the frames since
its start and left to its end).

The `tts` split is flite slt, so flite's timings are exact for the training audio; at inference
only the phone sequence is taken from flite (the durations come from our duration predictor).
"""
from __future__ import annotations

import shutil
import subprocess

import torch

# CMU US phones flite's English voices use (pau: pause); the TTS symbol set
PHONES = ("pau", "aa", "ae", "ah", "ao", "aw", "ax", "axr", "ay", "b", "ch", "d", "dh", "eh", "el", "em", "en",
          "er", "ey", "f", "g", "hh", "ih", "iy", "jh", "k", "l", "m", "n", "ng", "ow", "oy", "p", "r", "s", "sh",
          "t", "th", "uh", "uw", "v", "w", "y", "z", "zh")
MAX_COUNT = 15          # frames since / left in a phone are clamped to 0..MAX_COUNT


def flite_phones(text: str, voice: str = "slt", stretch: float | None = None) -> list[tuple[str, float]]:
    """[(phone, end time in seconds)] of flite's rendering of `text` (no audio written), at flite's
    `duration_stretch` when given."""
    if not shutil.which("flite"):
        raise RuntimeError("flite is not installed: apt-get install flite (requirements/apt-speech.txt)")
    setf = ["--setf", f"duration_stretch={stretch}"] if stretch is not None else []
    out = subprocess.run(["flite", "-voice", voice, *setf, "-psdur", "-t", text, "none"], capture_output=True,
                         text=True, check=True).stdout
    pairs = [tok.rsplit(":", 1) for tok in out.split()]
    return [(p, float(t)) for p, t in pairs]


def utterance_phones(text: str, voice: str) -> tuple[list[int], list[float]] | None:
    """Phone ids (into PHONES) and end times (s, in the utterance's own audio) of one utterance of
    the speech data, from its voice description (`speech.data._utterance`, e.g. 'flite:awb f0=123
    shift=1.06 stretch=1.1'): exact for flite voices (the stretch is flite's own; a resampling
    `shift` plays the audio that many times faster); None for other engines."""
    engine, *params = voice.split()
    if not engine.startswith("flite:"):
        return None
    p = {k: float(v) for k, v in (kv.split("=") for kv in params)}
    pairs = flite_phones(text, engine.split(":", 1)[1], p.get("stretch"))
    shift = p.get("shift", 1.0)
    return [PHONES.index(ph) for ph, _ in pairs], [t / shift for _, t in pairs]


def frame_phones(ends: list[float], num_frames: int, start_s: float = 0.0, frame_rate: int = 50) -> torch.Tensor:
    """Phone index (into `ends`) of each frame of audio that starts `start_s` into flite's timeline:
    the phone whose span holds the frame's centre (the last phone past the end)."""
    centres = start_s + (torch.arange(num_frames, dtype=torch.float64) + 0.5) / frame_rate
    idx = torch.searchsorted(torch.tensor(ends, dtype=torch.float64), centres, right=True)
    return idx.clamp(max=len(ends) - 1)


def durations(frame_phone: torch.Tensor, num_phones: int) -> torch.Tensor:
    """(T,) phone index per frame (non-decreasing) -> (P,) frames per phone (0 for a skipped phone)."""
    return torch.bincount(frame_phone, minlength=num_phones)[:num_phones]


def frame_conditioning(phone_ids: list[int], durs: list[int] | torch.Tensor, none_id: int) -> torch.Tensor:
    """Phone ids (P,) and frames per phone (P,) -> (T, 5) ids per frame: previous, current and next
    phone (none_id beyond the ends), frames since the phone started and frames left after this one
    (both clamped to MAX_COUNT)."""
    ids = torch.tensor(list(phone_ids) + [none_id], dtype=torch.long)
    d = torch.as_tensor(durs, dtype=torch.long)
    which = torch.repeat_interleave(torch.arange(len(d)), d)                  # (T,) phone index per frame
    if which.numel() == 0:
        return torch.zeros(0, 5, dtype=torch.long)
    starts = torch.cumsum(d, 0) - d
    since = torch.arange(len(which)) - starts[which]
    left = d[which] - 1 - since
    prev = torch.where(which > 0, ids[(which - 1).clamp(min=0)], torch.full_like(which, none_id))
    return torch.stack([prev, ids[which], ids[which + 1], since.clamp(max=MAX_COUNT), left.clamp(max=MAX_COUNT)], 1)
