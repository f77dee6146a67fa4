"""Text-to-speech with our codec and multi-codebook TTS models.

Text -> phones (flite's front end) -> frames per phone (the frame model's duration predictor) ->
per-frame conditioning (speech/alignment.py) -> codec frames by one of the decoders -> audio.

    python -m speech.tts "Return a list of cookies." --out a.wav
    python -m speech.tts "Remove an item from the queue." --decoder flat --seed 3 --out b.wav
    python -m speech.tts --input sentences.txt --out wavs/          # one WAV per line (or a folder of .txt)
    python -m speech.tts "[S1] Hello there." --model dia/ --seconds 5  # a MusicGen, Dia or CSM folder

Decoders: flat (the flattened model, one code per forward: suite's `ar`), delay (MusicGen delay
pattern, T+K-1 forwards), parallel (all K codebooks of a frame per forward, T+1 forwards),
local_ar / local_maskgit (one backbone forward per frame, then a local transformer over the K
codebooks: autoregressive, or MaskGIT in 2 passes), stack (2 frames per forward, ~T/2+1 forwards),
stack_local (2 frames per forward, their 2K codes sampled by a local transformer; the tts_stack model).
Exact (sampling the model's own factorisation): flat, delay (for its layout), local_ar, stack_local;
not exact: parallel, local_maskgit, stack (codebooks or frames sampled independently;
suite/decoders/*.py).
The alignment (frames per phone) is fixed before decoding, so it does not change any of this.
"""
from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

import suite

from .audio import TTSResult  # noqa: F401  (public here)

# "flat": `ar` over the flattened-codes model; the rest are the registry's frame decoders
DECODERS = ("flat",) + tuple(suite.list_decoders("speech", chain=()))
# the CLI's, the Speech tab's and the API's default: the fastest exact decoder measured here (delay on
# tts_delay: 3.92x fewer forwards than flat, RTF 0.187 against flat's 0.742; parallel is as fast but not
# exact: BENCHMARKS.md, Speech)
DEFAULT_DECODER = "delay"
FRAME_OUTPUT = {"delay": "frame", "parallel": "frame", "local_ar": "local", "local_maskgit": "local", "stack": "stack",
                "stack_local": "local"}
ALLOWED = re.compile(r"[A-Za-z0-9 ,.;:!?'\"()\-\n]")
MAX_CHARS = 200


def check_text(text) -> str:
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    text = " ".join(text.split())
    if not text or not re.search(r"[A-Za-z0-9]", text):
        raise ValueError("text is empty; pass a sentence to speak, e.g. \"Hello there.\"")
    bad = sorted({ch for ch in text if not ALLOWED.fullmatch(ch)})
    if bad:
        raise ValueError(f"unsupported characters {''.join(bad)!r}; use plain English letters, digits and "
                         "punctuation (, . ; : ! ? ' \" ( ) -)")
    if len(text) > MAX_CHARS:
        raise ValueError(f"text is {len(text)} characters; split it into sentences of at most {MAX_CHARS}")
    return text


