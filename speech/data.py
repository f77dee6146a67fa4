"""Speech data generated offline: real sentences (Python standard-library docstrings) spoken by
Debian flite voices and espeak-ng variants, resampled to 16 kHz, with transcripts and phonemes.

Splits: `train` (flite kal16/awb/slt + espeak-ng en-us variants), `tts` (flite slt only: the TTS
voice), `heldout` (flite rms, a voice never seen in training, on sentences never seen in training).
Everything is cached under ~/.cache/parasuite/speech (or $PARASUITE_CACHE/speech), never in the repo.
"""
from __future__ import annotations

import ast
import functools
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
TRAIN_VOICES = ("flite:kal16", "flite:awb", "flite:slt", "espeak:en-us", "espeak:en-us+m3",
                "espeak:en-us+f2", "espeak:en+m1")
HELDOUT_VOICE = "flite:rms"
TTS_VOICE = "flite:slt"
ALPHABET = " 'abcdefghijklmnopqrstuvwxyz"     # transcripts are normalised to these characters


def cache_dir() -> Path:
    root = os.environ.get("PARASUITE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "parasuite")
    path = Path(root) / "speech"
    path.mkdir(parents=True, exist_ok=True)
    return path


def normalize_text(text: str) -> str:
    """Lower-case, spell '&', keep letters, apostrophes and single spaces."""
    text = text.lower().replace("&", " and ").replace("-", " ")
    text = re.sub(r"[^a-z' ]+", " ", text)
    return re.sub(r" +", " ", text).strip()


def stdlib_sentences(limit: int, seed: int = 0) -> list[str]:
    """Plain English sentences (4-11 words, letters only) from the docstrings of the stdlib."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen, out = set(), []
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        if "test" in path.parts[-2:][0] or "idlelib" in str(path):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    for sentence in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                        if _plain(sentence):
                            s = normalize_text(sentence)
                            if s not in seen:
                                seen.add(s)
                                out.append(s)
    random.Random(seed).shuffle(out)
    return out[:limit]


def _plain(sentence: str) -> bool:
    if not re.fullmatch(r"[A-Z][A-Za-z ,;']+[.]", sentence):
        return False
    words = sentence.split()
    return 4 <= len(words) <= 11 and len(sentence) <= 70


def phonemes(text: str) -> str:
    """espeak-ng's ASCII phoneme mnemonics for `text` (en-us), one string."""
    if not shutil.which("espeak-ng"):
        raise RuntimeError("espeak-ng is not installed: apt-get install espeak-ng (requirements/apt-speech.txt)")
    out = subprocess.run(["espeak-ng", "-q", "-x", "-v", "en-us", text], capture_output=True, text=True,
                         check=True).stdout
    return " ".join(out.split())


def synthesize(text: str, voice: str, speed: int = 160) -> np.ndarray:
    """Speak `text` with 'flite:<voice>' or 'espeak:<variant>' -> float32 mono at 16 kHz."""
    import soundfile as sf
    engine, name = voice.split(":", 1)
    with tempfile.TemporaryDirectory() as tmp:
        wav = os.path.join(tmp, "x.wav")
        if engine == "flite":
            cmd = ["flite", "-voice", name, "-t", text, "-o", wav]
        else:
            cmd = ["espeak-ng", "-v", name, "-s", str(speed), "-w", wav, text]
        subprocess.run(cmd, check=True, capture_output=True)
        audio, sr = sf.read(wav, dtype="float32")
    return resample(audio, sr)


def resample(audio: np.ndarray, sr: int, target: int = SAMPLE_RATE) -> np.ndarray:
    if sr == target:
        return audio.astype(np.float32)
    import torch
    return _resampler(sr, target)(torch.from_numpy(np.ascontiguousarray(audio)).float()).numpy()


@functools.lru_cache(maxsize=8)
def _resampler(sr: int, target: int):
    import torchaudio
    return torchaudio.transforms.Resample(sr, target)


def build(num_train: int = 2400, num_tts: int = 1500, num_heldout: int = 150, seed: int = 0) -> Path:
    """Generate all splits once (a few minutes); returns the cache folder."""
    import torch
    from tqdm import tqdm
    torch.set_num_threads(1)
    folder = cache_dir()
    if (folder / "heldout.npz").exists():
        return folder
    sentences = stdlib_sentences(num_train + num_heldout, seed)
    if len(sentences) < num_train + num_heldout:
        raise RuntimeError(f"only {len(sentences)} sentences found in the stdlib docstrings")
    train_text, held_text = sentences[:num_train], sentences[num_train:]
    rng = random.Random(seed)
    jobs = {
        "train": [(t, TRAIN_VOICES[i % len(TRAIN_VOICES)]) for i, t in enumerate(train_text)],
        "tts": [(t, TTS_VOICE) for t in train_text[:num_tts]],
        "heldout": [(t, HELDOUT_VOICE) for t in held_text],
    }
    for split, items in jobs.items():
        audio, texts, voices, phones = [], [], [], []
        for text, voice in tqdm(items, desc=f"speech data {split}", file=sys.stderr):
            audio.append(synthesize(text, voice, speed=rng.choice([140, 160, 175])))
            texts.append(text)
            voices.append(voice)
            phones.append(phonemes(text))
        save_split(folder / f"{split}.npz", audio, texts, voices, phones)
    return folder


def save_split(path: Path, audio, texts, voices, phones) -> None:
    lengths = np.array([len(a) for a in audio])
    pcm = np.concatenate([np.clip(a, -1, 1) * 32767 for a in audio]).astype(np.int16)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, pcm=pcm, lengths=lengths, texts=np.array(texts), voices=np.array(voices),
             phonemes=np.array(phones))
    os.replace(tmp, path)


def load_split(split: str) -> list[dict]:
    """[{'audio': float32 (S,), 'text', 'voice', 'phonemes'}] of one split (built on first use)."""
    path = cache_dir() / f"{split}.npz"
    if not path.exists():
        build()
    with np.load(path) as data:     # read each array once (NpzFile re-reads on every access)
        pcm, lengths = data["pcm"], data["lengths"]
        texts, voices, phones = data["texts"], data["voices"], data["phonemes"]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [{"audio": pcm[offsets[i]:offsets[i + 1]].astype(np.float32) / 32767,
             "text": str(texts[i]), "voice": str(voices[i]), "phonemes": str(phones[i])}
            for i in range(len(lengths))]


if __name__ == "__main__":
    print(build())
