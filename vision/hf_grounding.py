"""Grounding with transformers' own vision-language families (Florence-2, PaliGemma, Kosmos-2)
from a local folder: `grd = vision.load_grounding_pipeline("/models/florence2"); grd(image, "a cat")`.

The answer is decoded through suite's loop (suite/models/vlm/ adapters) and its location tokens are
parsed into boxes in the image's own pixels:
- Florence-2: `<CAPTION_TO_PHRASE_GROUNDING>query` -> `phrase<loc_x0><loc_y0><loc_x1><loc_y1>...`,
  bins of 1000, a bin's centre ((k + 0.5) / 1000 of the side), as its processor dequantizes;
- PaliGemma: `detect query` -> `<locY0><locX0><locY1><locX1> label ; ...`, bins of 1024 (k / 1024);
- Kosmos-2: `<grounding><phrase>query</phrase>` -> `<object><patch_index_a><patch_index_b></object>`,
  the upper-left and lower-right cells of its patch grid (`patch_index_to_coordinate`).

Decoders: `ar` and the exact chain decoders (jacobi, ngram, lookahead where the adapter takes
custom masks, speculative with draft='self:N'); each equals the family's greedy `generate`.
`parallel_box` and `hybrid` are refused: they fill a fixed block (head, coordinates, end) through
MASK slots the model was trained on, and none of these families has such a block or such training.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import suite
from suite.vlm import load_vlm

FAMILIES = ("florence2", "paligemma", "kosmos-2")
BOX_DECODERS = ("parallel_box", "hybrid", "locus")   # need a MASK-trained box block
MAX_NEW_TOKENS = 128


@dataclass
class HFGroundingResult:
    """GroundingResult's fields for axis-aligned boxes, with each box's label and the raw answer;
    stats are the batch's suite.DecodeStats (num_forwards, tokens_per_forward, wall time)."""
    boxes: list[tuple[float, float, float, float]]   # (x0, y0, x1, y1) in pixels
    labels: list[str]                                # the phrase or label of each box
    stats: object
    query: str = ""
    task: str = "aabb"
    tokens: list[int] = field(default_factory=list)
    no_match: bool = False
    text: str = ""                                   # the raw answer, location tokens included
    decode_time_s: float = 0.0
    wall_time_s: float = 0.0
    angles: None = None                              # axis-aligned only

    @property
    def scores(self) -> list[None]:
        """No per-box score: these families give location tokens, not box probabilities."""
        return [None] * len(self.boxes)

    def polygons(self) -> list[list[tuple[float, float]]]:
        """Each box as its 4 corners (pixels), as GroundingResult.polygons."""
        return [[(x0, y0), (x1, y0), (x1, y1), (x0, y1)] for x0, y0, x1, y1 in self.boxes]


def as_rgb(image):
    """A PIL image or an image path -> RGB PIL image."""
    from PIL import Image
    if isinstance(image, (str, Path)):
        if not Path(image).is_file():
            raise ValueError(f"cannot read image {str(image)!r}: no such file; pass the path of a PNG/JPEG image")
        with Image.open(image) as im:
            return im.convert("RGB")
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    raise ValueError(f"expected a PIL image or an image path, got {type(image).__name__}")


def prompt(family: str, query: str) -> str:
    if family == "florence2":
        return "<CAPTION_TO_PHRASE_GROUNDING>" + query
    if family == "paligemma":
        return "detect " + query
    return f"<grounding><phrase>{query}</phrase>"


def parse_boxes(family: str, text: str, width: int, height: int, patches: int = 1024):
    """The answer text -> ([(x0, y0, x1, y1)] in pixels, [label]) in the family's convention."""
    boxes, labels = [], []
    if family == "florence2":
        for label, locs in re.findall(r"([^<]*)((?:<loc_\d+>){4})", text):
            x0, y0, x1, y1 = (int(v) for v in re.findall(r"\d+", locs))
            boxes.append(((x0 + 0.5) / 1000 * width, (y0 + 0.5) / 1000 * height,
                          (x1 + 0.5) / 1000 * width, (y1 + 0.5) / 1000 * height))
            labels.append(label.strip())
    elif family == "paligemma":
        for locs, label in re.findall(r"((?:<loc\d{4}>){4})\s*([^;<]*)", text):
            y0, x0, y1, x1 = (int(v) for v in re.findall(r"\d{4}", locs))
            boxes.append((x0 / 1024 * width, y0 / 1024 * height, x1 / 1024 * width, y1 / 1024 * height))
            labels.append(label.strip())
    else:
        from transformers.models.kosmos2.processing_kosmos2 import patch_index_to_coordinate
        side = int(round(patches ** 0.5))
        for phrase, objects in re.findall(r"(?:<phrase>([^<]*)</phrase>)?<object>(.*?)</object>", text):
            for ul, lr in re.findall(r"<patch_index_(\d+)><patch_index_(\d+)>", objects):
                x0, y0, x1, y1 = patch_index_to_coordinate(int(ul), int(lr), side)
                boxes.append((x0 * width, y0 * height, x1 * width, y1 * height))
                labels.append(phrase.strip())
    return boxes, labels