class TTS:
    default_decoder = DEFAULT_DECODER         # what `python -m speech.tts` runs without --decoder

    def __init__(self, frame_model, codec, flat_model=None, delay_model=None, stack_model=None):
        """delay_model / stack_model: checkpoints trained for one decoder alone (tts_delay: the DELAY
        layout; tts_stack: the PARALLEL layout with stacked heads and a local transformer over two
        frames); `delay` / `stack` run on them when given, else on the frame model; `stack_local`
        needs tts_stack. The alignment is always the frame model's."""
        from .tts_model import FlatTTSAdapter, FrameTTSAdapter
        self.codec = codec
        self.heads = {out: FrameTTSAdapter(frame_model, out) for out in FrameTTSAdapter.OUTPUTS}
        self.frame = self.heads["frame"]
        self.flat = FlatTTSAdapter(flat_model) if flat_model is not None else None
        self.delay = FrameTTSAdapter(delay_model, "frame") if delay_model is not None else self.frame
        self.stack = FrameTTSAdapter(stack_model, "stack") if stack_model is not None else self.heads["stack"]
        self.stack_local = FrameTTSAdapter(stack_model, "local") \
            if stack_model is not None and stack_model.config.local_frames > 1 else None
        self.sample_rate = codec.config.sample_rate
        self.frame_rate = codec.config.frame_rate
        self._schedulers, self._lock = {}, threading.Lock()

    # ------------------------------------------------------------ public API
    @property
    def decoders(self) -> tuple[str, ...]:
        """The decoders the loaded checkpoints support (flat needs tts_flat; local_* and stack need
        the frame model's local transformer / stacked heads; stack_local needs tts_stack)."""
        cfg = self.frame.model.config
        ok = {"flat": self.flat is not None, "local_ar": cfg.local_layers > 0, "local_maskgit": cfg.local_layers > 0,
              "stack": self.stack.model.config.stack_frames > 1, "stack_local": self.stack_local is not None}
        return tuple(d for d in DECODERS if ok.get(d, True))

    def __call__(self, text: str, decoder: str = DEFAULT_DECODER, seed: int | None = 0, temperature: float = 0.7,
                 top_k: int | None = 40, max_seconds: float = 12.0) -> TTSResult:
        t0 = time.perf_counter()
        request, phonemes = self._submit(text, decoder, seed, temperature, top_k, max_seconds)
        result = request.result()
        codes = self._codes(decoder, result.new_tokens[0])
        audio = self.codec.decode(codes[None])[0].numpy()
        result.stats.wall_time_s = time.perf_counter() - t0
        return TTSResult(audio, self.sample_rate, codes, result.stats, phonemes)

    def stream(self, text: str, decoder: str = DEFAULT_DECODER, seed: int | None = 0, temperature: float = 0.7,
               top_k: int | None = 40, max_seconds: float = 12.0, chunk_frames: int = 25) -> Iterator[np.ndarray]:
        """Yield audio chunks (float32, 16 kHz) as frames are committed (every `chunk_frames`)."""
        request, _ = self._submit(text, decoder, seed, temperature, top_k, max_seconds, stream=True)
        new, emitted = [], 0
        for step in request.steps():
            new += step.committed[0]
            codes = self._codes(decoder, new)
            if codes.shape[1] - emitted >= chunk_frames:
                yield self._chunk(codes, emitted, codes.shape[1])
                emitted = codes.shape[1]
        codes = self._codes(decoder, request.result().new_tokens[0])
        if codes.shape[1] > emitted:
            yield self._chunk(codes, emitted, codes.shape[1])

    # ------------------------------------------------------------ internals
    def scheduler(self, adapter):
        """The suite.scheduler.Scheduler of one of the models' adapters (its stepping thread starts
        on the first sentence): concurrent calls (the Speech tab's users, the batch CLI's lines)
        share its forwards."""
        with self._lock:
            if id(adapter) not in self._schedulers:
                from suite.scheduler import Scheduler
                self._schedulers[id(adapter)] = Scheduler(adapter, name="scheduler tts")
            return self._schedulers[id(adapter)]

    def _submit(self, text, decoder, seed, temperature, top_k, max_seconds, stream: bool = False):
        """The request of one sentence, queued on its adapter's scheduler, and its phonemes."""
        from .alignment import flite_phones, frame_conditioning
        if decoder not in DECODERS:
            raise ValueError(f"unknown TTS decoder {decoder!r}; choose one of: {', '.join(DECODERS)}")
        if decoder == "flat" and self.flat is None:
            raise ValueError("decoder 'flat' needs the flat model (speech/weights/tts_flat); train it with "
                             "`python -m speech.train tts-flat`")
        if decoder not in self.decoders:
            what, cmd = ("the stack model (speech/weights/tts_stack)", "tts-stack") if decoder == "stack_local" \
                else ("the local transformer / stacked heads", "tts")
            raise ValueError(f"decoder {decoder!r} needs {what}, which these TTS weights lack; train it with "
                             f"`python -m speech.train {cmd}`")
        if not 0.2 <= max_seconds <= 30:
            raise ValueError(f"max_seconds must be in [0.2, 30], got {max_seconds}")
        names = [p for p, _ in flite_phones(check_text(text))]
        own = {"flat": self.flat, "delay": self.delay, "stack": self.stack, "stack_local": self.stack_local}
        adapter = own.get(decoder) or self.heads[FRAME_OUTPUT[decoder]]
        cfg = adapter.model.config
        ids = cfg.phone_ids(names)
        # every decoder gets the same alignment: the frame model's durations
        table = frame_conditioning(ids, self.frame.model.durations(ids), none_id=len(cfg.phones))
        frames = int(min(max_seconds * self.frame_rate, len(table) + self.frame_rate / 2))
        q = cfg.num_codebooks
        if decoder == "flat":
            prompt, budget = [cfg.bos], frames * q + 1
        else:
            layout = cfg.delay_token if decoder == "delay" else cfg.parallel_token
            prompt = [(layout,) + (cfg.pad,) * (q - 1), (cfg.bos,) * q]
            budget = frames + q + 1
        request = self.scheduler(adapter).submit(
            [prompt], decoder="ar" if decoder == "flat" else decoder, max_new_tokens=budget, temperature=temperature,
            top_k=top_k, seed=seed, stream=stream, bound=adapter.for_request([len(prompt) - 1], [table]))
        return request, " ".join(names)

    def _codes(self, decoder: str, new: list) -> torch.Tensor:
        """(Q, T) codes of a row's committed tokens (for delay: the frames whose every codebook is
        known, column t holding codebook q of frame t - q, up to codebook 0's EOS)."""
        from suite.decoders.frames.delay import undelay
        from .tts_model import unflatten_codes
        cfg = (self.flat if decoder == "flat" else self.frame).model.config
        q, c = cfg.num_codebooks, cfg.codebook_size
        dev = next(self.codec.parameters()).device     # the codec decodes them
        none = torch.zeros(q, 0, dtype=torch.long, device=dev)
        if decoder == "flat":
            ids = torch.tensor([t for t in new if t != cfg.eos], dtype=torch.long, device=dev)
            codes = unflatten_codes(ids, q, c) if ids.numel() >= q else none
        elif decoder != "delay":      # one frame per committed token
            frames = [f for f in new if f[0] != cfg.eos]
            codes = torch.tensor(frames, dtype=torch.long, device=dev).T if frames else none
        else:
            cols = [f for f in new if f != (cfg.eos,) * q]
            ended = next((i for i, f in enumerate(cols) if f[0] == cfg.eos), None)    # codebook 0's EOS: T frames
            t = max(min(len(cols) if ended is None else ended, len(cols) - q + 1), 0)
            codes = undelay(torch.tensor(cols, dtype=torch.long, device=dev).T, t) if t > 0 else none
        return _sanitise(codes, c)

    def _chunk(self, codes: torch.Tensor, start: int, end: int, context: int = 8) -> np.ndarray:
        """Audio of frames start..end, decoded with a little left context for continuity."""
        left = max(start - context, 0)
        audio = self.codec.decode(codes[None, :, left:end])[0].numpy()
        per_frame = len(audio) // max(end - left, 1)
        return audio[(start - left) * per_frame:]


