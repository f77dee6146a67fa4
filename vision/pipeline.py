"""Class-conditional image generation: VQ tokenizer + AR prior, decoded through `suite`.

    pipe = vision.load_image_pipeline()
    res = pipe(["circle", 3], decoder="zipar", guidance_scale=2.0, seed=0)
    res.images (PIL), res.tokens (B, H, W), res.stats
    for step in pipe.stream(["star"], decoder="sjd"):
        step.images   # partial pictures: grey where no token exists yet
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

import suite

from .data import to_uint8
from .prior import ImagePrior
from .tokenizer import VQTokenizer

DEFAULT_WEIGHTS = os.path.join(os.path.dirname(__file__), "weights")
DECODERS = tuple(suite.list_decoders("image", chain=("ar", "sjd", "mc_sjd")))   # jacobi is greedy only
IMAGE_DEFAULTS = {"sjd": {"init": "left"}, "mc_sjd": {"init": "left"}}   # left-neighbour drafts
# the CLI's and the Image tab's default: the lossless sjd/mc_sjd take 3.6x fewer forwards; on a CPU they run
# about 2.2x ar's wall speed for one image but 0.6-0.7x for a batch of ten, and zipar is faster but lossy
# (BENCHMARKS.md, Images)
DEFAULT_DECODER = "ar"


@dataclass
class ImageResult:
    images: list                     # PIL images
    tokens: torch.Tensor             # (B, H, W) codes
    labels: list[int]
    stats: suite.DecodeStats
    settings: dict = field(default_factory=dict)


@dataclass
class ImageStep:
    index: int
    images: list | None              # partial PIL images (grey where nothing is generated yet); None: not asked
    known: torch.Tensor              # (B, H, W) bool: generated cells
    stats: suite.DecodeStats         # a snapshot at this step (its own object)
    done: bool
    tokens: torch.Tensor | None = None   # (B, H, W) codes, 0 where `known` is False


class PriorSchedulers:
    """The suite.scheduler.Scheduler of a prior, one for requests guided by classifier-free guidance
    (each request's null prompt and scale travel in its rows' cache, so any scales share forwards)
    and one for unguided ones, each started by its first request: concurrent calls (a tab's users,
    a batch script's threads) share forwards, and each gets what it would get alone."""

    def __init__(self, prior, max_rows: int = 32):
        self.prior, self.max_rows = prior, max_rows
        self._schedulers: dict[bool, object] = {}
        self._lock = threading.Lock()

    def submit(self, prompt: torch.Tensor, null: torch.Tensor, guidance_scale: float, **kwargs):
        """Queue the request of `prompt` (B, P) (null: its unconditional prompt, same shape); the
        arguments of `Scheduler.submit` in kwargs. A bad option raises here."""
        guided = guidance_scale != 1.0
        bound = suite.ClassifierFreeGuidance(self.prior, guidance_scale, null) if guided else None
        with self._lock:
            if guided not in self._schedulers:
                from suite.scheduler import Scheduler
                self._schedulers[guided] = Scheduler(bound or self.prior, max_rows=self.max_rows,
                                                     name=f"scheduler {type(self.prior).__name__}")
            scheduler = self._schedulers[guided]
        return scheduler.submit(prompt, bound=bound, **kwargs)


class ImagePipeline:
    def __init__(self, tokenizer: VQTokenizer, prior: ImagePrior):
        self.tokenizer, self.prior = tokenizer, prior
        if tokenizer.codebook_size != prior.codebook_size:
            raise ValueError(f"tokenizer has {tokenizer.codebook_size} codes but the prior {prior.codebook_size}: "
                             "retrain the prior on this tokenizer (`python -m vision.train prior`)")
        self.schedulers = PriorSchedulers(prior)

    @property
    def classes(self) -> list[str]:
        return list(self.prior.config.extra["classes"])

    @property
    def grid(self) -> tuple[int, int]:
        return self.prior.grid

    @property
    def decoders(self) -> tuple[str, ...]:
        """The registered decoders this pipeline runs: the image ones and the chain decoders that sample."""
        return tuple(n for n in DECODERS if all(self.prior.capabilities.has(c)
                                                for c in suite.DECODERS[n].requires))

    def label_ids(self, labels: Sequence) -> list[int]:
        """Class names or ids -> ids; unknown ones are a ValueError listing the valid names."""
        if isinstance(labels, (str, int)):
            labels = [labels]
        if len(labels) == 0:
            raise ValueError("give at least one label (a class name or id)")
        ids = []
        for x in labels:
            if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < len(self.classes):
                ids.append(int(x))
            elif isinstance(x, str) and x in self.classes:
                ids.append(self.classes.index(x))
            elif isinstance(x, str) and x.isdigit() and int(x) < len(self.classes):
                ids.append(int(x))
            else:
                raise ValueError(f"unknown class {x!r}; choose a name or id 0..{len(self.classes) - 1}: "
                                 + ", ".join(self.classes))
        return ids

    def _submit(self, labels, decoder, guidance_scale, temperature, top_k, top_p, seed, grid, options,
                stream: bool = False):
        """The request of `labels`, queued on the prior's scheduler, its class ids and settings; None
        settings take the prior's shipped defaults (`default_sampling`)."""
        defaults = default_sampling(self)
        guidance_scale = defaults["guidance_scale"] if guidance_scale is None else guidance_scale
        temperature = defaults["temperature"] if temperature is None else temperature
        top_k = defaults["top_k"] if top_k is None else top_k
        if guidance_scale < 0:
            raise ValueError(f"guidance_scale must be >= 0 (1 = no guidance, 2-4 typical), got {guidance_scale}")
        if grid is not None and tuple(grid) != tuple(self.grid):
            raise ValueError(f"the prior was trained for a {self.grid[0]}x{self.grid[1]} token grid, not "
                             f"{grid[0]}x{grid[1]}; pass grid=None or train a prior for that grid")
        ids = self.label_ids(labels)
        prompt = torch.tensor([[self.prior.class_token(i)] for i in ids], device=self.prior.device)   # (B, 1)
        null = torch.full_like(prompt, self.prior.config.extra["null_class_id"])
        if isinstance(decoder, str):
            options = {**IMAGE_DEFAULTS.get(decoder, {}), **options}
            if options.get("init") in ("prompt", "repeat"):
                raise ValueError(f"init={options['init']!r} would draft the class token as an image code; "
                                 "use init='left' (the left neighbour) for images")
        h, w = self.grid
        request = self.schedulers.submit(prompt, null, guidance_scale, decoder=decoder, max_new_tokens=h * w,
                                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                         stream=stream, **options)
        settings = {"labels": [self.classes[i] for i in ids], "decoder": request.decoder.name,
                    "decoder_options": _plain(request.decoder), "guidance_scale": guidance_scale,
                    "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed, "grid": [h, w]}
        return ids, request, settings

    def check(self, decoder: str, **options) -> None:
        """ValueError naming the fix when `decoder` would refuse these option values (a batch job checks
        them before its first image: suite.runtime.options.check_values)."""
        from suite.runtime.options import check_values
        h, w = self.grid
        check_values(self.prior, [[self.prior.class_token(0)]], decoder, h * w,
                     **{**IMAGE_DEFAULTS.get(decoder, {}), **options})

    def __call__(self, labels, decoder=DEFAULT_DECODER, guidance_scale: float | None = None, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, seed: int = 0, grid=None,
                 **decoder_options) -> ImageResult:
        ids, request, settings = self._submit(labels, decoder, guidance_scale, temperature, top_k, top_p, seed,
                                              grid, decoder_options)
        result = request.result()
        tokens = torch.tensor(result.new_tokens, device=self.prior.device).reshape(-1, *self.grid)
        return ImageResult(self.decode_tokens(tokens), tokens, ids, result.stats, settings)

    def stream(self, labels, decoder=DEFAULT_DECODER, guidance_scale: float | None = None, temperature: float | None = None,
               top_k: int | None = None, top_p: float | None = None, seed: int = 0, grid=None, pictures: bool = True,
               **decoder_options) -> Iterator[ImageStep]:
        """Yield partial images after every forward of the request (the scheduler's steps, as __call__);
        pictures=False: the steps' codes only (`images` None: no decode per step)."""
        _, request, _ = self._submit(labels, decoder, guidance_scale, temperature, top_k, top_p, seed, grid,
                                     decoder_options, stream=True)
        shown = [[] for _ in range(request.batch)]       # each row's committed tokens, or its canvas
        try:
            for step in request.steps():
                for b, new in enumerate(step.committed):
                    if step.canvas_tokens is None:
                        shown[b] = shown[b] + new
                    elif step.canvas_tokens[b] is not None:    # a row that left keeps its last canvas
                        shown[b] = step.canvas_tokens[b]
                tokens, known = self._partial(shown)
                images = self.decode_tokens(tokens, known) if pictures else None
                yield ImageStep(step.index, images, known, step.stats.snapshot(), all(step.done), tokens)
        finally:
            if not request.done:        # the reader left early (closed the stream): free the rows
                request.cancel()

    def _partial(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, H, W) tokens with 0 where unknown, and the (B, H, W) known mask, of each row's raster
        prefix or canvas (-1 where unknown: decoders that fill the grid out of order, e.g. zipar)."""
        h, w = self.grid
        flat = torch.tensor([list(r) + [-1] * (h * w - len(r)) for r in rows], dtype=torch.long,
                            device=self.prior.device).reshape(len(rows), h * w)     # built on the host, sent once
        known = flat >= 0
        return flat.clamp(min=0).reshape(-1, h, w), known.reshape(-1, h, w)

    def decode_tokens(self, tokens: torch.Tensor, known: torch.Tensor | None = None) -> list:
        """(B, H, W) codes -> PIL images; cells outside `known` are painted grey."""
        from PIL import Image
        pixels = self.tokenizer.decode(tokens)                       # (B, 3, H*f, W*f)
        if known is not None:
            f = self.tokenizer.factor
            m = known.to(pixels.device).repeat_interleave(f, 1).repeat_interleave(f, 2)[:, None]
            pixels = torch.where(m, pixels, torch.zeros_like(pixels))
        return [Image.fromarray(a) for a in to_uint8(pixels)]


def _plain(dec) -> dict:
    import dataclasses
    out = {}
    for f in dataclasses.fields(dec):
        v = getattr(dec, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)
    return out


def load_image_pipeline(weights: str | None = None, dtype=None) -> ImagePipeline:
    """The embedded tokenizer + prior from `weights` (default: vision/weights/), offline; the prior
    in `dtype` (float32, bfloat16 or auto: suite.models.dtypes; None: the process default), its
    linear layers swapped to this CPU's fastest per-width forms (suite.models.linear_forms)."""
    from suite.models.dtypes import cast
    from suite.models.linear_forms import swap_linears
    root = weights or DEFAULT_WEIGHTS
    if not os.path.isdir(root):
        raise ValueError(f"weights folder {root} does not exist; train with `python -m vision.train tokenizer` "
                         "and `python -m vision.train prior`")
    tokenizer = VQTokenizer.load(os.path.join(root, "tokenizer"))
    prior = ImagePrior.load(os.path.join(root, "prior"))
    cast(prior.model, dtype)
    swap_linears(prior.model)   # ar 1.16x on 2 labels, the same tokens (BENCHMARKS.md, dtype across the suite)
    return ImagePipeline(tokenizer, prior)


SAMPLING_DEFAULTS = {"guidance_scale": 3.0, "temperature": 1.0, "top_k": None}


def default_sampling(pipe: ImagePipeline) -> dict:
    """The sampling settings shipped with the prior (image_prior.json "sampling"), else the defaults."""
    return {**SAMPLING_DEFAULTS, **pipe.prior.meta.get("sampling", {})}
