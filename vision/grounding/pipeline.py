"""Box grounding: `grd = vision.load_grounding_pipeline(); res = grd(image, "the red circle")`.

The image is letterboxed to the model's square, the frozen MobileNetV2 runs once per image, and
the answer is decoded through suite's one decode loop with any box decoder (`ar`, `parallel_box`,
`hybrid`; several queries form one ragged batch). Boxes come back in the image's own pixels.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import suite
from suite.runtime.storage import read_json

from .data import MAX_BOXES
from .grammar import BoxGrammar
from .model import (EOS, NONE, TASKS, GroundingAdapter, GroundingModel, decode_rbox, feature_encoder,
                    parse_blocks, prompt_tokens)

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "grounding"
MAX_PIXELS = 40_000_000          # larger images are refused (downscale first)
MIN_SIDE = 8
MAX_QUERY_TOKENS = 24
# the CLI's, the Grounding tab's and the API's default: ar, the only lossless decoder with a measured speed
# here (hybrid reads at ar's Acc@0.5 at 1.95x but is lossy; locus is exact, its boxes/s not yet measured on
# a quiet machine: BENCHMARKS.md, Grounding)
DEFAULT_DECODER = "ar"

DECODERS = tuple(suite.list_decoders("grounding", chain=("ar",)))   # the box decoders and ar


@dataclass
class GroundingStats(suite.DecodeStats):
    """The batches' DecodeStats side by side (num_forwards: batched decoder forwards; row_forwards:
    each query's own decode steps, summed), with wall_time_s end to end (letterbox, MobileNetV2,
    decoding)."""
    num_queries: int = 0
    num_boxes: int = 0
    encoder_forwards: int = 0      # MobileNetV2 passes (one per batch of images)
    decode_time_s: float = 0.0     # the decode loop only

    @property
    def blocks(self) -> int:
        """Box blocks scored in parallel (parallel_box, hybrid)."""
        return self.events.get("box_blocks", 0)

    @property
    def fallbacks(self) -> int:
        """Of those, blocks re-decoded slot by slot (hybrid)."""
        return self.events.get("box_fallbacks", 0)

    @property
    def decode_boxes_per_second(self) -> float:
        return self.per_second(self.num_boxes, self.decode_time_s)

    @property
    def forwards_per_box(self) -> float:
        return self.row_forwards / max(self.num_boxes, 1)

    @property
    def boxes_per_second(self) -> float:
        return self.per_second(self.num_boxes)

    def add(self, other: "GroundingStats") -> None:
        self.add_beside(other)
        for f in ("num_queries", "num_boxes", "encoder_forwards", "decode_time_s"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def summary(self) -> str:
        return (f"{self.num_boxes} boxes for {self.num_queries} queries, {self.forwards_per_box:.2f} forwards/box, "
                f"{self.boxes_per_second:.1f} boxes/s" + (f", {self.fallbacks}/{self.blocks} blocks re-decoded AR"
                                                          if self.fallbacks else ""))


@dataclass
class GroundingResult:
    boxes: list[tuple[float, float, float, float]]   # aabb: (x0, y0, x1, y1); obb: (cx, cy, w, h); pixels
    scores: list[float]                              # mean slot probability under the causal model, per box
    stats: GroundingStats
    angles: list[float] | None = None                # obb: radians in [0, pi), clockwise in image coordinates
    query: str = ""
    task: str = "aabb"
    tokens: list[int] = field(default_factory=list)
    no_match: bool = False                           # the model answered "no match"

    def polygons(self) -> list[list[tuple[float, float]]]:
        """Each box as its 4 corners (pixels)."""
        from .model import rbox_corners
        if self.task == "obb":
            return [[tuple(p) for p in rbox_corners((*b, a))] for b, a in zip(self.boxes, self.angles)]
        return [[(x0, y0), (x1, y0), (x1, y1), (x0, y1)] for x0, y0, x1, y1 in self.boxes]


def load_image(image):
    """A PIL image, an (H, W[, C]) array or a path -> RGB PIL image; bad input is a clear error."""
    from PIL import Image
    if isinstance(image, (str, Path)):
        path = Path(image)
        if not path.is_file():
            raise ValueError(f"cannot read image {str(path)!r}: no such file; pass the path of a PNG/JPEG image")
        try:
            with Image.open(path) as im:
                if im.width * im.height > MAX_PIXELS:
                    raise ValueError(f"image {str(path)!r} is {im.width}x{im.height} pixels, more than "
                                     f"{MAX_PIXELS // 1_000_000} megapixels: downscale it first (e.g. PIL's Image.thumbnail)")
                img = im.convert("RGB")
        except ValueError:
            raise
        except Exception as e:      # PIL: UnidentifiedImageError, DecompressionBombError, truncated files
            raise ValueError(f"cannot read image {str(path)!r} ({type(e).__name__}: {e}); "
                             "pass a valid PNG/JPEG/BMP/TIFF/WebP file") from None
    elif isinstance(image, Image.Image):
        img = image
    elif isinstance(image, np.ndarray) and image.ndim in (2, 3) and image.size:
        arr = image if image.dtype == np.uint8 else np.clip(image * (255 if image.max() <= 1 else 1), 0, 255).astype(np.uint8)
        img = Image.fromarray(arr)
    else:
        raise ValueError(f"expected a PIL image, an (H, W[, C]) array or an image path, got {type(image).__name__}")
    if img.width < MIN_SIDE or img.height < MIN_SIDE:
        raise ValueError(f"image of {img.width}x{img.height} pixels is too small to ground anything in; "
                         f"pass an image at least {MIN_SIDE}x{MIN_SIDE} pixels")
    if img.width * img.height > MAX_PIXELS:
        raise ValueError(f"image of {img.width}x{img.height} pixels is more than {MAX_PIXELS // 1_000_000} "
                         "megapixels: downscale it first (e.g. PIL's Image.thumbnail)")
    return img.convert("RGB")


def letterbox(img, size: int) -> tuple[np.ndarray, float, float, float]:
    """RGB PIL image -> ((size, size, 3) uint8, scale, pad_x, pad_y): the image scaled to fit and
    centred on a canvas of its mean border colour; a model pixel p maps to p * scale - pad."""
    from PIL import Image
    side = max(img.width, img.height)
    arr = np.asarray(img)
    border = np.concatenate([arr[0], arr[-1], arr[:, 0], arr[:, -1]]).mean(0).astype(np.uint8)
    canvas = Image.new("RGB", (side, side), tuple(int(v) for v in border))
    px, py = (side - img.width) // 2, (side - img.height) // 2
    canvas.paste(img, (px, py))
    return np.asarray(canvas.resize((size, size), Image.BICUBIC), dtype=np.uint8), side / size, px, py


class GroundingPipeline:
    def __init__(self, model: GroundingModel, batch_size: int = 32, grammar: bool = True):
        self.grammar = grammar            # filter logits to the answer grammar (grammar.py), every decoder alike
        self.model = model.eval()
        self.tokenizer = model.tokenizer
        self.adapter = GroundingAdapter(model)
        self.encoder = feature_encoder()
        self.size = model.cfg["image_size"]
        self.batch_size = batch_size
        self._schedulers, self._lock = {}, threading.Lock()

    decoders = DECODERS
    default_decoder = DEFAULT_DECODER         # what `python -m vision.ground` runs without --decoder

    def __call__(self, image, query, decoder=DEFAULT_DECODER, task: str = "aabb", score: bool = True,
                 **options):
        """One image and one query -> GroundingResult; a list of images with a list of queries (or
        one query for all) -> a list of GroundingResults, decoded as ragged batches."""
        if isinstance(image, (list, tuple)):
            queries = list(query) if isinstance(query, (list, tuple)) else [query] * len(image)
            if len(queries) != len(image):
                raise ValueError(f"{len(image)} images but {len(queries)} queries: give one query per image, or one for all")
            return self.batch(list(image), queries, decoder, task, score, **options)
        return self.batch([image], [query], decoder, task, score, **options)[0]

    def check(self, query, task: str) -> list[int]:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: use 'aabb' (axis-aligned boxes) or 'obb' (oriented boxes)")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("empty query: say what to find, e.g. 'the red circle' or 'the face'")
        ids = prompt_tokens(self.tokenizer, query, task)
        if len(ids) - 3 > MAX_QUERY_TOKENS:
            raise ValueError(f"query of {len(ids) - 3} tokens is too long (at most {MAX_QUERY_TOKENS}); shorten it")
        return ids

    def decoder_for(self, decoder, options, task: str = "aabb"):
        """A decoder object from a name and options; hybrid's confidence floor defaults to the
        model config's per-task value (chosen on validation scenes by `vision.bench grounding --tune`)."""
        if isinstance(decoder, str):
            if decoder not in self.decoders:
                raise ValueError(f"unknown decoder {decoder!r}; for boxes use one of: {', '.join(self.decoders)}")
            floors = self.model.cfg.get("hybrid_confidence_floor", {})
            if decoder == "hybrid" and "confidence_floor" not in options and task in floors:
                options = {**options, "confidence_floor": floors[task]}
            return suite.make_decoder(decoder, **options)
        if options:
            raise ValueError("decoder options go into the decoder object when you pass one; drop " + ", ".join(options))
        return decoder

    def batch(self, images, queries, decoder=DEFAULT_DECODER, task="aabb", score=True,
              prior_tokens: list[list[int]] | None = None, **options) -> list[GroundingResult]:
        """prior_tokens: per image, a previous answer (`GroundingResult.tokens`, e.g. the last frame's
        of a video) that the `ngram_prior` decoder drafts from, verified (exact with greedy decoding)."""
        prompts = [self.check(q, task) for q in queries]
        if prior_tokens is not None and len(prior_tokens) != len(images):
            raise ValueError(f"prior_tokens has {len(prior_tokens)} entries for {len(images)} images; give one per image")
        dec = self.decoder_for(decoder, options, task)
        pil = [load_image(im) for im in images]
        results = []
        for lo in range(0, len(pil), self.batch_size):
            priors = None if prior_tokens is None else prior_tokens[lo:lo + self.batch_size]
            results += self._run(pil[lo:lo + self.batch_size], queries[lo:lo + self.batch_size],
                                 prompts[lo:lo + self.batch_size], dec, task, score, priors)
        return results

    def scheduler(self, task: str):
        """The box decoder's suite.scheduler.Scheduler for `task` (its stepping thread starts on the
        first query): every query is a request of its own, so concurrent calls (the Grounding tab's
        users) share forwards and a batch's rows leave as their answers end."""
        with self._lock:
            if task not in self._schedulers:
                from suite.scheduler import Scheduler
                adapter = GroundingAdapter(self.model, task=task)
                self._schedulers[task] = Scheduler(BoxGrammar(adapter) if self.grammar else adapter,
                                                   max_rows=self.batch_size, name=f"scheduler grounding {task}")
            return self._schedulers[task]

    def _run(self, images, queries, prompts, dec, task, score, priors=None) -> list[GroundingResult]:
        t0 = time.perf_counter()
        boxed = [letterbox(im, self.size) for im in images]
        pixels = torch.from_numpy(np.stack([b[0] for b in boxed])).to(self.encoder.mean.device)   # once, to the encoder
        feats = self.encoder(pixels)                                                   # (B, S, F)
        bound = self.adapter.for_images(feats, task)
        new_tokens, decoded = self._decode(bound, prompts, dec, task, priors)
        wall = time.perf_counter() - t0
        scores = self._scores(bound, prompts, new_tokens) if score else [None] * len(prompts)
        out = []
        for b, toks in enumerate(new_tokens):
            out.append(self._result(toks, scores[b], boxed[b][1:], task, queries[b]))
        stats = GroundingStats(num_queries=len(prompts), num_boxes=sum(len(r.boxes) for r in out), encoder_forwards=1,
                               decode_time_s=decoded.wall_time_s)
        stats.add_beside(decoded)
        stats.wall_time_s = wall
        for r in out:                      # every result carries its batch's totals
            r.stats = stats
        return out

    def _decode(self, bound, prompts, dec, task, priors) -> tuple[list[list[int]], suite.DecodeStats]:
        """Each query a request of the task's scheduler, bound to its image's encoder states (and its
        prompt length, under the grammar); its new tokens and the queries' stats together (forwards:
        those they shared, counted once)."""
        # a prior answer drafts as the continuation of its prompt (the n-gram lookup's key)
        sched, requests = self.scheduler(task), []
        try:
            for b, prompt in enumerate(prompts):
                rows = bound.rows([b])
                inputs = None if priors is None else suite.RequestInputs(prior_tokens=(list(prompt) + list(priors[b]),))
                requests.append(sched.request([list(prompt)], decoder=dec, max_new_tokens=MAX_BOXES * TASKS[task][1] + 1,
                                              eos_token_id=[EOS, NONE], inputs=inputs,
                                              bound=BoxGrammar(rows, [len(prompt)]) if self.grammar else rows))
            results = [r.result() for r in sched.enqueue(requests)]
        except BaseException:
            for r in requests:
                r.cancel()
            raise
        stats = suite.DecodeStats.beside([r.stats for r in results])
        stats.num_forwards = len({f for r in requests for f in r.forward_ids})
        return [r.new_tokens[0] for r in results], stats

    def _result(self, toks, slot_scores, geometry, task, query) -> GroundingResult:
        scale, px, py = geometry
        boxes, angles, scores = [], [], []
        for k, (vals, ok) in enumerate(parse_blocks(toks, task)):
            if not ok:
                continue                  # a malformed block (lossy decoders) is dropped
            if task == "aabb":
                x0, y0, x1, y1 = (v * self.size * scale for v in vals)
                if x1 <= x0 or y1 <= y0:
                    continue
                boxes.append((x0 - px, y0 - py, x1 - px, y1 - py))
            else:
                cx, cy, w, h, th = decode_rbox(vals, self.size)
                boxes.append((cx * scale - px, cy * scale - py, w * scale, h * scale))
                angles.append(th)
            scores.append(slot_scores[k] if slot_scores is not None and k < len(slot_scores) else float("nan"))
        return GroundingResult(boxes, scores, None, angles if task == "obb" else None, query, task, toks,
                               no_match=bool(toks) and toks[0] == NONE)

    def _scores(self, bound, prompts, new_tokens) -> list[list[float]]:
        """Per box, the mean confidence the causal model gives its slots (one teacher-forced
        forward; a coordinate's confidence is the mass within 15 grid values of it)."""
        from suite.decoders.boxes.parallel_box import BoxLayout, slot_confidence
        layout = BoxLayout.of(bound)
        seqs = [p + t for p, t in zip(prompts, new_tokens)]
        n = max(len(s) for s in seqs)
        dev = bound.encoder_states.device
        ids = torch.tensor([s + [0] * (n - len(s)) for s in seqs], dtype=torch.long, device=dev)
        mask = torch.ones(n, n, dtype=torch.bool, device=dev).tril().expand(len(seqs), 1, n, n)
        with torch.no_grad():
            logits = self.model.decoder_logits(ids, torch.arange(n, device=dev).expand(len(seqs), n), mask,
                                               bound.encoder_states)
        block = layout.block_size
        out = []
        for b, (p, t) in enumerate(zip(prompts, new_tokens)):
            if not t:
                out.append([])
                continue
            conf = slot_confidence(logits[b, len(p) - 1:len(p) - 1 + len(t)], t, layout, 15)
            out.append([sum(conf[k:k + block]) / block for k in range(0, len(conf) - block + 1, block)])
        return out


def load_grounding_pipeline(path: str | Path | None = None, batch_size: int = 32, threads: int | None = None,
                            grammar: bool = True, dtype=None):
    """The trained grounding model (vision/weights/grounding unless `path` names another folder);
    grammar=False lets the model break the block layout (malformed blocks are then dropped). A
    folder of a transformers family (Florence-2, PaliGemma, Kosmos-2: its config.json names a
    model_type) loads through vision.hf_grounding. dtype: float32, bfloat16 or auto for our model
    (suite.models.dtypes; None: the process default)."""
    from suite.models.dtypes import cast
    if threads is not None:
        torch.set_num_threads(threads)
    config = Path(path or DEFAULT_WEIGHTS) / "config.json"
    if config.is_file() and "model_type" in read_json(config):
        from ..hf_grounding import load_hf_grounding
        return load_hf_grounding(path)
    model = GroundingModel.load(path or DEFAULT_WEIGHTS)
    cast(model, dtype)
    return GroundingPipeline(model, batch_size=batch_size, grammar=grammar)