def _sanitise(codes: torch.Tensor, codebook_size: int) -> torch.Tensor:
    """Replace any non-code id (a stray EOS/PAD sampled by a non-leading head) with the previous
    frame's code of that codebook (0 at the start)."""
    codes = codes.clone()
    for t in range(codes.shape[1]):
        bad = codes[:, t] >= codebook_size
        if bad.any():
            codes[bad, t] = codes[bad, t - 1] if t > 0 else 0
    return codes


def load_tts(folder=None, frame=None, delay=None, stack=None, flat=None, dtype=None):
    """The embedded codec and TTS models (speech/weights), offline. frame / delay / stack / flat:
    another folder for the frame model (`tts`), the delay model (`tts_delay`), the stack model
    (`tts_stack`) or the flat model (`tts_flat`), e.g. a new training run; the others stay the
    embedded ones. A folder of a transformers family (MusicGen: speech/hf_tts.py;
    Dia: speech/hf_dia.py; CSM: speech/hf_csm.py) loads that model. dtype: our TTS models' (the codec
    stays float32), float32, bfloat16 or auto (suite.models.dtypes; None: the process default)."""
    from suite.models.dtypes import cast
    from .codec import WEIGHTS, Codec
    from .hf_folder import model_type
    from .tts_model import TTSModel
    if folder is not None and model_type(folder) is not None:
        return load_family_tts(folder)
    root = Path(folder) if folder else WEIGHTS

    def folder_of(given, name: str) -> Path:
        return Path(given) if given else root / name

    def model(path: Path):
        loaded = TTSModel.load(path)
        cast(loaded, dtype)
        # no linear forms: delay 1.04x, flat 0.95x (hidden 192: per-call overhead; BENCHMARKS.md)
        return loaded

    def optional(path: Path):
        return model(path) if (path / "model.safetensors").exists() else None

    return TTS(model(folder_of(frame, "tts")), Codec.load(root / "codec"),
               optional(folder_of(flat, "tts_flat")), optional(folder_of(delay, "tts_delay")),
               optional(folder_of(stack, "tts_stack")))


