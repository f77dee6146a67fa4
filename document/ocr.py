"""Line OCR: `ocr = document.load_ocr(); res = ocr(line_images, decoder="block_diffusion")`.

The encoder runs once per line image; the decoder runs through suite's one decode loop with any
registered decoder (ar, block_diffusion, s2d2, ngram_prior, ctc_speculative, jacobi, ...). Lines are decoded
by the reader's scheduler (suite.scheduler): each row advances by its own accepted length, leaves at
its EOS, and the next chunk of lines joins once there is room.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import suite
from suite import DecodeStats, RequestInputs
from suite.registry import DEFAULTS

from .confidence import load as load_calibration
from .data import text_rows
from .decoder_probs import Recording
from .lines import leader_text, line_pieces, squeeze_gaps, words_seen
from .model import OCRAdapter, OCRModel

DEFAULT_WEIGHTS = Path(__file__).parent / "weights" / "ocr-small"
DECODERS = tuple(suite.list_decoders("document", chain=("ar", "jacobi")))   # the line decoders offered
# options a decoder named without them gets here: the registry's one table (suite.registry.DEFAULTS),
# which the CLI, the app and the bench read too
DECODER_DEFAULTS = DEFAULTS["document"]


@dataclass
class OCRStats(DecodeStats):
    """The lines' DecodeStats side by side (num_forwards: batched decoder forwards; row_forwards:
    each line's own decode steps, summed), with wall_time_s end to end (encoder included)."""
    num_lines: int = 0
    encoder_forwards: int = 0      # one per batch of images

    @property
    def forwards_per_line(self) -> float:
        return self.row_forwards / max(self.num_lines, 1)

    @property
    def lines_per_second(self) -> float:
        return self.per_second(self.num_lines)

    def summary(self) -> str:
        return (f"{self.num_lines} lines, {self.forwards_per_line:.2f} forwards/line, "
                f"{self.num_new_tokens / max(self.row_forwards, 1):.2f} tokens/forward, "
                f"{self.lines_per_second:.1f} lines/s")


@dataclass
class OCRResult:
    texts: list[str]
    stats: OCRStats
    confidences: list[float] = field(default_factory=list)   # mean token probability (score=True)
    tokens: list[list[int]] = field(default_factory=list)    # the new token ids of each line (EOS included)
    min_probs: list[float] = field(default_factory=list)     # the least probable read token's probability (score=True)
    ctc_agree: list = field(default_factory=list)            # the CTC head reads the same (score=True; None: no head)


def as_pil(image, index: int = 0):
    """A PIL image, a (H, W) / (H, W, C) uint8 array -> PIL; anything else is a clear error."""
    from PIL import Image
    if isinstance(image, Image.Image):
        img = image
    elif isinstance(image, np.ndarray) and image.ndim in (2, 3):
        arr = image if image.dtype == np.uint8 else np.clip(image * (255 if image.max() <= 1 else 1), 0, 255).astype(np.uint8)
        img = Image.fromarray(arr)
    else:
        raise ValueError(f"line {index}: expected a PIL image or a (H, W[, C]) array, got {type(image).__name__}")
    if img.width < 2 or img.height < 2:
        raise ValueError(f"line {index}: image of {img.width}x{img.height} pixels is too small to read; "
                         "pass a crop of a text line (at least 2x2 pixels)")
    return img


