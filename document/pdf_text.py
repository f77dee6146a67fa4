"""PDF pages read as their users expect (pdftotext, ocrmypdf's --skip-text): a page with a text
layer gives that text, exactly, in its lines with their boxes; a page without one, and the images
of a page whose text is not in its layer (a scan pasted into a typed page), are read by OCR.

Modes (`read(..., ocr_mode=)`, `python -m document --ocr`): "auto" (the above), "never" (the layer
alone: a page without one comes back empty), "always" (every page rendered and read by OCR, the
layer ignored). Every line says where it came from (`Line.source`: "text_layer" or "ocr").
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

OCR_MODES = ("auto", "never", "always")
MIN_IMAGE_SIDE_PT = 12          # image objects under 12 pt a side (one line of 9-pt text) are not read
LINE = re.compile(r"[^\n\ufffe]+[\ufffe]?")      # a line of pdfium's text, with its line-end hyphen
LAYER_FIXES = {"\ufffe": "-", "\u0002": "-", "\u00a0": " "}   # pdfium's marks: a line-end hyphen, a no-break space


def check_mode(mode: str) -> str:
    if mode not in OCR_MODES:
        raise ValueError(f"unknown OCR mode {mode!r}; use one of {', '.join(OCR_MODES)} (auto: the PDF's text "
                         "layer where a page has one, OCR elsewhere)")
    return mode


def open_pdf(path: Path):
    """The pypdfium2 document; a ValueError naming the fix for a locked or broken file."""
    import pypdfium2 as pdfium
    try:
        return pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            raise ValueError(f"{path}: PDF is password-protected; decrypt it first "
                             "(e.g. `qpdf --decrypt --password=... in.pdf out.pdf`)") from None
        raise ValueError(f"{path}: PDF is corrupt or not a PDF ({e}); repair it (e.g. `qpdf in.pdf out.pdf`)") from None


def page_scale(page, dpi: int, max_pixels: int) -> float:
    w, h = page.get_size()
    return min(dpi / 72, (max_pixels / max(w * h, 1)) ** 0.5)


def to_pixels(page, size: tuple[int, int], rect) -> tuple[int, int, int, int]:
    """A rectangle (left, bottom, right, top) in PDF points -> (x0, y0, x1, y1) in the pixels of
    the page rendered at `size`, through pdfium's own page-to-device map (rotated pages too)."""
    import pypdfium2.raw as raw
    xs, ys = [], []
    for px, py in ((rect[0], rect[1]), (rect[2], rect[3])):
        dx, dy = ctypes.c_int(), ctypes.c_int()
        raw.FPDF_PageToDevice(page.raw, 0, 0, size[0], size[1], 0, px, py, dx, dy)
        xs.append(dx.value)
        ys.append(dy.value)
    return max(0, min(xs)), max(0, min(ys)), min(size[0], max(xs) + 1), min(size[1], max(ys) + 1)


def layer_lines(page, size: tuple[int, int]) -> list[tuple[tuple[int, int, int, int], str]]:
    """(box in pixels, text) per line of the page's text layer, in the layer's order: the text
    pdfium extracts, split at its line breaks and after a line-end hyphen (which pdfium marks
    U+FFFE and does not break), each line boxed by the union of its text rects."""
    tp = page.get_textpage()
    try:
        text = tp.get_text_range()
        out = []
        for m in LINE.finditer(text):
            line = " ".join("".join(LAYER_FIXES.get(c, c) for c in m.group()).split())
            n = tp.count_rects(m.start(), m.end() - m.start()) if line else 0
            rects = [tp.get_rect(k) for k in range(n)]
            if rects:
                r = (min(b[0] for b in rects), min(b[1] for b in rects), max(b[2] for b in rects), max(b[3] for b in rects))
                out.append((to_pixels(page, size, r), line))
        return out
    finally:
        tp.close()


def image_boxes(page, size: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """Pixel boxes of the page's image objects large enough to hold text."""
    import pypdfium2.raw as raw
    out = []
    for obj in page.get_objects(filter=(raw.FPDF_PAGEOBJ_IMAGE,)):
        left, bottom, right, top = obj.get_bounds()
        if min(right - left, top - bottom) >= MIN_IMAGE_SIDE_PT:
            out.append(to_pixels(page, size, (left, bottom, right, top)))
    return out


def overlaps(a, b) -> bool:
    """Whether box a's centre lies in box b, or b's in a."""
    inside = lambda p, q: q[0] <= (p[0] + p[2]) / 2 <= q[2] and q[1] <= (p[1] + p[3]) / 2 <= q[3]  # noqa: E731
    return inside(a, b) or inside(b, a)