def tts_families() -> dict[str, tuple]:
    """model_type -> (transformers model class, processor class, our pipeline class) of each
    text-to-audio family (speech/hf_tts.py, hf_dia.py, hf_csm.py)."""
    from . import hf_csm, hf_dia, hf_tts
    return {kind: (*classes, pipeline) for module, pipeline in ((hf_tts, hf_tts.MusicgenTTS), (hf_dia, hf_dia.DiaTTS),
                                                                (hf_csm, hf_csm.CsmTTS))
            for kind, classes in module.FAMILIES.items()}


def load_family_tts(folder):
    """The text-to-audio pipeline of a transformers folder, by its model_type; an unknown one is an
    error listing the known families."""
    from .hf_folder import load_family, model_type
    families = tts_families()
    kind = model_type(folder)
    if kind in families:
        return families[kind][2].load(folder)
    return load_family(folder, {k: v[:2] for k, v in families.items()}, "text-to-audio")   # raises


def write_wav(path, audio: np.ndarray, sample_rate: int) -> None:
    """Write atomically (temp file + rename, suite.runtime.storage): nothing half-written on failure,
    the file's mode that of any other output (0o644 under the usual umask)."""
    import soundfile as sf

    from suite.runtime.storage import atomic_path
    with atomic_path(path) as tmp:
        sf.write(str(tmp), audio, sample_rate, subtype="PCM_16")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speech.tts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("text", nargs="?", help="the sentence to speak (plain English), or use --input")
    parser.add_argument("--out", default=None, help="output WAV file (default tts.wav); with --input, a folder")
    parser.add_argument("--decoder", default=None, choices=DECODERS,
                        help=f"default: {DEFAULT_DECODER} (our TTS: the fastest exact one here, the app's default "
                             "too), the family's own (delay; local_ar for CSM) with --model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=None,
                        help="default: 0.7 (our TTS), the generation config's with --model")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="a transformers text-to-audio folder (MusicGen, Dia, CSM: model + processor saved with "
                             "save_pretrained; Dia's DAC codec in DIR/audio_tokenizer); default: our TTS")
    parser.add_argument("--seconds", type=float, default=None,
                        help="with --model: the length of the audio (an upper bound for Dia and CSM, which end by EOS)")
    parser.add_argument("--input", default=None, metavar="PATH",
                        help="a text file (one sentence per line -> OUT/line_0001.wav ...) or a folder of .txt "
                             "files (each one utterance -> OUT/<name>.wav), with OUT/manifest.jsonl; resumable")
    parser.add_argument("--threads", type=int, default=None, help="--input: torch threads (default: torch's)")
    from suite.models.dtypes import add_dtype_argument
    from suite.runtime.jobs.cli import add_batch_arguments
    add_dtype_argument(parser)
    add_batch_arguments(parser)
    args = parser.parse_args(argv)
    if (args.text is None) == (args.input is None):
        parser.error("give either a sentence or --input PATH (not both)")
    if args.input is not None:
        return main_batch(args)
    args.out = args.out or "tts.wav"
    try:
        if not Path(args.out).resolve().parent.is_dir():
            raise ValueError(f"folder of --out {args.out} does not exist; create it first")
        options = request_options(args)
        text = checked_text(args.text, args.model)
        tts = load_tts(args.model, dtype=args.dtype)
        res = tts(text, **options)
        write_wav(args.out, res.audio, res.sample_rate)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {res.seconds:.2f} s, {res.codes.shape[1]} frames, {res.stats.num_forwards} forwards, "
          f"RTF {res.real_time_factor:.2f}; {tts_guarantee(options.get('decoder') or getattr(tts, 'default_decoder', DEFAULT_DECODER))}")
    return 0


def tts_guarantee(decoder: str) -> str:
    """The summary line's account of the decoder: the registry's guarantee and measured cost (flat: ar's own)."""
    from suite.runtime.options import guarantee_note, quality_costs
    if decoder == "flat":
        return "flat: the baseline (ar on the flat model)"
    return guarantee_note(decoder, quality_costs(Path(__file__).parent, "speech"))


def is_family(model) -> bool:
    """Whether `model` (a folder or None) holds a transformers family rather than our TTS."""
    from .hf_folder import model_type
    return model is not None and model_type(model) is not None


