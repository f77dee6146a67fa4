"""Page reading: `pages = document.read(path)` for PNG/JPEG/TIFF/PDF (or a PIL image).

Pages are loaded (PDF pages rendered with pypdfium2), text lines found (on a clean page by the
XY cut of document.page_lines, in milliseconds; on any other page by rapidocr's ONNX detector when
installed, else our projection-profile segmenter), long lines cut at word gaps into pieces
the line model reads (at most `data.WIDTH / data.HEIGHT` wide per unit of height), every piece
read in batches by the OCR model, and the pieces joined back into lines with boxes, text and
confidence. Export with `to_text`, `to_json` or `overlay` (the page with the recognised text
drawn in each line box, like the text layer of a searchable PDF). `read(path, model=folder)` reads
with a page-reading VLM instead, whole pages or (regions=True) the detected regions as one batch.
A PDF page with a text layer gives that text unless `ocr_mode="always"` (document/pdf_text.py);
`iter_pages` yields pages one at a time (the app shows each as it is read).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageSequence

from . import confidence, data, pdf_text
from .lines import pad_box, projection_lines
from .page_lines import clean_lines

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"}
PDF_SUFFIXES = {".pdf"}
MAX_PIXELS = 64_000_000          # larger pages are refused (downscale them first)
MIN_SIDE = 8
DPI = 200                # PDF rendering resolution (150 reads 10-point text worse: python -m document.bench)
# the CLI's, the Document tab's and read()'s default: the fastest lossless reader on this CPU (ar 111.8 lines/s,
# ctc_speculative 98.1, both exact: BENCHMARKS.md, Document); pass decoder= to change
DEFAULT_DECODER = "ar"
REGIONS_NEED_MODEL = ("region-parallel reading (regions=True, --regions) needs a page-reading VLM folder "
                      "(model=FOLDER, --model DIR: GOT-OCR2, Qwen2-VL, Florence-2); without one, our own OCR "
                      "already reads each page line by line: drop --regions")


@dataclass
class Line:
    box: tuple[int, int, int, int]      # x0, y0, x1, y1 in page pixels
    text: str
    confidence: float                   # P(read exactly), calibrated (document/confidence.py); 1 from a text layer
    check: bool = False                 # confidence below the weights' flag threshold: check this line
    source: str = "ocr"                 # "ocr" (read from the pixels) or "text_layer" (the PDF's own text)


@dataclass
class Page:
    index: int
    width: int
    height: int
    lines: list[Line] = field(default_factory=list)
    image: Image.Image | None = field(default=None, repr=False, compare=False)
    stats: object = field(default=None, repr=False, compare=False)   # the OCR stats of its lines
    signals: list = field(default_factory=list, repr=False, compare=False)   # per line: (mean, min prob, CTC agrees)
    render: object = field(default=None, repr=False, compare=False)   # () -> the page image, when not yet drawn

    def picture(self) -> Image.Image | None:
        """The page image, rendered on first use for a page read from its text layer."""
        if self.image is None and self.render is not None:
            self.image = self.render()
        return self.image

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def to_dict(self) -> dict:
        return {"index": self.index, "width": self.width, "height": self.height,
                "lines": [asdict(line) for line in self.lines]}


def _check_size(img: Image.Image, where: str) -> Image.Image:
    w, h = img.size
    if w * h > MAX_PIXELS:
        raise ValueError(f"{where}: image of {w}x{h} pixels is larger than the {MAX_PIXELS // 1_000_000} Mpx "
                         "limit; downscale it (e.g. to 300 dpi) and try again")
    if min(w, h) < MIN_SIDE:
        raise ValueError(f"{where}: image of {w}x{h} pixels is too small to hold text; "
                         f"pages need at least {MIN_SIDE} pixels on each side")
    return img


def load_pages(path: str | Path, dpi: int = DPI) -> list[Image.Image]:
    """Pages of an image or PDF file as RGB PIL images; a clear ValueError for anything unreadable."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if path.suffix.lower() in PDF_SUFFIXES or path.read_bytes()[:5] == b"%PDF-":
        return _pdf_pages(path, dpi)
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        with Image.open(path) as img:
            _check_size(img, str(path))
            pages = [_check_size(frame.convert("RGB"), f"{path} page {i + 1}")
                     for i, frame in enumerate(ImageSequence.Iterator(img))]
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ValueError(f"{path}: image larger than the {MAX_PIXELS // 1_000_000} Mpx limit; downscale it first") from None
    except Image.UnidentifiedImageError:
        raise ValueError(f"{path}: not an image or PDF file (PNG, JPEG, TIFF, BMP, WebP or PDF expected)") from None
    except OSError as e:
        raise ValueError(f"{path}: image file is truncated or corrupt ({e}); re-export or re-scan it") from None
    return pages


