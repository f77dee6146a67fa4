"""Speech recognition with our CTC + attention recogniser.

    python -m speech.asr clip.wav                      # one file
    python -m speech.asr recordings/ --decoder ar      # every audio file of a folder (progress bar)
    python -m speech.asr clip.wav --json               # text and decode statistics as JSON lines

Decoders: ctc (greedy CTC, one encoder pass), ctc_beam (CTC prefix beam search with the
character n-gram LM of the training text, speech/ctc_lm.py; still no decoder forward), ar (the
attention decoder, one token per forward), ctc_speculative (entropy-gated CTC hypothesis, else
verified by the attention decoder in one forward, AR resume from the first rejection). Any sample
rate is resampled to 16 kHz.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import suite

from .data import SAMPLE_RATE, resample

# "ctc" and "ctc_beam" read the CTC head alone (no decoder forward); the rest are registry decoders
DECODERS = ("ctc", "ctc_beam") + tuple(suite.list_decoders("asr", chain=("ar",)))
AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".au", ".mp3"}
MAX_SECONDS = 30.0


@dataclass
class ASRResult:
    text: str
    stats: object            # suite.DecodeStats: decoder forwards, tokens, wall time (encoder included)
    audio_seconds: float

    @property
    def real_time_factor(self) -> float:
        return self.stats.wall_time_s / max(self.audio_seconds, 1e-9)


def check_audio(audio, sample_rate) -> np.ndarray:
    """Any mono/stereo float or int array at any rate -> float32 mono 16 kHz; clear ValueErrors."""
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
    if seconds > MAX_SECONDS:
        raise ValueError(f"audio is {seconds:.1f} s long; split it into pieces of at most {MAX_SECONDS:.0f} s")
    peak = float(np.abs(audio).max())
    if peak < 1e-3:
        raise ValueError("audio is silent (peak below -60 dBFS); check the recording or its gain")
    if float(np.mean(np.abs(audio) >= 0.999)) > 0.05:
        raise ValueError("audio is clipped (over 5% of samples at full scale); record it again with lower gain")
    return audio


SPECULATIVE_DEFAULTS = {"max_entropy": 0.65, "min_ratio": 0.1, "realign": True}


class ASR:
    def __init__(self, model, lm=None, speculative: dict | None = None):
        self.model = model.eval()
        self.lm = lm             # speech.ctc_lm.CharNGramLM for ctc_beam (None: beam search without an LM)
        # ctc_speculative's gate (tuned on the valid split: weights/asr/decoding.json)
        self.speculative = {**SPECULATIVE_DEFAULTS, **(speculative or {})}

    def __call__(self, audio, sample_rate: int = SAMPLE_RATE, decoder: str = "ctc_speculative",
                 max_entropy: float | None = None, min_ratio: float | None = None,
                 realign: bool | None = None) -> ASRResult:
        """ctc_speculative options (None: the shipped values, `self.speculative`): max_entropy
        (gate, nats; 0 = off), min_ratio (relaxed acceptance; 1 = strict) and realign (after a
        rejection, re-draft the rest of the CTC hypothesis instead of plain AR; exact either way).
        max_entropy 0 and min_ratio 1 make ctc_speculative give exactly ar's text."""
        opts = self.speculative
        max_entropy = opts["max_entropy"] if max_entropy is None else max_entropy
        min_ratio = opts["min_ratio"] if min_ratio is None else min_ratio
        realign = opts["realign"] if realign is None else realign
        from suite import CTCHypothesis, DecodeStats, RequestInputs, decode, prepare
        from suite.decoders.chain.ctc_speculative import CTCSpeculative, ctc_frame_entropy, ctc_greedy

        from . import features
        from .asr_model import AUDIO, BOS, EOS, AudioPrefixLM, ids_to_text
        if decoder not in DECODERS:
            raise ValueError(f"unknown ASR decoder {decoder!r}; choose one of: {', '.join(DECODERS)}")
        audio = check_audio(audio, sample_rate)
        t0 = time.perf_counter()
        with torch.no_grad():
            mel = features.log_mel(torch.from_numpy(audio))[None]
            enc, log_probs, enc_len = self.model.encode(mel, torch.tensor([mel.shape[-1]]))
            if decoder == "ctc_beam":
                from .ctc_lm import prefix_beam_search
                alpha, beta = (self.lm.alpha, self.lm.beta) if self.lm is not None else (0.0, 0.0)
                hyp = prefix_beam_search(log_probs[0], int(enc_len[0]), self.lm, alpha, beta)
            else:
                hyp = ctc_greedy(log_probs[0], int(enc_len[0]))
            if decoder in ("ctc", "ctc_beam"):
                stats = DecodeStats(num_new_tokens=len(hyp))
                text = ids_to_text(hyp)
            else:
                adapter = AudioPrefixLM(self.model, self.model.bridge(enc))
                frames = int(enc_len[0])
                if decoder == "ar":
                    dec, inputs = "ar", None
                else:
                    dec = CTCSpeculative(max_entropy=max_entropy, min_ratio=min_ratio, realign=realign)
                    inputs = RequestInputs(ctc=(CTCHypothesis(hyp, ctc_frame_entropy(log_probs[0], frames)),))
                adapter, dec, state = prepare(adapter, [[AUDIO] * frames + [BOS]], decoder=dec, max_new_tokens=400,
                                              eos_token_id=EOS, inputs=inputs)
                result = decode(adapter, dec, state)
                stats = result.stats
                text = ids_to_text([t for t in result.new_tokens[0] if t != EOS])
        stats.wall_time_s = time.perf_counter() - t0
        return ASRResult(text, stats, len(audio) / SAMPLE_RATE)

    def transcribe_file(self, path, decoder: str = "ctc_speculative") -> ASRResult:
        audio, sr = read_audio(path)
        return self(audio, sr, decoder=decoder)


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