class HFGroundingPipeline:
    """A Florence-2/PaliGemma/Kosmos-2 checkpoint as a grounding pipeline (GroundingPipeline's call)."""

    default_decoder = "ar"

    def __init__(self, vlm, max_new_tokens: int = MAX_NEW_TOKENS):
        if vlm.family not in FAMILIES:
            raise ValueError(f"a {vlm.family!r} model does not ground boxes here; grounding families: "
                             f"{', '.join(FAMILIES)} (or our own model: vision.load_grounding_pipeline())")
        self.vlm, self.family, self.max_new_tokens = vlm, vlm.family, max_new_tokens
        custom = vlm.family != "kosmos-2"
        self.decoders = tuple(n for n in suite.list_decoders("grounding", chain=suite.TEXT_DECODERS)
                              if n not in BOX_DECODERS and suite.decoder_entry(n).guarantee != "lossy"
                              and (custom or "custom_mask" not in suite.DECODERS[n].requires))

    def check_decoder(self, decoder) -> None:
        if decoder in BOX_DECODERS:
            raise ValueError(f"{decoder!r} cannot run on {self.family}: it fills a fixed box block (head, coordinates, "
                             "end) through MASK slots the model was trained on, and this family emits location tokens "
                             "inside free text with no such block or training; use one of: " + ", ".join(self.decoders))
        if isinstance(decoder, str) and decoder not in self.decoders:
            raise ValueError(f"unknown decoder {decoder!r} for {self.family}; use one of: {', '.join(self.decoders)}")

    def decoder_for(self, decoder, options, task: str = "aabb"):
        """GroundingPipeline.decoder_for's check: the decoder name, or a clear error."""
        if task != "aabb":
            raise ValueError(f"{self.family} gives axis-aligned boxes only: use task='aabb'")
        self.check_decoder(decoder)
        return decoder

    def __call__(self, image, query, decoder="ar", task: str = "aabb", **options):
        """One image and query -> HFGroundingResult; lists of images and queries -> a list (one batch)."""
        if task != "aabb":
            raise ValueError(f"{self.family} gives axis-aligned boxes only: use task='aabb'")
        many = isinstance(image, (list, tuple))
        images = list(image) if many else [image]
        queries = list(query) if isinstance(query, (list, tuple)) else [query] * len(images)
        if len(queries) != len(images):
            raise ValueError(f"{len(images)} images but {len(queries)} queries: give one query per image, or one for all")
        for q in queries:
            if not isinstance(q, str) or not q.strip():
                raise ValueError("empty query: say what to find, e.g. 'the red circle' or 'the face'")
        self.check_decoder(decoder)
        out = self.batch([as_rgb(im) for im in images], queries, decoder, **options)
        return out if many else out[0]

    def batch(self, images, queries, decoder, **options) -> list[HFGroundingResult]:
        t0 = time.perf_counter()
        res = self.vlm.generate(images, [prompt(self.family, q) for q in queries], decoder=decoder,
                                max_new_tokens=self.max_new_tokens, **options)
        patches = getattr(self.vlm.processor, "num_patch_index_tokens", 1024)
        wall = time.perf_counter() - t0
        out = []
        for img, q, toks, text in zip(images, queries, res.tokens, res.texts):
            boxes, labels = parse_boxes(self.family, text, img.width, img.height, patches)
            out.append(HFGroundingResult(boxes, labels, res.stats, q, "aabb", toks, not boxes, text,
                                         res.stats.wall_time_s, wall))
        return out


def load_hf_grounding(folder, device: str | None = None, generation: dict | None = None,
                      max_new_tokens: int = MAX_NEW_TOKENS) -> HFGroundingPipeline:
    """A Florence-2, PaliGemma or Kosmos-2 folder (saved with its processor) as a grounding pipeline."""
    return HFGroundingPipeline(load_vlm(folder, device=device, generation=generation), max_new_tokens)