def _pdf_pages(path: Path, dpi: int) -> list[Image.Image]:
    doc = pdf_text.open_pdf(path)
    try:
        return [doc[i].render(scale=pdf_text.page_scale(doc[i], dpi, MAX_PIXELS)).to_pil().convert("RGB")
                for i in range(len(doc))]
    finally:
        doc.close()


def is_pdf(path: Path) -> bool:
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    with open(path, "rb") as f:
        return path.suffix.lower() in PDF_SUFFIXES or f.read(5) == b"%PDF-"


# ---- line detection -------------------------------------------------------------------------

_RAPID = None


def _rapidocr():
    global _RAPID
    if _RAPID is None:
        import logging
        from rapidocr import RapidOCR
        logging.getLogger("RapidOCR").setLevel(logging.ERROR)
        _RAPID = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "error"})
    return _RAPID


def detect_lines(image: Image.Image, detector: str = "auto") -> list[tuple[int, int, int, int]]:
    """Line boxes (x0, y0, x1, y1) in reading order. detector: "rapidocr", "projection" or "auto"
    (document.page_lines' XY cut on a clean page, else rapidocr when installed)."""
    return [box for box, _ in line_crops(image, detector)]


def line_crops(image: Image.Image, detector: str = "auto") -> list[tuple[tuple[int, int, int, int], Image.Image]]:
    """(box, line image) per text line, top to bottom. rapidocr's quadrilaterals are warped to
    upright rectangles (a slanted or curved line is cut out without its neighbours, as rapidocr's
    own recogniser does); projection boxes are plain crops."""
    if detector not in ("auto", "rapidocr", "projection"):
        raise ValueError(f"unknown detector {detector!r}; use 'auto', 'rapidocr' or 'projection'")
    if detector == "auto":
        boxes = clean_lines(image)
        if boxes is not None:
            return [(box, image.crop(box)) for box in boxes]
    if detector in ("auto", "rapidocr"):
        try:
            engine = _rapidocr()
        except ImportError:
            if detector == "rapidocr":
                raise ValueError("detector='rapidocr' needs `pip install rapidocr==3.10.0 onnxruntime`") from None
        else:
            out = engine(np.asarray(image.convert("RGB")), use_det=True, use_cls=False, use_rec=False)
            quads = [] if out.boxes is None else out.boxes
            lines = [(pad_box(q[:, 0].min(), q[:, 1].min(), q[:, 0].max(), q[:, 1].max(), image.size), quad_crop(image, q))
                     for q in quads]
            return sorted(lines, key=lambda b: (b[0][1], b[0][0]))
    return [(box, image.crop(box)) for box in projection_lines(image)]


def quad_crop(image: Image.Image, quad: np.ndarray) -> Image.Image:
    """The quadrilateral (4, 2) [top-left, top-right, bottom-right, bottom-left] warped to an
    upright rectangle of its side lengths."""
    tl, tr, br, bl = (np.asarray(p, dtype=np.float64) for p in quad)
    w = max(2, int(round(max(np.linalg.norm(tr - tl), np.linalg.norm(br - bl)))))
    h = max(2, int(round(max(np.linalg.norm(bl - tl), np.linalg.norm(br - tr)))))
    data_ = tuple(float(v) for p in (tl, bl, br, tr) for v in p)     # PIL QUAD: ul, ll, lr, ur
    return image.transform((w, h), Image.QUAD, data_, resample=Image.BILINEAR, fillcolor="white")


# ---- reading ----------------------------------------------------------------------------------

def read(source, ocr=None, decoder: str = DEFAULT_DECODER, detector: str | None = None, dpi: int = DPI,
         model=None, regions: bool = False, ocr_mode: str = "auto", **options) -> list[Page]:
    """Read a file (PNG/JPEG/TIFF/PDF) or a PIL image into pages of lines (box, text, confidence,
    source). model: the folder of a page-reading VLM (GOT-OCR2, Qwen2-VL, Florence-2) that reads each
    page whole instead (document/hf_reader.py), or, with regions=True, the page's detected text
    regions as one batch of crops. detector: "auto" by default, "projection" with regions=True.
    ocr_mode (PDFs): "auto" (a page's text layer where it has one, OCR elsewhere), "never", "always"."""
    return list(iter_pages(source, ocr, decoder, detector, dpi, model, regions, ocr_mode, **options))


