"""Speech recognition with our CTC + attention recogniser, of an audio file or of every audio file
under a folder (.wav, .flac, .ogg, .aiff, .au, .mp3).

    python -m speech.asr clip.wav                      # one file, with the default decoder (see --help)
    python -m speech.asr recordings/ --decoder ar      # a folder (progress bar); ar: one character per forward
    python -m speech.asr clip.wav --json               # text and decode statistics as JSON lines
    python -m speech.asr talk.wav --model whisper-tiny/ --decoder lookahead   # a Whisper folder

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
import threading
import time
from pathlib import Path

import torch

import suite

from .audio import MAX_SECONDS, ASRResult, check_audio, read_audio  # noqa: F401  (public here)
from .data import SAMPLE_RATE

# "ctc" and "ctc_beam" read the CTC head alone (no decoder forward); the rest are registry decoders
DECODERS = ("ctc", "ctc_beam") + tuple(suite.list_decoders("asr", chain=("ar",)))
AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".au", ".mp3"}
# the CLI's, the Speech tab's and the API's default: ctc_speculative, the one exception to "the
# fastest lossless decoder": it is lossy against the attention decoder `ar` (its gate commits the CTC
# head's reading) but reads better as well as faster (CER 0.216 against ar's 0.345, 5.35x ar's speed;
# BENCHMARKS.md, Speech), so a user who asks for a transcript gets the better one
DEFAULT_DECODER = "ctc_speculative"


SPECULATIVE_DEFAULTS = {"max_entropy": 0.65, "min_ratio": 0.1, "realign": True}


class ASR:
    def __init__(self, model, lm=None, speculative: dict | None = None):
        self.model = model.eval()
        self.lm = lm             # speech.ctc_lm.CharNGramLM for ctc_beam (None: beam search without an LM)
        # ctc_speculative's gate (tuned on the valid split: weights/asr/decoding.json)
        self.speculative = {**SPECULATIVE_DEFAULTS, **(speculative or {})}
        self._scheduler, self._lock = None, threading.Lock()

    @property
    def scheduler(self):
        """The attention decoder's suite.scheduler.Scheduler (its stepping thread starts on the first
        utterance): concurrent calls (the Speech tab's users, the batch CLI's files) share its forwards."""
        with self._lock:
            if self._scheduler is None:
                from suite.scheduler import Scheduler

                from .asr_model import AudioPrefixLM
                self._scheduler = Scheduler(AudioPrefixLM(self.model), name="scheduler asr")
            return self._scheduler

    def __call__(self, audio, sample_rate: int = SAMPLE_RATE, decoder: str = DEFAULT_DECODER,
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
        from suite import CTCHypothesis, DecodeStats, RequestInputs
        from suite.decoders.chain.ctc_speculative import CTCSpeculative, ctc_frame_entropy, ctc_greedy

        from . import features
        from .asr_model import AUDIO, BOS, EOS, AudioPrefixLM, ids_to_text
        if decoder not in DECODERS:
            raise ValueError(f"unknown ASR decoder {decoder!r}; choose one of: {', '.join(DECODERS)}")
        audio = check_audio(audio, sample_rate)
        t0 = time.perf_counter()
        with torch.no_grad():
            weight = next(self.model.parameters())
            mel = features.log_mel(torch.from_numpy(audio))[None].to(weight.device, weight.dtype)
            enc, log_probs, enc_len = self.model.encode(mel, torch.tensor([mel.shape[-1]], device=mel.device))
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
                bound = AudioPrefixLM(self.model, self.model.bridge(enc))
                frames = int(enc_len[0])
                if decoder == "ar":
                    dec, inputs = "ar", None
                else:
                    dec = CTCSpeculative(max_entropy=max_entropy, min_ratio=min_ratio, realign=realign)
                    inputs = RequestInputs(ctc=(CTCHypothesis(hyp, ctc_frame_entropy(log_probs[0], frames)),))
                result = self.scheduler.generate([[AUDIO] * frames + [BOS]], decoder=dec, max_new_tokens=400,
                                                 eos_token_id=EOS, inputs=inputs, bound=bound)
                stats = result.stats
                text = ids_to_text([t for t in result.new_tokens[0] if t != EOS])
        stats.wall_time_s = time.perf_counter() - t0
        return ASRResult(text, stats, len(audio) / SAMPLE_RATE)

    def transcribe_file(self, path, decoder: str = DEFAULT_DECODER) -> ASRResult:
        audio, sr = read_audio(path)
        return self(audio, sr, decoder=decoder)


def load_asr(folder=None, draft_model=None, dtype=None):
    """The embedded recogniser (speech/weights/asr), offline, with its character LM when present;
    or a folder of our recogniser, or of a transformers family (Whisper: speech/hf_asr.py, with
    draft_model= another Whisper folder for `speculative`). dtype: our recogniser's, float32,
    bfloat16 or auto (suite.models.dtypes; None: the process default)."""
    from suite.models.dtypes import cast
    from .asr_model import WEIGHTS, Recogniser
    from .ctc_lm import CharNGramLM
    from .hf_folder import model_type
    if folder is not None and model_type(folder) not in (None, Recogniser.model_type):
        from .hf_asr import WhisperASR
        return WhisperASR.load(folder, draft_model=draft_model)
    folder = Path(folder or WEIGHTS / "asr")
    lm_path, gate = folder / "char_lm.json.gz", folder / "decoding.json"
    model = Recogniser.load(folder)
    cast(model, dtype)
    # no linear forms on the decoder: ar 0.91x, ctc_speculative 1.00x (hidden 144: per-call overhead; BENCHMARKS.md)
    return ASR(model, CharNGramLM.load(lm_path) if lm_path.exists() else None,
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


class ASRWorker:
    """The batch worker (suite.runtime.jobs): loads the recogniser once, transcribes one file per call."""

    def __init__(self, decoder: str | None = None, model=None, draft_model=None, threads=None, dtype="float32"):
        self.asr = load_asr(model, draft_model=draft_model, dtype=dtype)
        self.decoder = decoder or getattr(self.asr, "default_decoder", DEFAULT_DECODER)    # a family's, or ours
        from suite.runtime.options import guarantee_note, quality_costs
        kind = "lossy" if self.decoder in ("ctc", "ctc_beam") else None     # CTC head readers: no decoder of ar's
        self.guarantee = guarantee_note(self.decoder, quality_costs(Path(__file__).parent, "asr"), kind)

    @property
    def concurrency(self) -> int:
        """Files in flight at once: ours share the attention decoder's forwards (ASR.scheduler); a
        model family's recogniser reads one at a time."""
        return 16 if hasattr(self.asr, "scheduler") else 1

    def __call__(self, payload: dict) -> dict:
        res = self.asr.transcribe_file(payload["src"], decoder=self.decoder)
        return {"file": payload["src"], "text": res.text, "decoder": self.decoder, "guarantee": self.guarantee,
                "rtf": res.real_time_factor, **res.stats.as_dict()}