def load_asr(folder=None) -> ASR:
    """The embedded recogniser (speech/weights/asr), offline, with its character LM when present."""
    from .asr_model import WEIGHTS, Recogniser
    from .ctc_lm import CharNGramLM
    folder = Path(folder or WEIGHTS / "asr")
    lm_path, gate = folder / "char_lm.json.gz", folder / "decoding.json"
    return ASR(Recogniser.load(folder), CharNGramLM.load(lm_path) if lm_path.exists() else None,
               json.loads(gate.read_text()) if gate.exists() else None)


def _files(target: Path) -> list[Path]:
    if target.is_dir():
        files = sorted(p for p in target.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
        if not files:
            raise ValueError(f"no audio files ({', '.join(sorted(AUDIO_SUFFIXES))}) under {target}")
        return files
    if not target.exists():
        raise ValueError(f"{target} does not exist; pass an audio file or a folder of them")
    return [target]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speech.asr", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="an audio file, or a folder searched recursively")
    parser.add_argument("--decoder", default="ctc_speculative", choices=DECODERS)
    parser.add_argument("--json", action="store_true", help="print one JSON object per file")
    args = parser.parse_args(argv)
    try:
        files = _files(Path(args.path))
        asr = load_asr()
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from tqdm import tqdm
    failures = 0
    for path in tqdm(files, desc="asr", file=sys.stderr, disable=len(files) < 2):
        try:
            res = asr.transcribe_file(path, decoder=args.decoder)
        except ValueError as exc:
            failures += 1
            print(f"error: {exc}", file=sys.stderr)
            continue
        if args.json:
            print(json.dumps({"file": str(path), "text": res.text, "rtf": res.real_time_factor, **res.stats.as_dict()}))
        else:
            print(f"{path}\t{res.text}" if len(files) > 1 else res.text)
    return 2 if failures == len(files) else 0


if __name__ == "__main__":
    raise SystemExit(main())