def iter_pages(source, ocr=None, decoder: str = DEFAULT_DECODER, detector: str | None = None, dpi: int = DPI,
               model=None, regions: bool = False, ocr_mode: str = "auto", **options):
    """`read`, one page at a time."""
    pdf_text.check_mode(ocr_mode)
    if regions and model is None:
        raise ValueError(REGIONS_NEED_MODEL)
    reader = PixelReader(ocr, decoder, detector, model, regions, options)
    if not isinstance(source, Image.Image) and ocr_mode != "always" and is_pdf(Path(source)):
        yield from pdf_pages(Path(source), dpi, ocr_mode, reader)
        return
    images = [source.convert("RGB")] if isinstance(source, Image.Image) else load_pages(source, dpi)
    images = [_check_size(img, f"page {i + 1}") for i, img in enumerate(images)]
    if model is not None:       # a VLM reads the pages as one batch
        yield from reader.pages(list(enumerate(images)))
        return
    for index, img in enumerate(images):
        yield from reader.pages([(index, img)])


class PixelReader:
    """Reads page images (or parts of pages) by OCR: our line model, loaded on first use, or a VLM."""

    def __init__(self, ocr, decoder: str, detector: str | None, model, regions: bool, options: dict):
        self.ocr, self.decoder, self.detector, self.model, self.regions, self.options = \
            ocr, decoder, detector, model, regions, options

    def pages(self, indexed: list[tuple[int, Image.Image]]) -> list[Page]:
        if self.model is not None:
            from .hf_reader import MAX_NEW_TOKENS, HFPageReader, load_reader
            if not isinstance(self.model, HFPageReader):    # a folder: loaded once, not once per page
                self.model = load_reader(self.model, self.options.pop("max_new_tokens", None) or MAX_NEW_TOKENS)
            pages = read_with_model([img for _, img in indexed], self.model, self.decoder, regions=self.regions,
                                    detector=self.detector, **self.options)
            for (index, _), page in zip(indexed, pages):
                page.index = index
            return pages
        if self.ocr is None:
            from .ocr import load_ocr
            self.ocr = load_ocr()
        return [read_page(img, index, self.ocr, self.decoder, self.detector or "auto", **self.options)
                for index, img in indexed]


def pdf_pages(path: Path, dpi: int, mode: str, reader: PixelReader):
    """The pages of a PDF, each from its text layer (ocr_mode "auto"/"never") and, in "auto", by OCR
    where the layer has nothing: the whole page, or its images that no layer line covers."""
    doc = pdf_text.open_pdf(path)
    try:
        for index in range(len(doc)):
            page = doc[index]
            scale = pdf_text.page_scale(page, dpi, MAX_PIXELS)
            size = (math.ceil(page.get_width() * scale), math.ceil(page.get_height() * scale))
            layer = pdf_text.layer_lines(page, size)
            render = _renderer(path, index, scale)
            if not layer and mode == "auto":
                out = reader.pages([(index, _check_size(render(), f"page {index + 1}"))])[0]
            else:
                out = Page(index, size[0], size[1], [Line(box, text, 1.0, False, "text_layer") for box, text in layer],
                           render=render)
                if mode == "auto":
                    _read_images(out, pdf_text.image_boxes(page, size), reader)
            yield out
    finally:
        doc.close()


def _renderer(path: Path, index: int, scale: float):
    def render() -> Image.Image:
        doc = pdf_text.open_pdf(path)
        try:
            return doc[index].render(scale=scale).to_pil().convert("RGB")
        finally:
            doc.close()
    return render


def _read_images(page: Page, boxes, reader: PixelReader) -> None:
    """OCR lines found inside the page's images, where no text-layer line lies, added in reading order."""
    boxes = [b for b in boxes if b[2] - b[0] >= MIN_SIDE and b[3] - b[1] >= MIN_SIDE]
    if not boxes:
        return
    image, added = page.picture(), False
    for box in boxes:
        part = reader.pages([(page.index, image.crop(box))])[0]
        for line in part.lines:
            x0, y0, x1, y1 = line.box
            line.box = (x0 + box[0], y0 + box[1], x1 + box[0], y1 + box[1])
            if not any(pdf_text.overlaps(line.box, other.box) for other in page.lines if other.source == "text_layer"):
                page.lines.append(line)
                added = True
    if added:
        page.lines.sort(key=lambda line: (line.box[1], line.box[0]))