class OCR:
    """Reads line images with a line-reader adapter: `OCRAdapter` (our model) or `VEDAdapter`
    (a transformers VisionEncoderDecoder checkpoint, e.g. TrOCR)."""

    def __init__(self, model, batch_size: int = 32):
        self.adapter = OCRAdapter(model) if isinstance(model, OCRModel) else model
        self.model = getattr(self.adapter, "model", None)
        self.batch_size = batch_size
        self.calibration = None        # document/confidence.py (load_ocr reads the weights folder's)
        self._scheduler, self._lock = None, threading.Lock()

    @property
    def max_length(self) -> int:
        return self.adapter.config.max_length

    @property
    def decoders(self) -> tuple[str, ...]:
        """The registered decoders this reader runs (ctc_speculative only with a CTC head)."""
        ctc = hasattr(self.adapter, "ctc_drafts")
        return tuple(n for n in DECODERS if (n != "ctc_speculative" or ctc) and
                     all(self.adapter.capabilities.has(c) for c in suite.DECODERS[n].requires))

    def pixels(self, images) -> torch.Tensor:
        """Model input for a list of line images."""
        return self.adapter.pixels([as_pil(im, i) for i, im in enumerate(images)])

    def pieces(self, images) -> "Pieces":
        """The line images as the model reads them, when the adapter asks for it (`split_lines`): a
        justified line's wide word gaps squeezed (document.lines.squeeze_gaps), lines wider than the
        model reads well cut at word gaps (document.lines.line_pieces), and a cut line's pieces of
        leader dots read from their geometry (document.lines.leader_text)."""
        if not getattr(self.adapter, "split_lines", False):
            return Pieces.whole(images)
        cut = Pieces([], [], [], [])
        for i, im in enumerate(images):
            im = squeeze_gaps(im)            # a justified line's wide gaps made ordinary word spaces
            parts, spaced = line_pieces(im)
            parts, spaced = (parts, spaced) if parts else ([im], [False])
            rows = text_rows(im) if len(parts) > 1 else None
            cut.images += parts
            cut.owner += [i] * len(parts)
            cut.known += [None if rows is None else leader_text(p, rows) for p in parts]
            cut.spaced += spaced
        return cut

    @property
    def scheduler(self):
        """This reader's suite.scheduler.Scheduler (its stepping thread starts on the first line):
        the lines of every call, concurrent calls included, share its forwards, at most
        2 x `batch_size` rows at once; a line leaves at its EOS, and a waiting chunk of lines joins
        once there is room for it."""
        with self._lock:
            if self._scheduler is None:
                from suite.scheduler import Scheduler
                # room for two chunks of `batch_size` lines (one request each): a second call's lines, or the
                # next chunk, join while the first runs
                self._scheduler = Scheduler(self.adapter, max_rows=2 * self.batch_size, name="scheduler ocr")
            return self._scheduler

    def __call__(self, line_images, decoder="ar", batch_size: int | None = None, score: bool = False,
                 prior_texts: list[str] | None = None, **options) -> OCRResult:
        """Read each line image; `decoder` is a registered name or a decoder object, `options` its
        hyperparameters; `prior_texts` (one per line) feed the input-guided `ngram_prior` decoder.
        A long line is read in pieces (see `pieces`), joined with a space where a cut was a word space;
        its stats count every piece's forwards. The encoder reads `batch_size` images per forward; each
        such chunk of pieces is then one request to the reader's scheduler (its rows join the running
        batch together and each leaves at its EOS). score=True: each line's token probabilities, from the decoding
        forwards themselves where the decoder verifies a chain (document.decoder_probs)."""
        images = [as_pil(im, i) for i, im in enumerate(line_images)]
        if prior_texts is not None and len(prior_texts) != len(images):
            raise ValueError(f"prior_texts has {len(prior_texts)} entries for {len(images)} lines; give one per line")
        dec = suite.make_decoder(decoder, **{**DECODER_DEFAULTS.get(decoder, {}), **options}) \
            if isinstance(decoder, str) else decoder
        if dec.name == "ctc_speculative" and not hasattr(self.adapter, "ctc_drafts"):
            raise ValueError("decoder 'ctc_speculative' drafts with the model's CTC head, and this model has none; "
                             "choose ar, s2d2 or block_diffusion")
        if score:
            dec = Recording(dec)         # the read tokens' probabilities from the decoding forwards themselves
        t0 = time.perf_counter()
        cut = self.pieces(images)
        read = [i for i, text in enumerate(cut.known) if text is None]
        res = self.read_pieces([cut.images[i] for i in read], dec, batch_size or self.batch_size, score,
                               None if prior_texts is None else [prior_texts[cut.owner[i]] for i in read])
        res = with_known(res, read, cut.known, score)
        res.stats.num_lines = len(images)
        res.stats.wall_time_s = time.perf_counter() - t0
        return join_pieces(res, cut.owner, cut.spaced, len(images))

    def read_pieces(self, pieces: list, dec, size: int, score: bool, prior_texts: list[str] | None) -> OCRResult:
        """The model's reading of each piece (`__call__`), `size` pieces to an encoder forward."""
        if not pieces:
            return OCRResult([], OCRStats(), [], [], [], [])
        # the widest pieces first: the job's last steps then finish short lines, not wait on a long one
        order = sorted(range(len(pieces)), key=lambda i: -pieces[i].width / pieces[i].height)
        requests, inputs, chunks = [], [], []
        try:
            for lo in range(0, len(pieces), size):
                rows = order[lo:lo + size]
                bound = self.adapter.for_images(self.adapter.pixels([pieces[i] for i in rows]))
                ctc = bound.ctc_drafts() if dec.name == "ctc_speculative" or (score and hasattr(bound, "ctc_drafts")) else None
                chunks.append((bound, rows, ctc))
                # one request per chunk: its rows join the running batch together (one cache join, not one
                # per line) and each leaves at its EOS
                inputs.append(RequestInputs(
                    ctc=tuple(ctc) if ctc is not None and dec.name == "ctc_speculative" else None,
                    prior_tokens=None if prior_texts is None else
                    tuple(bound.prior_tokens(prior_texts[i]) for i in rows)))
                requests.append(self.scheduler.request([[bound.start_token_id]] * len(rows), decoder=dec,
                                                       inputs=inputs[-1], max_new_tokens=self.max_length - 1,
                                                       bound=bound))
            results = [r.result() for r in self.scheduler.enqueue(requests)]
        except BaseException:
            for r in requests:
                r.cancel()
            raise
        eos = self.adapter.config.eos_token_ids
        tokens = [None] * len(pieces)
        for (_, rows, _), res in zip(chunks, results):
            for j, i in enumerate(rows):
                tokens[i] = res.new_tokens[j]
        texts = [self.adapter.decode_text([t for t in new if t not in eos]) for new in tokens]
        confs, mins, agree = [0.0] * len(pieces), [0.0] * len(pieces), [None] * len(pieces)
        if score:
            logprobs = token_logprobs(dec, inputs, tokens, chunks)
            for bound, rows, ctc in chunks:
                for j, i in enumerate(rows):
                    lp = logprobs[i]
                    mean, low = (float(np.exp(np.mean(lp))), float(np.exp(np.min(lp)))) if lp else (0.0, 0.0)
                    # fewer words read than the image shows: some may be missing, so not certain
                    confs[i] = mean * min(1.0, len(texts[i].split()) / max(words_seen(pieces[i]), 1))
                    mins[i] = low
                    if ctc is not None:      # the CTC head, reading from the encoder alone, reads the same?
                        agree[i] = list(ctc[j].tokens) == [t for t in tokens[i] if t not in eos]
        stats = OCRStats.beside([res.stats for res in results])
        stats.num_forwards = len({f for r in requests for f in r.forward_ids})     # forwards shared by the lines
        stats.encoder_forwards = len(chunks)
        return OCRResult(texts, stats, confs if score else [], tokens, mins if score else [], agree if score else [])


