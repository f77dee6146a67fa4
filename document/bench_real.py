"""Real typeset pages read whole, side by side: `python -m document.bench --real [PDF ...]`.

Pages: PDFs typeset by others that a fresh machine has (the Texinfo manual of libtasn1, the
shared-mime-info specification, the Latin Modern documentation, all under /usr/share/doc) and
man pages printed to PDF by headless Chromium (`man | col -b` in a <pre>), or the PDFs given.
Each page is rendered at --dpi; its truth is its own text layer (pypdfium2).

Every system reads the whole page with its own line finder: tesseract 5 (one process per page,
TSV output), rapidocr (detector + recogniser), and our reader once per decoder (document.read_page:
the XY cut on clean pages, rapidocr's detector otherwise). Scores per system, all pages together:
  * CER: each output line against the text-layer characters inside its box (both sides folded by
    `fold`: curly quotes, dashes, ligatures as ASCII), edits / reference characters;
  * words: the share of the page's text-layer words (whitespace tokens, folded, punctuation kept)
    found in the output (multiset), which also counts lines a finder missed;
  * CPU s/page: process CPU time (the child's for tesseract), one thread each;
  * flags (ours): the lines the reader marks "check" (calibrated confidence below the weights'
    threshold, document/confidence.py); recall = wrong lines flagged / wrong lines, precision =
    wrong lines among flagged.
"""
from __future__ import annotations

import html
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from suite.runtime.metrics import edit_distance

REAL_PDFS = ("/usr/share/doc/libtasn1-doc/libtasn1.pdf",
             "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
             "/usr/share/doc/fonts-lmodern/lm-info.pdf")
MAN_PAGES = ("tar", "grep")
FIRST_PAGE = 1          # page 0 of a manual is its title page
# typographic characters written as the ASCII many readers output (applied to truth and readings alike)
FOLD = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-", "\u2212": "-",
        "\ufffe": "-", "\u00ad": "-", "\u2010": "-", "\u2011": "-", "\u00a0": " ", "\u2026": "...",
        "\ufb01": "fi", "\ufb02": "fl", "\ufb00": "ff", "\ufb03": "ffi", "\ufb04": "ffl", "\u00b4": "'",
        "\u02dc": "~", "\u02c6": "^"}


def fold(text: str) -> str:
    return " ".join("".join(FOLD.get(c, c) for c in text).split())


@dataclass
class RealPage:
    name: str
    image: object
    chars: list = field(repr=False)      # (char, x, y) glyph centres in image pixels

    @property
    def words(self) -> list[str]:
        return fold("".join(c for c, _, _ in self.chars)).split()


@dataclass
class Score:
    edits: int = 0
    ref_chars: int = 0
    found_words: int = 0
    ref_words: int = 0
    cpu_s: float = 0.0
    pages: int = 0
    lines: int = 0
    wrong: list = field(default_factory=list)        # per line: read wrongly?
    flags: list = field(default_factory=list)        # per line: flagged "check" (ours)

    def add(self, page: RealPage, lines: list[tuple], cpu_s: float) -> None:
        """lines: (box, text, confidence, flagged or None)."""
        from .text_layer import text_in_box
        self.pages += 1
        self.cpu_s += cpu_s
        out_words = []
        for box, text, conf, flag in lines:
            ref, hyp = fold(text_in_box(page.chars, box)), fold(text)
            out_words += hyp.split()
            if not ref and not hyp:
                continue
            self.edits += edit_distance(ref, hyp)
            self.ref_chars += len(ref)
            self.lines += 1
            self.wrong.append(ref != hyp)
            self.flags.append(flag)
        ref_words = Counter(page.words)
        self.found_words += sum((ref_words & Counter(out_words)).values())
        self.ref_words += sum(ref_words.values())

    def row(self, name: str) -> dict:
        row = {"reader": name, "pages": self.pages, "lines": self.lines,
               "CER": f"{100 * self.edits / max(self.ref_chars, 1):.2f}%",
               "words": f"{100 * self.found_words / max(self.ref_words, 1):.1f}%",
               "wrong lines": sum(self.wrong), "CPU s/page": f"{self.cpu_s / max(self.pages, 1):.2f}"}
        if self.flags and None not in self.flags:
            flagged = self.flags
            hits = sum(f and w for f, w in zip(flagged, self.wrong))
            row["flag recall"] = f"{100 * hits / max(sum(self.wrong), 1):.0f}%"
            row["flag precision"] = f"{100 * hits / max(sum(flagged), 1):.0f}%"
        return row