def read_with_model(images: list[Image.Image], model, decoder: str, max_new_tokens: int | None = None,
                    regions: bool = False, detector: str | None = None, **options) -> list[Page]:
    """Pages read by a page-reading VLM folder (or loaded reader). Whole pages: each answer line
    becomes a Line boxed by the whole page, confidence NaN (the model reads the page, not located
    lines). regions=True: `read_regions` per page."""
    from .hf_reader import MAX_NEW_TOKENS, load_reader
    reader = load_reader(model, max_new_tokens or MAX_NEW_TOKENS)
    if regions:
        return [read_regions(img, index, reader, decoder, detector or "projection", **options)
                for index, img in enumerate(images)]
    res = reader(images, decoder=decoder, **options)
    pages = []
    for index, (img, text) in enumerate(zip(images, res.texts)):
        lines = [Line((0, 0, img.width, img.height), t, float("nan")) for t in text.splitlines() if t.strip()]
        pages.append(Page(index, img.width, img.height, lines, image=img, stats=res.stats))
    return pages


def read_regions(img: Image.Image, index: int, reader, decoder: str, detector: str, **options) -> Page:
    """Region-parallel reading: the detector's text regions (padded crops, reading order) read by a
    page-reading VLM as one batch (HFPageReader.regions); a Line (box, the region's text, NaN) per
    region read as non-empty. A page with no detected text is an empty page, as with our own OCR."""
    found = page_regions(img, detector)
    res = reader.regions([crop for _, crop in found], decoder=decoder, **options)
    lines = [Line(box, text, float("nan")) for (box, _), text in zip(found, res.texts) if text]
    return Page(index, img.width, img.height, lines, image=img, stats=res.stats)


def page_regions(img: Image.Image, detector: str) -> list[tuple[tuple[int, int, int, int], Image.Image]]:
    """(box, crop) per text line the detector finds, in its reading order; crops under 2 px dropped."""
    return [(tuple(int(v) for v in box), crop) for box, crop in line_crops(img, detector) if min(crop.size) >= 2]


def read_page(img: Image.Image, index: int, ocr, decoder: str, detector: str, **options) -> Page:
    lines = page_regions(img, detector)
    page = Page(index, img.width, img.height, image=img)
    if not lines:
        return page
    res = ocr([crop for _, crop in lines], decoder=decoder, score=True, **options)   # long lines: read in pieces
    cal = getattr(ocr, "calibration", None)
    for (box, _), text, mean, low, agree in zip(lines, res.texts, res.confidences, res.min_probs, res.ctc_agree):
        if text:
            conf = confidence.probability(cal, mean, low, agree)
            page.lines.append(Line(box, text, round(conf, 4), conf < confidence.check_below(cal)))
            page.signals.append((mean, low, agree))
    page.stats = res.stats
    return page


def to_text(pages: list[Page]) -> str:
    return "\n\f\n".join(p.text for p in pages) + "\n"


def to_json(pages: list[Page], source: str | None = None) -> str:
    return json.dumps({"source": source, "pages": [p.to_dict() for p in pages]}, indent=1)


def overlay(page: Page) -> Image.Image:
    """The page, faded, with each line's box and recognised text drawn in it."""
    picture = page.picture()
    base = picture.convert("RGB") if picture is not None else Image.new("RGB", (page.width, page.height), "white")
    out = Image.blend(base, Image.new("RGB", base.size, "white"), 0.6)
    draw = ImageDraw.Draw(out)
    for line in page.lines:
        x0, y0, x1, y1 = line.box
        draw.rectangle(line.box, outline=(0, 90, 200), width=1)
        size = max(8, int((y1 - y0) * 0.7))
        font = ImageFont.truetype(data.font_paths()[0], size)
        text_w = max(font.getlength(line.text), 1)
        if text_w > x1 - x0:      # fit the box width
            font = ImageFont.truetype(data.font_paths()[0], max(6, int(size * (x1 - x0) / text_w)))
        draw.text((x0, y0), line.text, font=font, fill=(200, 0, 0))
    return out