@dataclass
class Pieces:
    """What the model reads of some line images (`OCR.pieces`): each piece with its line (`owner`),
    its text where known without the model (else None) and whether a word space comes before it."""
    images: list
    owner: list[int]
    known: list
    spaced: list[bool]

    @classmethod
    def whole(cls, images: list) -> "Pieces":
        """Each line one piece of its own, read by the model."""
        n = len(images)
        return cls(images, list(range(n)), [None] * n, [False] * n)


def with_known(res: OCRResult, read: list[int], known: list, scored: bool) -> OCRResult:
    """The model's reading of the pieces `read` -> every piece's, the known texts in their places
    (no tokens, no confidence of their own)."""
    if len(read) == len(known):
        return res
    out = OCRResult(list(known), res.stats, [None] * len(known) if scored else [], [[] for _ in known],
                    [1.0] * len(known) if scored else [], [None] * len(known) if scored else [])
    for j, i in enumerate(read):
        out.texts[i], out.tokens[i] = res.texts[j], res.tokens[j]
        if scored:
            out.confidences[i], out.min_probs[i], out.ctc_agree[i] = res.confidences[j], res.min_probs[j], res.ctc_agree[j]
    return out


def join_pieces(res: OCRResult, owner: list[int], spaced: list[bool], n: int) -> OCRResult:
    """Per-piece results -> per-line: texts joined (by a space where the cut was a word space), tokens
    concatenated, confidence averaged."""
    if owner == list(range(n)):
        return res
    texts, tokens, confs = [""] * n, [[] for _ in range(n)], [[] for _ in range(n)]
    mins, agree = [1.0] * n, [None] * n
    for k, o in enumerate(owner):
        if res.texts[k]:
            texts[o] += (" " if texts[o] and spaced[k] else "") + res.texts[k]
        tokens[o] += res.tokens[k]
        if res.confidences and res.confidences[k] is not None:
            confs[o].append(res.confidences[k])
            mins[o] = min(mins[o], res.min_probs[k])
            if res.ctc_agree[k] is not None:
                agree[o] = res.ctc_agree[k] and agree[o] is not False
    scored = bool(res.confidences)
    return OCRResult(texts, res.stats,
                     [float(np.mean(c)) if c else 0.0 for c in confs] if scored else [], tokens,
                     mins if scored else [], agree if scored else [])


