"""Class- and motion-conditional video generation: per-frame VQ codes + the AR video prior,
decoded through `suite`.

    pipe = vision.load_video_pipeline()
    res = pipe(["star"], motion="left", num_frames=8, decoder="diagonal", seed=0)
    res.frames (PIL), res.codes (T, H, W), res.stats; res.save("star.mp4"); res.save("star.gif")
    for frame in pipe.stream(["star", "ring"], motion="grow"):
        frame.clip, frame.index, frame.image      # each frame as soon as its last code is decided

Decoder names: every registered one that samples ("ar", "sjd", "mc_sjd", ...), "diagonal"
(frames pipelined, exact), "video_zipar_sjd" (diagonal + speculative drafts from the previous
frame inside each row, lossless), "video_zipar" (and its alias "zipar": rows inside a frame as
ZipAR, lossy). sjd and mc_sjd draft each new frame from the previous one (init="frame").

first_frame="image" (`__call__` and `stream`; "auto", the default, where the pipeline has an image prior
of its classes and grid): the image prior (weights/prior, the same tokenizer and classes) draws frame 0
and the video prior continues from it, its codes in the prompt. Frame 0 is where the video prior loses
most of its class likeness (weights/video/README.md); the image prior draws its class far more often.
Frame 0 is decoded with `ar` (lossless video decoders: the clip is still exactly `ar`'s) or `zipar`
(under the lossy `video_zipar`). first_frame="video": the video prior draws every frame.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch

import suite

from ..data import to_uint8
from ..pipeline import ImagePipeline, PriorSchedulers
from ..prior import ImagePrior
from ..tokenizer import VQTokenizer
from .prior import SAMPLING, VideoPrior

DEFAULT_WEIGHTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "weights")
VIDEO_DEFAULTS = {"sjd": {"init": "frame", "window": 16}, "mc_sjd": {"init": "frame", "window": 16}}
ALIASES = {"zipar": "video_zipar"}     # the image name for the 3-D decoder
# the CLI's and the Video tab's: the fastest lossless video decoder measured (BENCHMARKS.md, Video: diagonal 2.83x ar's
# wall time (3.19x with the 1-D weights), 5.36x fewer forwards, greedy equal to ar and sampling in distribution)
DEFAULT_DECODER = "diagonal"
FIRST_FRAMES = ("auto", "image", "video")    # who draws frame 0: auto = the image prior where there is one
FIRST_FRAME_DECODER = {"video_zipar": "zipar"}     # the image decoder of frame 0 (others: ar)


def first_frame_decoder(decoder) -> str:
    """The image decoder that draws frame 0 under the video decoder `decoder` (zipar under video_zipar, else ar)."""
    return FIRST_FRAME_DECODER.get(ALIASES.get(decoder, decoder), "ar") if isinstance(decoder, str) else "ar"


def video_decoder(name: str, **options):
    """A registered decoder by name (aliases: "zipar" is video_zipar), with the video defaults."""
    name = ALIASES.get(name, name)
    return suite.make_decoder(name, **{**VIDEO_DEFAULTS.get(name, {}), **options})


@dataclass
class VideoResult:
    clips: list                       # per prompt: a list of PIL frames
    tokens: torch.Tensor              # (B, T, H, W) codes
    labels: list[int]
    motions: list[int]
    stats: suite.DecodeStats
    settings: dict = field(default_factory=dict)

    def _one(self, what: str):
        if len(self.clips) != 1:
            raise ValueError(f"res.{what} is for one clip; this result holds {len(self.clips)}: "
                             "use res.clips[i] and res.tokens[i]")

    @property
    def frames(self) -> list:
        """The PIL frames of a one-clip result."""
        self._one("frames")
        return self.clips[0]

    @property
    def codes(self) -> torch.Tensor:
        """The (T, H, W) codes of a one-clip result."""
        self._one("codes")
        return self.tokens[0]

    def save(self, path: str, fps: float = 8.0, scale: int = 4) -> list[str]:
        """Write the clip(s) to `path` (.mp4: H.264, or .gif), each frame enlarged `scale` times; a
        batch writes path-0.mp4, path-1.mp4, ... Returns the paths written."""
        from .io import write_video
        if len(self.clips) == 1:
            return [write_video(path, self.clips[0], fps, scale)]
        stem, ext = os.path.splitext(path)
        return [write_video(f"{stem}-{i}{ext}", clip, fps, scale) for i, clip in enumerate(self.clips)]


@dataclass
class VideoFrame:
    clip: int                         # which prompt of the batch
    index: int                        # frame number t
    image: object                     # PIL image
    codes: torch.Tensor               # (H, W)
    forward: int                      # forwards done when the frame was complete
    stats: suite.DecodeStats          # a snapshot of the request's totals at this frame (its own object)
    decided_at: torch.Tensor | None = None   # (H, W) the forward (1-based) that decided each code


def name_ids(values, names: list[str], kind: str) -> list[int]:
    """Names or ids -> ids; unknown ones are a ValueError listing the valid names."""
    ids = []
    for x in values:
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < len(names):
            ids.append(int(x))
        elif isinstance(x, str) and (x in names or x.isdigit() and int(x) < len(names)):
            ids.append(names.index(x) if x in names else int(x))
        else:
            raise ValueError(f"unknown {kind} {x!r}; choose a name or id 0..{len(names) - 1}: " + ", ".join(names))
    return ids


def check_num_frames(num_frames, max_frames: int) -> None:
    whole = isinstance(num_frames, (int, np.integer)) and not isinstance(num_frames, bool)
    if not whole or not 1 <= num_frames <= max_frames:
        raise ValueError(f"num_frames must be 1..{max_frames} (the prior was trained on "
                         f"{max_frames}-frame clips), got {num_frames!r}")


DECODERS = ("ar", "sjd", "mc_sjd") + tuple(suite.list_decoders("video", chain=()))


class VideoPipeline:
    decoders = DECODERS

    def __init__(self, tokenizer: VQTokenizer, prior: VideoPrior, image_prior: ImagePrior | None = None):
        self.tokenizer, self.prior = tokenizer, prior
        if tokenizer.codebook_size != prior.codebook_size:
            raise ValueError(f"tokenizer has {tokenizer.codebook_size} codes but the video prior {prior.codebook_size}: "
                             "retrain the prior on this tokenizer (`python -m vision.video.train prior`)")
        self.schedulers = PriorSchedulers(prior)
        self.image = ImagePipeline(tokenizer, image_prior) if image_prior is not None else None

    @property
    def classes(self) -> list[str]:
        return list(self.prior.config.extra["classes"])

    @property
    def motions(self) -> list[str]:
        return list(self.prior.config.extra["motions"])

    @property
    def max_frames(self) -> int:
        return self.prior.layout.frames

    def prompt_ids(self, labels, motion) -> tuple[list[int], list[int]]:
        """Class and motion ids per clip; one motion for all, or one per label."""
        labels = [labels] if isinstance(labels, (str, int, np.integer)) else list(labels)
        if not labels:
            raise ValueError("give at least one label (a class name or id)")
        motions = [motion] * len(labels) if isinstance(motion, (str, int, np.integer)) else list(motion)
        if len(motions) != len(labels):
            raise ValueError(f"give one motion, or one per label: got {len(motions)} for {len(labels)} labels")
        return name_ids(labels, self.classes, "class"), name_ids(motions, self.motions, "motion")

    def _submit(self, labels, motion, num_frames, decoder, guidance_scale, temperature, top_k, top_p, seed, options,
                stream: bool = False, first: torch.Tensor | None = None):
        """The request of the clips, queued on the prior's scheduler, their class and motion ids and
        settings; None settings take the prior's shipped sampling."""
        s = {**SAMPLING, **self.prior.meta.get("sampling", {})}
        guidance_scale = s["guidance_scale"] if guidance_scale is None else guidance_scale
        temperature = s["temperature"] if temperature is None else temperature
        top_k = s["top_k"] if top_k is None else top_k
        if guidance_scale < 0:
            raise ValueError(f"guidance_scale must be >= 0 (1 = no guidance, 2-3 typical), got {guidance_scale}")
        check_num_frames(num_frames, self.max_frames)
        ids, motions = self.prompt_ids(labels, motion)
        lay = self.prior.layout
        dev = self.prior.device
        prompt = torch.tensor([lay.prompt(c, m) for c, m in zip(ids, motions)], device=dev)        # (B, 2)
        null = torch.tensor([[lay.null_motion, lay.null_class]] * len(ids), device=dev)
        if first is not None:               # frame 0 given: the prompt holds its codes, the prior draws the rest
            prompt, null = torch.cat([prompt, first], 1), torch.cat([null, first], 1)
            num_frames -= 1
        dec = video_decoder(decoder, **options) if isinstance(decoder, str) else decoder
        request = self.schedulers.submit(prompt, null, guidance_scale, decoder=dec, stream=stream,
                                         max_new_tokens=num_frames * lay.cells, temperature=temperature,
                                         top_k=top_k, top_p=top_p, seed=seed)
        settings = {"labels": [self.classes[i] for i in ids], "motions": [self.motions[m] for m in motions],
                    "num_frames": num_frames, "decoder": request.decoder.name, "guidance_scale": guidance_scale,
                    "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
        return ids, motions, request, settings

    def first_frame_of(self, first_frame: str) -> str:
        """Who draws frame 0, "image" or "video", for `first_frame` ("auto": the image prior where this
        pipeline has one of its classes and grid); ValueError naming the fix where it cannot be as asked."""
        if first_frame not in FIRST_FRAMES:
            raise ValueError(f"unknown first_frame {first_frame!r}; choose one of: {', '.join(FIRST_FRAMES)}")
        if first_frame == "auto":
            return "image" if self.image is not None and self._image_fits() else "video"
        if first_frame == "image" and self.image is None:
            raise ValueError("first_frame='image' needs the image prior (weights/prior, trained with "
                             "`python -m vision.train prior`); or use first_frame='video'")
        if first_frame == "image" and not self._image_fits():
            raise ValueError("first_frame='image' needs an image prior of the video prior's classes and grid; "
                             "or use first_frame='video'")
        return first_frame

    def _image_fits(self) -> bool:
        return self.image.classes == self.classes and self.image.grid == (self.prior.layout.height,
                                                                         self.prior.layout.width)

    def check(self, decoder: str, **options) -> None:
        """ValueError naming the fix when `decoder` would refuse these option values (a batch job checks
        them before its first clip: suite.runtime.options.check_values)."""
        from suite.runtime.options import check_values
        lay = self.prior.layout
        check_values(self.prior, [lay.prompt(0, 0)], video_decoder(decoder, **options), lay.cells)

    def __call__(self, labels, motion="right", num_frames: int | None = None, decoder=DEFAULT_DECODER,
                 guidance_scale: float | None = None, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0, first_frame: str = "auto",
                 **decoder_options) -> VideoResult:
        num_frames = self.max_frames if num_frames is None else num_frames
        first_frame = self.first_frame_of(first_frame)
        check_num_frames(num_frames, self.max_frames)
        ids, motions = self.prompt_ids(labels, motion)         # bad input fails before any forward
        first = self._first_frames(first_frame, ids, decoder, guidance_scale, temperature, top_k, top_p, seed)
        lay = self.prior.layout
        if first is not None and num_frames == 1:
            tokens, stats = first.tokens[:, None], first.stats
            keys = ("decoder", "guidance_scale", "temperature", "top_k", "top_p", "seed")
            settings = {"labels": [self.classes[i] for i in ids], "motions": [self.motions[m] for m in motions],
                        "num_frames": 1, **{k: first.settings[k] for k in keys}}
        else:
            ids, motions, request, settings = self._submit(
                labels, motion, num_frames, decoder, guidance_scale, temperature, top_k, top_p, seed, decoder_options,
                first=None if first is None else first.tokens.reshape(len(first.labels), -1))
            result = request.result()
            tokens = torch.tensor(result.new_tokens, device=self.prior.device).reshape(
                len(ids), -1, lay.height, lay.width)
            stats = result.stats
            if first is not None:
                tokens = torch.cat([first.tokens[:, None].to(tokens.device), tokens], 1)
                stats = first.stats.then(stats)
                settings["num_frames"] = num_frames
        settings["first_frame"] = first_frame
        return VideoResult([self.decode_frames(t) for t in tokens], tokens, ids, motions, stats, settings)

    def _first_frames(self, first_frame, ids, decoder, guidance_scale, temperature, top_k, top_p, seed):
        """The image prior's frames 0 of classes `ids` (an ImageResult) for first_frame="image", None for
        "video"."""
        if self.first_frame_of(first_frame) == "video":
            return None
        return self.image(ids, decoder=first_frame_decoder(decoder), guidance_scale=guidance_scale,
                          temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)

    def stream(self, labels, motion="right", num_frames: int | None = None, decoder=DEFAULT_DECODER,
               guidance_scale: float | None = None, temperature: float | None = None, top_k: int | None = None,
               top_p: float | None = None, seed: int = 0, first_frame: str = "auto",
               **decoder_options) -> Iterator[VideoFrame]:
        """Yield each frame as soon as all its codes are committed (the scheduler's steps, as __call__;
        frames of a batch and, with `diagonal`, of one clip complete at different forwards), with
        the forward that decided each of its codes (decoders that fill cells out of order, such as
        video_zipar, decide a code when it lands on their canvas, before the frame is complete).
        first_frame as in __call__: frames 0 from the image prior come first, the forwards and stats of
        the later frames counted on from theirs."""
        num_frames = self.max_frames if num_frames is None else num_frames
        check_num_frames(num_frames, self.max_frames)
        ids, _ = self.prompt_ids(labels, motion)              # bad input fails before any forward
        dec = video_decoder(decoder, **decoder_options) if isinstance(decoder, str) else decoder
        first = None
        if self.first_frame_of(first_frame) == "image":
            first = yield from self._stream_first_frames(ids, decoder, guidance_scale, temperature, top_k, top_p,
                                                         seed)
            if num_frames == 1:
                return
        _, _, request, settings = self._submit(
            labels, motion, num_frames, dec, guidance_scale, temperature, top_k, top_p, seed, {}, stream=True,
            first=None if first is None else first[0].reshape(len(ids), -1))
        yield from self._stream_request(request, settings["num_frames"], first)

    def _stream_first_frames(self, ids, decoder, guidance_scale, temperature, top_k, top_p, seed):
        """Frames 0 of clips `ids` from the image prior, each yielded once complete; returns their (B, H, W)
        codes and the image request's stats."""
        decided = None
        step = None
        for step in self.image.stream(ids, decoder=first_frame_decoder(decoder), guidance_scale=guidance_scale,
                                      temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, pictures=False):
            decided = torch.zeros_like(step.tokens) if decided is None else decided
            decided[step.known & (decided == 0)] = step.index
            for b in range(len(ids)):
                if step.known[b].all() and (decided[b] == step.index).any():     # complete at this step
                    yield VideoFrame(b, 0, self.decode_frames(step.tokens[b][None])[0], step.tokens[b], step.index,
                                     step.stats, decided[b].clone())
        return step.tokens, step.stats

    def _stream_request(self, request, num_frames: int, first=None) -> Iterator[VideoFrame]:
        """The frames of a queued streaming request, as they complete; after `first` (frames 0 drawn by the
        image prior: their codes and stats) the frame numbers, forwards and stats continue theirs."""
        cells, h, w = self.prior.layout.cells, self.prior.layout.height, self.prior.layout.width
        dev = self.prior.device
        skip, before = (0, None) if first is None else (1, first[1])
        offset = 0 if before is None else before.num_forwards
        new = [[] for _ in range(request.batch)]
        shown = [0] * request.batch
        decided = torch.zeros(request.batch, num_frames * cells, dtype=torch.long, device=dev)
        try:
            for step in request.steps():
                for b, tokens in enumerate(step.committed):
                    new[b] += tokens
                decided[self._known(step, new, decided.shape[1]) & (decided == 0)] = offset + step.index
                for b in range(request.batch):
                    while shown[b] < len(new[b]) // cells:
                        t = shown[b]
                        codes = torch.tensor(new[b][t * cells:(t + 1) * cells], device=dev).reshape(h, w)
                        stats = step.stats.snapshot() if before is None else before.then(step.stats)
                        yield VideoFrame(b, t + skip, self.decode_frames(codes[None])[0], codes, offset + step.index,
                                         stats, decided[b, t * cells:(t + 1) * cells].reshape(h, w).clone())
                        shown[b] += 1
        finally:
            if not request.done:        # the reader left early (closed the stream): free the rows
                request.cancel()

    def _known(self, step, new: list[list[int]], size: int) -> torch.Tensor:
        """(B, T*H*W) bool: the codes decided so far (a canvas decoder's cells, else the committed
        prefix; a row that left the batch: its committed clip)."""
        canvases = step.canvas_tokens or [None] * len(new)
        rows = [c if c is not None else n + [-1] * (size - len(n)) for c, n in zip(canvases, new)]
        return torch.tensor(rows, device=self.prior.device) >= 0

    def decode_frames(self, codes: torch.Tensor) -> list:
        """(T, H, W) codes -> T PIL frames."""
        from PIL import Image
        pixels = torch.cat([self.tokenizer.decode(codes[i:i + 64]) for i in range(0, len(codes), 64)])
        return [Image.fromarray(a) for a in to_uint8(pixels)]


def load_video_pipeline(weights: str | None = None, dtype=None) -> VideoPipeline:
    """The embedded tokenizer (weights/tokenizer) + video prior (weights/video/prior), offline; the
    prior in `dtype` (float32, bfloat16 or auto: suite.models.dtypes; None: the process default)."""
    from suite.models.dtypes import cast
    root = weights or DEFAULT_WEIGHTS
    if not os.path.isdir(root):
        raise ValueError(f"weights folder {root} does not exist; train with `python -m vision.train tokenizer` "
                         "and `python -m vision.video.train prior`")
    tokenizer = VQTokenizer.load(os.path.join(root, "tokenizer"))
    prior = VideoPrior.load(os.path.join(root, "video", "prior"))
    cast(prior.model, dtype)
    image_prior = None
    if os.path.isdir(os.path.join(root, "prior")):        # first_frame="image" draws frame 0 with it
        image_prior = ImagePrior.load(os.path.join(root, "prior"))
        cast(image_prior.model, dtype)
    return VideoPipeline(tokenizer, prior, image_prior)


__all__ = ["VideoFrame", "VideoPipeline", "VideoResult", "load_video_pipeline"]