def man_pdfs(names, folder: str) -> list[str]:
    """Man pages printed to PDF by headless Chromium (text in a <pre>, as a terminal shows it)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None or shutil.which("man") is None:
        return []
    out = []
    for name in names:
        text = subprocess.run(f"MANWIDTH=80 man {name} 2>/dev/null | col -b", shell=True, capture_output=True,
                              text=True).stdout
        if not text.strip():
            continue
        src, pdf = os.path.join(folder, f"{name}.html"), os.path.join(folder, f"man-{name}.pdf")
        Path(src).write_text(f"<html><body><pre>{html.escape(text)}</pre></body></html>")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                        f"--print-to-pdf={pdf}", f"file://{src}"], capture_output=True, timeout=180)
        if os.path.isfile(pdf):
            out.append(pdf)
    return out


def real_pages(paths, pages_per_pdf: int, dpi: int) -> list[RealPage]:
    import pypdfium2 as pdfium
    from .text_layer import page_chars
    out = []
    for path in paths:
        doc = pdfium.PdfDocument(path)
        first = FIRST_PAGE if len(doc) > FIRST_PAGE else 0
        for i in range(first, min(first + pages_per_pdf, len(doc))):
            page = doc[i]
            scale = dpi / 72
            image = page.render(scale=scale).to_pil().convert("RGB")
            out.append(RealPage(f"{Path(path).stem} p{i + 1}", image, page_chars(page, scale)))
        doc.close()
    return out


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def tesseract_page(image, threads: int = 1) -> tuple[list[tuple[tuple, str, float]], float]:
    """tesseract on the whole page (its own layout analysis): lines (box, text, confidence 0-1) from
    its TSV, and the child's CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "page.png")
        image.convert("L").save(png)
        env = {**os.environ, "OMP_THREAD_LIMIT": str(threads)}
        c0 = child_cpu()
        tsv = subprocess.run(["tesseract", png, "-", "tsv"], capture_output=True, text=True, env=env).stdout
        cpu = child_cpu() - c0
    lines: dict = {}
    for row in tsv.splitlines()[1:]:
        f = row.split("\t")
        if len(f) < 12 or f[0] != "5" or not f[11].strip():
            continue
        key = tuple(f[1:5])
        x, y, w, h, conf = int(f[6]), int(f[7]), int(f[8]), int(f[9]), float(f[10])
        words = lines.setdefault(key, [])
        words.append((x, y, x + w, y + h, f[11], conf))
    out = []
    for words in lines.values():
        box = (min(w[0] for w in words), min(w[1] for w in words), max(w[2] for w in words), max(w[3] for w in words))
        out.append((box, " ".join(w[4] for w in words), min(w[5] for w in words) / 100, None))
    return out, cpu


_RAPID = {}


def rapidocr_page(image, threads: int = 1) -> tuple[list[tuple[tuple, str, float]], float]:
    import logging

    import numpy as np
    if threads not in _RAPID:
        from rapidocr import RapidOCR
        logging.getLogger("RapidOCR").setLevel(logging.ERROR)
        _RAPID[threads] = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "error",
                                           "EngineConfig.onnxruntime.intra_op_num_threads": threads})
    c0 = time.process_time()
    r = _RAPID[threads](np.asarray(image.convert("RGB")), use_cls=False)
    cpu = time.process_time() - c0
    if r.boxes is None:
        return [], cpu
    out = []
    for quad, text, score in zip(r.boxes, r.txts, r.scores):
        box = (quad[:, 0].min(), quad[:, 1].min(), quad[:, 0].max(), quad[:, 1].max())
        out.append((box, text, float(score), None))
    return out, cpu


def ours_page(image, ocr, decoder: str, detector: str, **options) -> tuple[list[tuple[tuple, str, float]], float]:
    from .reader import read_page
    c0 = time.process_time()
    page = read_page(image, 0, ocr, decoder, detector, **options)
    cpu = time.process_time() - c0
    return [(line.box, line.text, line.confidence, line.check) for line in page.lines], cpu


def run(ocr, pages: list[RealPage], decoders, threads: int, engines: bool, detectors=("auto",)) -> list[dict]:
    """One row per system: the engines, then each (detector, decoder) of ours; pages interleaved
    (every system reads page 1, then page 2, ...) so that the machine's load falls on all alike."""
    systems = []
    if engines:
        if shutil.which("tesseract"):
            systems.append(("tesseract 5 (page)", lambda im: tesseract_page(im, threads)))
        systems.append(("rapidocr 3.10 (page)", lambda im: rapidocr_page(im, threads)))
    for det in detectors:
        for label, name, opts in decoders:
            systems.append((f"ours {label} [{det}]", lambda im, n=name, o=opts, d=det: ours_page(im, ocr, n, d, **o)))
    ours_page(pages[0].image, ocr, "ar", detectors[0])           # untimed warm-up (torch first calls, rapidocr load)
    scores = {name: Score() for name, _ in systems}
    for page in pages:
        for name, fn in systems:
            lines, cpu = fn(page.image)
            scores[name].add(page, lines, cpu)
    return [scores[name].row(name) for name, _ in systems]