def request_options(args) -> dict:
    """The call options of the CLI's flags: our TTS's defaults (DEFAULT_DECODER, temperature 0.7), or a
    family's own (its default decoder, its generation config's sampling) under --model."""
    if not is_family(args.model):
        if args.seconds is not None:
            raise ValueError("--seconds sets the length of a transformers family's audio (--model DIR); our TTS "
                             "times each phone itself")
        return {"decoder": args.decoder or DEFAULT_DECODER, "seed": args.seed,
                "temperature": 0.7 if args.temperature is None else args.temperature}
    options = {"seed": args.seed, "temperature": args.temperature, "seconds": args.seconds}
    return {**options, "decoder": args.decoder} if args.decoder else options


def checked_text(text, model) -> str:
    """Our TTS speaks plain English (check_text); a family's tokenizer takes any text (its speaker
    tags, e.g. Dia's "[S1]", included)."""
    if not is_family(model):
        return check_text(text)
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty; pass a sentence to speak, e.g. \"[S1] Hello there.\" (Dia)")
    return text.strip()


class TTSWorker:
    """The batch worker (suite.runtime.jobs): loads the TTS models once, speaks one text per call into
    WAV bytes (16-bit PCM)."""

    def __init__(self, decoder=None, seed=0, temperature=0.7, threads=None, model=None, seconds=None, dtype="float32"):
        self.model, self.tts = model, load_tts(model, dtype=dtype)
        options = {"decoder": decoder, "seed": seed, "temperature": temperature, "seconds": seconds}
        self.options = {k: v for k, v in options.items() if v is not None}   # None: the model's own default

    @property
    def concurrency(self) -> int:
        """Sentences in flight at once: ours share the TTS model's forwards (TTS.scheduler); a model
        family's pipeline speaks one at a time."""
        return 16 if hasattr(self.tts, "scheduler") else 1

    def __call__(self, payload: dict) -> dict:
        import io

        import soundfile as sf
        text = checked_text(payload["text"], self.model)
        res = self.tts(text, **self.options)
        buf = io.BytesIO()
        sf.write(buf, res.audio, res.sample_rate, format="WAV", subtype="PCM_16")
        return {"wav": buf.getvalue(), "seconds": res.seconds, "frames": int(res.codes.shape[1]),
                "forwards": res.stats.num_forwards}


def batch_inputs(source: Path, out: Path) -> list[tuple[str, str, Path]]:
    """(key, text, wav path) per utterance of a text file (one per line) or a folder of .txt files."""
    if source.is_dir():
        files = sorted(p for p in source.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"no .txt files under {source}: put one utterance per .txt file")
        return [(str(p), p.read_text(encoding="utf-8").strip(), out / p.relative_to(source).with_suffix(".wav"))
                for p in files]
    if not source.is_file():
        raise ValueError(f"{source} does not exist; pass a text file (one sentence per line) or a folder of .txt files")
    lines = [line.strip() for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{source} holds no sentences: write one per line")
    return [(f"{source.name}:{i + 1}", t, out / f"line_{i + 1:04d}.wav") for i, t in enumerate(lines)]


def main_batch(args) -> int:
    from suite.runtime.jobs.cli import engine_from_args, run_cli
    from suite.runtime.jobs.items import BatchJob, Item
    from suite.runtime.storage import write_bytes
    try:
        if args.out is None:
            raise ValueError("--input needs --out FOLDER for the WAV files")
        out = Path(args.out)
        if out.suffix.lower() == ".wav":
            raise ValueError(f"with --input, --out names a folder, not {args.out}")
        engine = engine_from_args(args, threads=args.threads)
        inputs = batch_inputs(Path(args.input), out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def write(item, result) -> None:
        item.outputs[0].parent.mkdir(parents=True, exist_ok=True)
        write_bytes(item.outputs[0], result["wav"])

    try:
        options = request_options(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    worker_args = {**options, "threads": args.threads, "model": args.model, "dtype": args.dtype}
    job = BatchJob("tts", [Item(key, {"text": text}, (wav,)) for key, text, wav in inputs], TTSWorker, worker_args,
                   write, fields=("wav", "seconds", "frames", "forwards"), manifest=out / "manifest.jsonl", unit="utt")
    return run_cli(job, engine)


if __name__ == "__main__":
    raise SystemExit(main())