def token_logprobs(dec: Recording, inputs, tokens: list[list[int]], chunks) -> list[list[float]]:
    """Each piece's read tokens' log-probabilities: logged by the decoding forwards (`Recording`),
    or, for pieces a decoder read otherwise (block diffusion's noisy slots), from a teacher-forced
    pass of the causal model (`confidence`)."""
    out = [None] * len(tokens)
    for given, (bound, rows, _) in zip(inputs, chunks):
        logs = dec.logs_of(given) or [None] * len(rows)
        for log, i in zip(logs, rows):
            lp = None if log is None else log.logprobs
            out[i] = lp[:len(tokens[i])] if lp is not None and len(lp) >= len(tokens[i]) else None
        missing = [(j, i) for j, i in enumerate(rows) if out[i] is None]
        if missing:
            scored = confidence(bound.rows([j for j, _ in missing]), [tokens[i] for _, i in missing])
            for (_, i), lp in zip(missing, scored):
                out[i] = lp
    return out


def confidence(bound, new_tokens: list[list[int]]) -> list[list[float]]:
    """The log-probability the causal model gives each of each line's read tokens (one
    teacher-forced forward through the adapter, on a fresh cache)."""
    if not any(new_tokens):
        return [[] for _ in new_tokens]
    n = max(len(t) for t in new_tokens) + 1
    cache = bound.new_cache(len(new_tokens))
    dev = cache.valid.device
    pad = bound.config.pad_token_id
    ids = torch.tensor([[bound.start_token_id] + t + [pad] * (n - 1 - len(t)) for t in new_tokens],
                       dtype=torch.long, device=dev)
    with torch.no_grad():
        logp = bound(ids, torch.arange(n, device=dev).expand(len(new_tokens), n), cache, None).float().log_softmax(-1)
    return [logp[b, torch.arange(len(t), device=dev), torch.tensor(t, dtype=torch.long, device=dev)].tolist()
            for b, t in enumerate(new_tokens)]


def load_ocr(path: str | Path | None = None, batch_size: int = 32, threads: int | None = None, dtype=None) -> OCR:
    """The trained OCR model (document/weights/ocr-small), or the model in the folder `path`:
    our own (config.json + model.safetensors from `python -m document.train`) or a transformers
    VisionEncoderDecoder checkpoint with its tokenizer and image processor (TrOCR and the like,
    loaded offline from the folder). dtype: float32, bfloat16 or auto (suite.models.dtypes; None:
    the process default)."""
    import json

    from suite.models.dtypes import cast
    if threads is not None:
        torch.set_num_threads(threads)
    folder = Path(path or DEFAULT_WEIGHTS)
    cfg = folder / "config.json"
    if cfg.is_file() and json.loads(cfg.read_text()).get("model_type") == "vision-encoder-decoder":
        from .ved import VEDAdapter
        reader = VEDAdapter.load(folder)
        cast(reader.model, dtype)
        return OCR(reader, batch_size=batch_size)
    model = OCRModel.load(folder)
    calibration = load_calibration(folder)
    model.encoder.fold_batch_norms()          # reading only: no BatchNorm pass at run time
    cast(model, dtype)
    # no linear forms: GPT-2's Conv1D projections are x @ W already, only the LM head would swap;
    # ar 1.02x, ctc_speculative 1.04x (BENCHMARKS.md, forms on the OCR, TTS and ASR models)
    ocr = OCR(model, batch_size=batch_size)
    ocr.calibration = calibration          # document/confidence.py: what a line's confidence means
    return ocr