def default_note() -> str:
    """The default decoder and its guarantee as the registry states it (with its measured cost)."""
    from suite.runtime.options import guarantee_note, quality_costs
    return guarantee_note(DEFAULT_DECODER, quality_costs(Path(__file__).parent, "asr"))


def main(argv=None) -> int:
    from suite.models.dtypes import add_dtype_argument
    from suite.runtime.jobs.cli import add_batch_arguments, engine_from_args, run_cli
    from suite.runtime.jobs.items import BatchJob, Item
    from suite.runtime.storage import write_json, write_text
    parser = argparse.ArgumentParser(prog="python -m speech.asr", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="an audio file, or a folder searched recursively")
    from .hf_asr import DECODERS as WHISPER_DECODERS
    parser.add_argument("--decoder", default=None, choices=DECODERS + tuple(d for d in WHISPER_DECODERS if d not in DECODERS),
                        help=f"default for our recogniser (the app's too): {default_note()}; reads better and "
                             "faster than ar here (BENCHMARKS.md, Speech). Default for a Whisper --model: ar")
    parser.add_argument("--json", action="store_true", help="print one JSON object per file")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="also write DIR/<file>.txt (and .json with --json) per file, with a manifest; "
                             "a rerun skips files already done")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="a recogniser folder (default: the embedded one), or a Whisper folder (model + processor "
                             "saved with save_pretrained; long audio in 30 s windows)")
    parser.add_argument("--draft-model", default=None, metavar="DIR", help="speculative: the draft model's folder")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    add_dtype_argument(parser)
    add_batch_arguments(parser)
    args = parser.parse_args(argv)
    try:
        root = Path(args.path)
        files = _files(root)
        engine = engine_from_args(args, threads=args.threads)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None

    def outputs(path: Path) -> tuple[Path, ...]:
        if out is None:
            return ()
        base = out / (path.relative_to(root) if root.is_dir() else Path(path.name))
        return (base.with_name(base.name + ".txt"),) + ((base.with_name(base.name + ".json"),) if args.json else ())

    def write(item, row) -> None:
        if item.outputs:
            item.outputs[0].parent.mkdir(parents=True, exist_ok=True)
            write_text(item.outputs[0], row["text"] + "\n")
            if args.json:
                write_json(item.outputs[1], row)
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['file']}\t{row['text']}" if len(files) > 1 else row["text"])

    worker_args = {"decoder": args.decoder, "model": args.model, "draft_model": args.draft_model, "dtype": args.dtype,
                   "threads": args.threads}
    job = BatchJob("asr", [Item(str(p), {"src": str(p)}, outputs(p)) for p in files], ASRWorker,
                   worker_args, write, fields=("file", "text"),
                   manifest=out / "manifest.jsonl" if out else None, ordered=True)
    return run_cli(job, engine)


if __name__ == "__main__":
    raise SystemExit(main())
