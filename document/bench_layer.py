"""PDFs read as their users expect, measured: `python -m document.bench --text-layer [PDF ...]`.

Each page of the bench's real PDFs (the pages `--real` reads) is written as a one-page born-digital
PDF and as the same page rasterised into an image-only PDF (a scan), and read with `document.read`:
  * born-digital, --ocr auto: from its text layer (no OCR);
  * scanned, --ocr auto: no layer, so by the recogniser (`ar`);
  * born-digital, --ocr always: the layer ignored, the rendered page read by the recogniser.
Scored as `--real` scores (document/bench_real.py: each line against the original page's text layer
inside its box, folded; words found), with the wall seconds of each `read` call per page and the
share of lines that came from the text layer.
"""
from __future__ import annotations

import os
import tempfile
import time

from .bench_real import FIRST_PAGE, Score, real_pages

COLS = ["reader", "pages", "lines", "CER", "words", "s/page", "text-layer lines"]


def one_page_pdfs(path: str, pages: int, folder: str) -> list[str]:
    """The bench's pages of `path` (from FIRST_PAGE), each saved as its own PDF."""
    import pypdfium2 as pdfium
    src = pdfium.PdfDocument(path)
    first = FIRST_PAGE if len(src) > FIRST_PAGE else 0
    out = []
    for i in range(first, min(first + pages, len(src))):
        doc = pdfium.PdfDocument.new()
        doc.import_pages(src, [i])
        dst = os.path.join(folder, f"{os.path.basename(path)[:-4]}-p{i + 1}.pdf")
        doc.save(dst)
        doc.close()
        out.append(dst)
    src.close()
    return out


def read_scored(path: str, truth, ocr, score: Score, layer: list, **kw) -> None:
    from .reader import read
    t0 = time.perf_counter()
    (page,) = read(path, ocr=ocr, decoder="ar", **kw)
    seconds = time.perf_counter() - t0
    score.add(truth, [(line.box, line.text, line.confidence, None) for line in page.lines], seconds)
    layer += [line.source == "text_layer" for line in page.lines]


def run(ocr, paths: list[str], pages: int, dpi: int) -> list[dict]:
    systems = {"born-digital, --ocr auto (text layer)": {}, "scanned (image-only PDF), --ocr auto": {},
               "born-digital, --ocr always (recogniser)": {"ocr_mode": "always"}}
    scores = {name: Score() for name in systems}
    layers: dict = {name: [] for name in systems}
    warm = False
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            for single in one_page_pdfs(path, pages, tmp):
                (truth,) = real_pages([single], 1, dpi)        # a one-page PDF: its page 1
                scan = single[:-4] + "-scan.pdf"
                truth.image.save(scan, resolution=dpi)
                if not warm:                                   # untimed: torch's first calls, the detector's load
                    read_scored(scan, truth, ocr, Score(), [], dpi=dpi)
                    warm = True
                for name, kw in systems.items():
                    src = scan if name.startswith("scanned") else single
                    read_scored(src, truth, ocr, scores[name], layers[name], dpi=dpi, **kw)
    rows = []
    for name in systems:
        row = scores[name].row(name)
        row["s/page"] = row.pop("CPU s/page")          # Score keeps the seconds it is given: wall here
        row["text-layer lines"] = f"{100 * sum(layers[name]) / max(len(layers[name]), 1):.0f}%"
        rows.append(row)
    return rows
