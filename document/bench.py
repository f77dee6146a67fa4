"""OCR benchmark: `python -m document.bench [--lines 200] [--pdf-pages 4]`.

Each decoder of our model and two real OCR engines read the same line images:
  * held-out synthetic lines (document.data.heldout_set: texts never trained on);
  * real PDF pages found on the machine, rendered with pypdfium2; lines found by rapidocr's
    detector; the ground truth of a line is the PDF's embedded text inside its box.
Reported per reader: CER (character error rate, edit distance / reference length), lines/s,
decoder forwards per line and tokens per forward (our model), exact match with `ar`. Decoders run
interleaved in one process on the same batches, each after an untimed read of one batch of lines
(torch's first-call costs, which are per tensor shape); tesseract (Debian tesseract-ocr, --psm 7,
one line per image) and rapidocr (PP-OCRv6 recogniser, ONNX) get the same crops and threads.
Tesseract's time includes its process start (loading its model), so its row also gives lines/s
without it, timed on a one-line run.
`--model DIR` benches a page-reading VLM folder (GOT-OCR2, Qwen2-VL class, Florence-2: document/hf_reader.py)
instead: each of its exact decoders reads the same held-out line images as pages (batches of --pages-batch),
greedy; rows: CER, pages/s, forwards, tokens per forward, speedup over ar (wall time), same as ar.
`--regions` adds pages of REGION_LINES held-out lines stacked, read whole and region-parallel (hf_reader.py).
`--real` reads real typeset pages whole (document/bench_real.py); `--text-layer` reads PDF pages from their
text layer and the same pages scanned (document/bench_layer.py).
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from suite.models.dtypes import add_dtype_argument
from suite.registry import DEFAULTS
from suite.runtime.metrics import cer as suite_cer
from suite.runtime.options import settings_text

from . import data
from .text_layer import page_chars, text_in_box

DECODERS = [("ar", "ar", {}),
            ("block_diffusion B=4 t=0.9 prefix", "block_diffusion", {"block_size": 4, "threshold": 0.9, "prefix_only": True}),
            ("block_diffusion B=4 t=0.8 prefix", "block_diffusion", {"block_size": 4, "threshold": 0.8, "prefix_only": True}),
            ("block_diffusion B=8 t=0.95 prefix", "block_diffusion", {"block_size": 8, "threshold": 0.95, "prefix_only": True}),
            ("block_diffusion B=8 t=0.95", "block_diffusion", {"block_size": 8, "threshold": 0.95}),
            ("block_diffusion B=8 t=0.9", "block_diffusion", {"block_size": 8, "threshold": 0.9}),
            ("s2d2 B=8", "s2d2", {"block_size": 8}),
            ("ctc_speculative (CTC head drafts)", "ctc_speculative", {}),
            ("ctc_speculative realign", "ctc_speculative", {"realign": True}),
            ("jacobi (suite)", "jacobi", {})]
PAGE_DECODERS = ("ar", "block_diffusion B=4 t=0.9 prefix", "s2d2 B=8")      # whole-page rows
REGION_LINES = 3          # --model DIR --regions: held-out lines stacked per page
# `--rules`: the diffusion-LM commit rules (suite/decoders/blocks/), a few settings each, beside ar
# and the default; block_diffusion is Fast-dLLM's threshold rule
_P, _H = {"prefix_only": True}, {"hold_repeats": True}
RULES = [("ar", "ar", {}),
         ("block_diffusion (default: " + settings_text(DEFAULTS["document"]["block_diffusion"]) + ")", "block_diffusion",
          dict(DEFAULTS["document"]["block_diffusion"])),        # the registry's: what the CLI, API and app run
         ("threshold B=8 t=0.9", "block_diffusion", {"block_size": 8, "threshold": 0.9}),
         ("threshold B=16 t=0.9 prefix", "block_diffusion", {"block_size": 16, "threshold": 0.9, **_P}),
         ("threshold B=16 t=0.8 prefix", "block_diffusion", {"block_size": 16, "threshold": 0.8, **_P}),
         ("factor B=8 f=0.25", "fast_dllm_factor", {"block_size": 8, "factor": 0.25}),
         ("factor B=8 f=1", "fast_dllm_factor", {"block_size": 8, "factor": 1.0}),
         ("factor B=16 f=1 prefix", "fast_dllm_factor", {"block_size": 16, "factor": 1.0, **_P}),
         ("factor B=16 f=2 prefix", "fast_dllm_factor", {"block_size": 16, "factor": 2.0, **_P}),
         ("factor B=16 f=0.5", "fast_dllm_factor", {"block_size": 16, "factor": 0.5}),
         ("prophet B=8 margin=6", "prophet", {"block_size": 8, "margin": 6.0}),
         ("prophet B=16 margin=6", "prophet", {"block_size": 16, "margin": 6.0}),
         ("prophet B=16 margin=4 prefix", "prophet", {"block_size": 16, "margin": 4.0, **_P}),
         ("credit B=8 t=0.95", "credit", {"block_size": 8}),
         ("credit B=16 t=0.95 prefix", "credit", {"block_size": 16, "threshold": 0.95, **_P}),
         ("credit B=16 t=0.9 prefix", "credit", {"block_size": 16, "threshold": 0.9, **_P}),
         ("credit B=16 t=0.99 prefix", "credit", {"block_size": 16, "threshold": 0.99, **_P}),
         ("entropy_bounded B=8 gamma=0.03", "entropy_bounded", {"block_size": 8, "gamma": 0.03}),
         ("entropy_bounded B=16 gamma=0.3 prefix", "entropy_bounded", {"block_size": 16, "gamma": 0.3, **_P}),
         ("entropy_bounded B=16 gamma=0.6 prefix", "entropy_bounded", {"block_size": 16, "gamma": 0.6, **_P}),
         ("entropy_bounded B=16 gamma=1 prefix", "entropy_bounded", {"block_size": 16, "gamma": 1.0, **_P}),
         # hold_repeats (BlockCommit): a slot repeating the token before it waits for a later forward
         ("block_diffusion B=8 t=0.95 prefix hold", "block_diffusion", {"block_size": 8, "threshold": 0.95, **_P, **_H}),
         ("threshold B=16 t=0.9 prefix hold", "block_diffusion", {"block_size": 16, "threshold": 0.9, **_P, **_H}),
         ("threshold B=16 t=0.8 prefix hold", "block_diffusion", {"block_size": 16, "threshold": 0.8, **_P, **_H}),
         ("factor B=16 f=2 prefix hold", "fast_dllm_factor", {"block_size": 16, "factor": 2.0, **_P, **_H}),
         ("factor B=16 f=3 prefix hold", "fast_dllm_factor", {"block_size": 16, "factor": 3.0, **_P, **_H}),
         ("prophet B=16 margin=6 prefix hold", "prophet", {"block_size": 16, "margin": 6.0, **_P, **_H}),
         ("credit B=16 t=0.9 prefix hold", "credit", {"block_size": 16, "threshold": 0.9, **_P, **_H}),
         ("entropy_bounded B=16 gamma=2 prefix hold", "entropy_bounded", {"block_size": 16, "gamma": 2.0, **_P, **_H})]
# the per-line PDF rows: the two documents these rows have always read (other PDFs that font
# packages install under /usr/share/doc would change them); `--real` reads more (document/bench_real.py)
PDF_GLOBS = ("/usr/share/doc/libtasn1-doc/libtasn1.pdf", "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")
REAL_DECODERS = [("ar", "ar", {}), ("ctc_speculative", "ctc_speculative", {}),
                 ("block_diffusion (default)", "block_diffusion", dict(DEFAULTS["document"]["block_diffusion"]))]
REAL_COLS = ["reader", "pages", "lines", "CER", "words", "wrong lines", "CPU s/page", "flag recall", "flag precision"]
# scikit-image's page.png (a real scan), transcribed by hand; the half-cut bottom line is left out
PAGE_PNG_TRUTH = """Region-based segmentation
Let us first determine markers of the coins and the
background. These markers are pixels that we can label
unambiguously as either object or background. Here,
the markers are found at the two extreme parts of the
histogram of grey values:
>>> markers = np.zeros_like(coins)"""


def cer(hyps: list[str], refs: list[str]) -> float:
    """CER with runs of whitespace collapsed (line crops and page text space words differently)."""
    return suite_cer(refs, hyps, collapse_spaces=True)


def tesseract_lines(images, threads: int = 1) -> tuple[list[str], float]:
    """One tesseract process over all line images (list mode, --psm 7: a single text line each;
    its text output separates images with a form feed)."""
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for i, im in enumerate(images):
            names.append(os.path.join(tmp, f"{i:05d}.png"))
            im.convert("L").save(names[-1])
        listing = os.path.join(tmp, "list.txt")
        Path(listing).write_text("\n".join(names) + "\n")
        env = {**os.environ, "OMP_THREAD_LIMIT": str(threads)}
        t0 = time.perf_counter()
        out = subprocess.run(["tesseract", listing, "-", "--psm", "7"], capture_output=True, text=True, env=env)
        secs = time.perf_counter() - t0
        texts = [t.strip() for t in out.stdout.split("\f")]
        if len(texts) != len(images):
            raise RuntimeError(f"tesseract returned {len(texts)} texts for {len(images)} images")
        return texts, secs


def rapidocr_lines(images, threads: int = 1) -> tuple[list[str], float]:
    import logging
    from rapidocr import RapidOCR
    logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    eng = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "error",
                           "EngineConfig.onnxruntime.intra_op_num_threads": threads})
    arrays = [np.asarray(im.convert("RGB")) for im in images]
    t0 = time.perf_counter()
    texts = []
    for a in arrays:
        r = eng(a, use_det=False, use_cls=False, use_rec=True)
        texts.append(" ".join(r.txts) if r.txts else "")
    return texts, time.perf_counter() - t0


def pdf_lines(max_pages: int, dpi: int = 200, first_page: int = 0):
    """(crops, refs, skipped, source) of text lines of PDF pages on this machine (max_pages in all,
    spread over the PDFs, from page first_page + 1 of each), ground truth from the PDF text layer
    inside each detected line box; lines whose text has characters outside our charset are left
    out (counted). The bench reads the first pages; validation (choosing weights) reads later ones."""
    import pypdfium2 as pdfium
    from .reader import line_crops
    crops, refs, skipped, used = [], [], 0, []
    pdfs = sorted({p for g in PDF_GLOBS for p in glob.glob(g, recursive=True)})
    per_pdf = max(1, max_pages // max(len(pdfs), 1))
    for path in pdfs:
        doc = pdfium.PdfDocument(path)
        for i in range(first_page, min(first_page + per_pdf, len(doc))):
            page = doc[i]
            scale = dpi / 72
            img = page.render(scale=scale).to_pil().convert("RGB")
            chars = page_chars(page, scale)
            used.append(f"{Path(path).name} p{i + 1}")
            for box, crop in line_crops(img, "rapidocr"):
                ref = ascii_truth(text_in_box(chars, box))
                if not ref or any(c not in data.CHARSET for c in ref):
                    skipped += 1
                    continue
                crops.append(crop)
                refs.append(ref)
        doc.close()
    return crops, refs, skipped, used


# typographic characters of the text layer written as the ASCII a reader of our charset outputs
# (curly quotes, dashes, the hyphen pdfium marks at a line break, ligatures)
ASCII_TRUTH = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "--",
               "\ufffe": "-", "\u00ad": "-", "\u2212": "-", "\ufb01": "fi", "\ufb02": "fl", "\ufb00": "ff",
               "\ufb03": "ffi", "\ufb04": "ffl", "\u00a0": " "}


def ascii_truth(text: str) -> str:
    return "".join(ASCII_TRUTH.get(c, c) for c in text)


def table(title: str, rows: list[dict], cols=None) -> str:
    cols = cols or ["reader", "CER %", "lines/s", "forwards/line", "tokens/forward", "forwards vs ar", "same as ar %"]
    out = [f"### {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")
    return "\n".join(out)


def family_rows(family: str, modes: dict, images, refs, decoders, batch: int) -> list[dict]:
    """A page-reading VLM's decoders interleaved per batch on the same images (document/hf_reader.py),
    in each mode (label suffix -> read(images, decoder) -> texts, tokens, stats), each after an untimed
    read of one image: speedup over the first mode's ar, same as ar within each mode."""
    from tqdm import tqdm
    runs = {(m, d): {"texts": [], "tokens": [], "forwards": 0, "new": 0, "wall": 0.0} for m in modes for d in decoders}
    for m, d in runs:             # one untimed read each: torch's first-call costs are per shape
        modes[m](images[:1], d)
    for i in tqdm(range(0, len(images), batch), desc="bench pages", file=sys.stderr):
        for (m, d), run in runs.items():
            t0 = time.perf_counter()
            texts, tokens, stats = modes[m](images[i:i + batch], d)
            run["wall"] += time.perf_counter() - t0
            run["texts"] += texts
            run["tokens"] += tokens
            run["forwards"] += stats.num_forwards
            run["new"] += stats.num_new_tokens
    base = runs[next(iter(modes)), "ar"]
    return [{"reader": f"{family} {d}{m}", "CER %": f"{100 * suite_cer(refs, r['texts']):.2f}",
             "pages/s": f"{len(images) / max(r['wall'], 1e-9):.2f}", "forwards": r["forwards"],
             "tokens/forward": f"{r['new'] / max(r['forwards'], 1):.2f}",
             "speedup vs ar": f"{base['wall'] / max(r['wall'], 1e-9):.2f}",
             "same as ar %": f"{100 * np.mean([a == b for a, b in zip(r['tokens'], runs[m, 'ar']['tokens'])]):.0f}"}
            for (m, d), r in runs.items()]


def whole_pages(reader, images, decoder):
    res = reader(images, decoder=decoder)
    return res.texts, res.tokens, res.stats


def region_pages(reader, images, decoder):
    """Each page's detected lines (projection) read as one batch: page texts, each page's region
    tokens, summed stats."""
    from suite import DecodeStats

    from .reader import page_regions
    res = [reader.regions([crop for _, crop in page_regions(img, "projection")], decoder=decoder) for img in images]
    texts = ["\n".join(t for t in r.texts if t) for r in res]
    return texts, [r.tokens for r in res], DecodeStats.beside([r.stats for r in res])


def stacked_pages(samples, per_page: int = REGION_LINES, gap: int = 12):
    """Pages of `per_page` line images one under another on white, and their texts joined by lines."""
    from PIL import Image
    pages, refs = [], []
    for i in range(0, len(samples), per_page):
        group = samples[i:i + per_page]
        page = Image.new("RGB", (max(s.image.width for s in group) + 2 * gap,
                                 sum(s.image.height + gap for s in group) + gap), "white")
        y = gap
        for s in group:
            page.paste(s.image.convert("RGB"), (gap, y))
            y += s.image.height + gap
        pages.append(page)
        refs.append("\n".join(s.text for s in group))
    return pages, refs


def main_family(args) -> int:
    """`--model DIR`: a page-reading VLM's rows on the held-out line images, each read as a page;
    `--regions`: also pages of REGION_LINES of them, read whole and region by region."""
    from functools import partial

    from .hf_reader import MAX_NEW_TOKENS, load_reader
    try:
        reader = load_reader(args.model, args.max_new_tokens or MAX_NEW_TOKENS)
        decoders = ["ar"] + [d for d in (args.decoders or reader.decoders) if d not in ("ar", "speculative")]
        for d in decoders:
            if d not in reader.decoders:
                raise ValueError(f"unknown decoder {d!r} for {reader.family}; use some of: {', '.join(reader.decoders)}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    held = data.heldout_set(args.lines)
    cols = ["reader", "CER %", "pages/s", "forwards", "tokens/forward", "speedup vs ar", "same as ar %"]
    rows = family_rows(reader.family, {"": partial(whole_pages, reader)}, [s.image for s in held],
                       [s.text for s in held], decoders, args.pages_batch)
    print(table(f"{reader.family} from {args.model}: held-out synthetic lines read as pages ({len(held)}; "
                f"threads={args.threads}, batch={args.pages_batch}, greedy)", rows, cols))
    if args.regions:
        pages, refs = stacked_pages(held)
        modes = {" whole page": partial(whole_pages, reader), " regions": partial(region_pages, reader)}
        print()
        print(table(f"{reader.family}: pages of {REGION_LINES} held-out lines ({len(pages)}), whole vs region-parallel "
                    "(projection lines, one batch a page); speedup over whole-page ar, same as ar of its mode",
                    family_rows(reader.family, modes, pages, refs, decoders, args.pages_batch), cols))
    return 0


def revised(text: str, rng) -> str:
    """A previous version of a line: one character changed (the prior of input-guided decoding)."""
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + rng.choice(data.CHARSET[1:]) + text[i + 1:]


def run_suite(ocr, crops, refs, engines: bool, threads: int, prior_row: bool, decoders=DECODERS) -> list[dict]:
    import random
    rows, ar_texts, ar_fwd = [], None, None
    decoders = list(decoders)
    if prior_row:
        rng = random.Random(0)
        decoders.append(("ngram_prior (prior: the line with 1 char changed)", "ngram_prior",
                         {"prior_texts": [revised(r, rng) for r in refs]}))
    for label, name, opts in decoders:
        warm = ocr.batch_size      # one full batch untimed: torch's first-call costs are per shape
        _direct(ocr, crops[:warm], name, {k: v[:warm] if k == "prior_texts" else v for k, v in opts.items()})
        texts, st = _direct(ocr, crops, name, opts)
        per_line = st.row_forwards / len(crops)     # a long line read in pieces sums its pieces' forwards
        if name == "ar":
            ar_texts, ar_fwd = texts, per_line
        rows.append({"reader": label, "CER %": f"{100 * cer(texts, refs):.2f}",
                     "lines/s": f"{len(crops) / st.wall_time_s:.1f}",
                     "forwards/line": f"{per_line:.2f}",
                     "tokens/forward": f"{st.num_new_tokens / max(st.row_forwards, 1):.2f}",
                     "forwards vs ar": f"{ar_fwd / max(per_line, 1e-9):.2f}x fewer",
                     "same as ar %": f"{100 * np.mean([a == b for a, b in zip(texts, ar_texts)]):.1f}"})
        print(f"  {label}: CER {rows[-1]['CER %']}%  {rows[-1]['forwards/line']} fwd/line", file=sys.stderr, flush=True)
    if engines:
        for label, fn in (("tesseract 5.3 (--psm 7)", tesseract_lines), ("rapidocr 3.10 (PP-OCRv6 rec)", rapidocr_lines)):
            try:
                texts, secs = fn(crops, threads)
            except Exception as e:   # an engine missing on this machine: say so, keep going
                rows.append({"reader": f"{label}: unavailable ({type(e).__name__}: {e})"})
                continue
            row = {"reader": label, "CER %": f"{100 * cer(texts, refs):.2f}", "lines/s": f"{len(crops) / secs:.1f}"}
            if fn is tesseract_lines:     # its process start (model load) is in its time; ours is not
                start = fn(crops[:1], threads)[1]
                row["lines/s"] += f" ({len(crops) / max(secs - start, 1e-9):.1f} without its {start:.2f} s start)"
            rows.append(row)
            print(f"  {label}: CER {rows[-1]['CER %']}%", file=sys.stderr, flush=True)
    return rows


def scan_page_rows(ocr, threads: int) -> list[dict]:
    """skimage page.png, whole page: our reader (rapidocr's detector + our model) per decoder,
    tesseract (--psm 6) and rapidocr (det + rec) end to end; page CER on whitespace-joined text."""
    from skimage import data as skdata
    from PIL import Image
    from .reader import read
    img = Image.fromarray(skdata.page()).convert("RGB")
    ref = " ".join(PAGE_PNG_TRUTH.split())
    rows = []
    for label, name, opts in [d for d in DECODERS if d[0] in PAGE_DECODERS]:
        t0 = time.perf_counter()
        pages = read(img, ocr=ocr, decoder=name, **opts)
        hyp = " ".join(ln.text for ln in pages[0].lines)
        rows.append({"reader": f"ours: {label}", "CER %": f"{100 * cer([hyp], [ref]):.2f}",
                     "lines/s": f"{len(pages[0].lines) / (time.perf_counter() - t0):.1f}",
                     "forwards/line": f"{pages[0].stats.forwards_per_line:.2f}"})
    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.join(tmp, "page.png")
        img.save(name)
        env = {**os.environ, "OMP_THREAD_LIMIT": str(threads)}
        try:
            out = subprocess.run(["tesseract", name, "-", "--psm", "6"], capture_output=True, text=True, env=env)
            rows.append({"reader": "tesseract 5.3 (--psm 6)", "CER %": f"{100 * cer([out.stdout], [ref]):.2f}"})
        except FileNotFoundError:
            rows.append({"reader": "tesseract: unavailable (apt-get install tesseract-ocr)"})
    try:
        from rapidocr import RapidOCR
        eng = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "error"})
        r = eng(np.asarray(img))
        rows.append({"reader": "rapidocr 3.10 (det + rec)", "CER %": f"{100 * cer([' '.join(r.txts or [])], [ref]):.2f}"})
    except ImportError:
        rows.append({"reader": "rapidocr: unavailable (pip install rapidocr==3.10.0 onnxruntime)"})
    return rows


def text_png_rows(ocr, threads: int) -> list[dict]:
    """skimage text.png: handwritten formulas photographed at a slant (no printed-text ground
    truth, so not scored): what each reader makes of it, as a robustness check."""
    from skimage import data as skdata
    from PIL import Image
    from .reader import read
    img = Image.fromarray(skdata.text()).convert("RGB")
    rows = []
    t0 = time.perf_counter()
    pages = read(img, ocr=ocr, decoder="ar")
    rows.append({"reader": "ours: ar", "lines": str(len(pages[0].lines)),
                 "text": " / ".join(ln.text for ln in pages[0].lines), "seconds": f"{time.perf_counter() - t0:.2f}"})
    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.join(tmp, "text.png")
        img.save(name)
        env = {**os.environ, "OMP_THREAD_LIMIT": str(threads)}
        try:
            t0 = time.perf_counter()
            out = subprocess.run(["tesseract", name, "-", "--psm", "6"], capture_output=True, text=True, env=env)
            got = [ln for ln in out.stdout.splitlines() if ln.strip()]
            rows.append({"reader": "tesseract 5.3 (--psm 6)", "lines": str(len(got)), "text": " / ".join(got),
                         "seconds": f"{time.perf_counter() - t0:.2f}"})
        except FileNotFoundError:
            rows.append({"reader": "tesseract: unavailable (apt-get install tesseract-ocr)"})
    try:
        from rapidocr import RapidOCR
        eng = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "error"})
        t0 = time.perf_counter()
        r = eng(np.asarray(img))
        rows.append({"reader": "rapidocr 3.10 (det + rec)", "lines": str(len(r.txts or [])),
                     "text": " / ".join(r.txts or []), "seconds": f"{time.perf_counter() - t0:.2f}"})
    except ImportError:
        rows.append({"reader": "rapidocr: unavailable (pip install rapidocr==3.10.0 onnxruntime)"})
    for r in rows:
        if "text" in r:
            r["text"] = "`" + r["text"].replace("|", "\\|").replace("`", "'")[:120] + "`"
    return rows


def plot_rules(rows: list[dict], path: str, title: str) -> None:
    """A PNG scatter of (forwards/line, CER %) per row of `run_suite`, one colour per decoder
    family (the label's first word), each point labelled with the rest of its label."""
    from PIL import Image, ImageDraw
    from suite.runtime.storage import atomic_path
    pts = [(float(r["forwards/line"]), float(r["CER %"]), r["reader"]) for r in rows]
    W, H, left, bottom, pad = 1100, 700, 80, 60, 30
    xmax, ymax = max(p[0] for p in pts) * 1.08, max(p[1] for p in pts) * 1.12
    colours = ["#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
    families = list(dict.fromkeys(label.split()[0] for _, _, label in pts))
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)

    def xy(x, y):
        return left + x / xmax * (W - left - pad), H - bottom - y / ymax * (H - bottom - pad)
    d.line([xy(0, 0), xy(xmax, 0)], fill="black")
    d.line([xy(0, 0), xy(0, ymax)], fill="black")
    for i in range(6):
        x, y = xmax * i / 5, ymax * i / 5
        d.text((xy(x, 0)[0] - 10, H - bottom + 8), f"{x:.1f}", fill="black")
        d.text((8, xy(0, y)[1] - 6), f"{y:.2f}", fill="black")
    d.text((W // 2 - 120, H - 24), "decoder forwards per line (fewer is faster)", fill="black")
    d.text((8, 8), f"CER %  -  {title}", fill="black")
    for x, y, label in pts:
        family, _, rest = label.partition(" ")
        c = colours[families.index(family) % len(colours)]
        px, py = xy(x, y)
        d.ellipse([px - 5, py - 5, px + 5, py + 5], fill=c)
        d.text((px + 7, py - 6), rest or family, fill=c)
    for i, family in enumerate(families):
        d.rectangle([W - 230, 40 + 18 * i, W - 220, 50 + 18 * i], fill=colours[i % len(colours)])
        d.text((W - 214, 38 + 18 * i), family, fill="black")
    with atomic_path(path) as tmp:
        img.save(tmp)


def _direct(ocr, crops, name, opts):
    res = ocr(crops, decoder=name, **opts)
    return res.texts, res.stats


def main_layer(args, ocr) -> int:
    from . import bench_layer, bench_real
    paths = args.text_layer or [p for p in bench_real.REAL_PDFS if os.path.isfile(p)]
    if not paths:
        print("error: no PDFs to read; give some: --text-layer a.pdf b.pdf", file=sys.stderr)
        return 2
    rows = bench_layer.run(ocr, paths, args.real_pages, args.dpi)
    print(table(f"PDF pages read as users expect: {len(paths)} PDFs x {args.real_pages} pages at {args.dpi} dpi; truth: "
                f"each page's text layer; threads={args.threads}; s/page: wall seconds of document.read",
                rows, bench_layer.COLS))
    return 0


def main_real(args, ocr) -> int:
    from . import bench_real
    with tempfile.TemporaryDirectory() as tmp:
        paths = args.real or [p for p in bench_real.REAL_PDFS if os.path.isfile(p)] + \
            bench_real.man_pdfs(bench_real.MAN_PAGES, tmp)
        if not paths:
            print("error: no PDFs to read; give some: --real a.pdf b.pdf", file=sys.stderr)
            return 2
        pages = bench_real.real_pages(paths, args.real_pages, args.dpi)
    print(f"real pages: {', '.join(p.name for p in pages)}", file=sys.stderr)
    rows = bench_real.run(ocr, pages, REAL_DECODERS, args.threads, not args.no_engines, tuple(args.real_detectors))
    print(table(f"real typeset pages read whole: {len(pages)} pages at {args.dpi} dpi ({', '.join(p.name for p in pages)}); "
                f"truth: each PDF's text layer; threads={args.threads}; flags: lines marked check",
                rows, REAL_COLS))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python -m document.bench --lines 200 --pdf-pages 4 --threads 1")
    ap.add_argument("--lines", type=int, default=200, help="held-out synthetic lines")
    ap.add_argument("--pdf-pages", type=int, default=4, help="PDF pages to read (0: none)")
    ap.add_argument("--threads", type=int, default=1, help="threads for every reader (torch, tesseract, onnxruntime)")
    ap.add_argument("--dpi", type=int, default=200, help="PDF rendering resolution")
    ap.add_argument("--no-engines", action="store_true", help="skip tesseract and rapidocr")
    ap.add_argument("--weights", default=None)
    add_dtype_argument(ap)
    ap.add_argument("--model", default=None, metavar="DIR",
                    help="bench a page-reading VLM folder instead (GOT-OCR2, Qwen2-VL class, Florence-2)")
    ap.add_argument("--decoders", nargs="+", default=None, help="--model: its decoders to run (default: every exact "
                                                                 "one but speculative; ar always runs)")
    ap.add_argument("--pages-batch", type=int, default=4, help="--model: images read together")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="--model: tokens per page at most (default 1024)")
    ap.add_argument("--regions", action="store_true", help="--model: also a table of stacked-line pages read whole "
                                                           "and region-parallel (a row each per decoder)")
    ap.add_argument("--rules", action="store_true",
                    help="only the commit-rule sweep (RULES) on the held-out lines: forwards against CER")
    ap.add_argument("--plot", default=None, metavar="PNG", help="with --rules: also draw (forwards/line, CER) here")
    ap.add_argument("--real", nargs="*", default=None, metavar="PDF",
                    help="only real typeset pages read whole, beside tesseract and rapidocr (document/bench_real.py): "
                         "the given PDFs, or (none given) the manuals under /usr/share/doc and man pages printed "
                         "by headless Chromium")
    ap.add_argument("--text-layer", nargs="*", default=None, metavar="PDF",
                    help="only PDFs read as users expect (document/bench_layer.py): the --real pages (or the PDFs "
                         "given) born-digital (text layer) and rasterised into image-only PDFs (recogniser)")
    ap.add_argument("--real-pages", type=int, default=2, help="--real: pages per PDF (from its second page)")
    ap.add_argument("--real-detectors", nargs="+", default=["auto"], choices=["auto", "rapidocr", "projection"],
                    help="--real: line finders of our reader to compare (auto: XY cut on clean pages)")
    from suite.runtime.bench_page import add_write_argument
    add_write_argument(ap)
    args = ap.parse_args(argv)
    if args.regions and args.model is None:
        from .reader import REGIONS_NEED_MODEL
        print(f"error: {REGIONS_NEED_MODEL}", file=sys.stderr)
        return 2
    if args.lines < 1:
        print("error: --lines must be >= 1", file=sys.stderr)
        return 2
    import torch
    torch.set_num_threads(args.threads)
    if args.model is not None:
        return main_family(args)
    from .ocr import load_ocr
    try:
        ocr = load_ocr(args.weights, dtype=args.dtype)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.real is not None:
        return main_real(args, ocr)
    if args.text_layer is not None:
        return main_layer(args, ocr)
    held = data.heldout_set(args.lines)
    print(f"held-out synthetic lines: {len(held)}", file=sys.stderr)
    if args.rules:
        rows = run_suite(ocr, [s.image for s in held], [s.text for s in held], False, args.threads, False, RULES)
        print(table(f"commit rules, held-out synthetic lines ({len(held)}; threads={args.threads}, "
                    f"batch={ocr.batch_size})", rows))
        if args.plot:
            plot_rules(rows, args.plot, f"commit rules on {len(held)} held-out lines")
        return 0
    report = [f"threads={args.threads}; batch={ocr.batch_size}; forwards counted per line (one batched forward "
              "advances every line of the batch once)", ""]
    held_rows = run_suite(ocr, [s.image for s in held], [s.text for s in held], not args.no_engines, args.threads,
                          prior_row=True)
    report.append(table(f"held-out synthetic lines ({len(held)})", held_rows))
    report.append("")
    report.append(table("real scan: scikit-image page.png (7 lines, hand transcription; page CER)",
                        scan_page_rows(ocr, args.threads)))
    report.append("")
    report.append(table("real photo: scikit-image text.png (handwritten formulas at a slant; no ground truth, "
                        "not scored)", text_png_rows(ocr, args.threads), ["reader", "lines", "seconds", "text"]))
    pdf_rows, pdf_count = [], 0
    if args.pdf_pages:
        crops, refs, skipped, used = pdf_lines(args.pdf_pages, args.dpi)
        pdf_count = len(crops)
        print(f"PDF lines: {len(crops)} from {', '.join(used)} ({skipped} left out)", file=sys.stderr)
        if crops:
            pdf_rows = run_suite(ocr, crops, refs, not args.no_engines, args.threads, prior_row=False)
            report.append("")
            report.append(table(f"real PDF pages: {len(crops)} lines from {', '.join(used)} "
                                f"(ground truth: the PDF text layer; {skipped} lines with characters outside "
                                "the charset left out)",
                                pdf_rows))
    print("\n".join(report))
    if args.write:
        from suite.runtime.bench_page import command_line
        write_page(held_rows, pdf_rows, command_line("document.bench", argv), len(held), pdf_count)
        print("wrote BENCHMARKS.md (document) and document/quality.json", file=sys.stderr)
    return 0


def write_page(held_rows: list[dict], pdf_rows: list[dict], command: str, lines: int, pdf_lines_read: int = 0,
               page=None, folder=None) -> None:
    """BENCHMARKS.md's document table from run_suite's rows (held-out lines; real PDF lines beside the CER
    when read) and, for each lossy decoder run at the document's defaults (suite.registry.DEFAULTS), its CER
    against ar's in document/quality.json (suite.runtime.bench_page)."""
    from suite.registry import DEFAULTS, REGISTRY
    from suite.runtime.bench_page import (PAGE, Headline, headline_table, machine, quality_entry, write_quality,
                                          write_section)
    from suite.runtime.options import settings_text
    by_label = {label: (name, opts) for label, name, opts in DECODERS}
    pdf = {r["reader"]: r for r in pdf_rows if "CER %" in r}
    ours = [r for r in held_rows if "forwards/line" in r]
    ar = next(r for r in ours if r["reader"] == "ar")
    rows, costs = [], {}
    for r in ours:
        name, opts = by_label.get(r["reader"], ("ngram_prior", {}))
        wanted = DEFAULTS.get("document", {}).get(name, {})
        lossy = REGISTRY[name].guarantee == "lossy" and name != "ar"
        on = (f"{lines} held-out synthetic lines" + (f" and {pdf_lines_read} real PDF lines" if pdf else "")
              + (f", {settings_text(opts)}" if opts else ""))
        value, ar_value = f"{r['CER %']}%", f"{ar['CER %']}%"
        if r["reader"] in pdf and "ar" in pdf:
            value += f" (real PDF lines {pdf[r['reader']]['CER %']}%)"
            ar_value += f" ({pdf['ar']['CER %']}%)"
        rows.append(Headline(r["reader"], float(r["lines/s"]) / float(ar["lines/s"]),
                             f"{r['forwards/line']} / line ({r['forwards vs ar'].replace(' fewer', '')} fewer)",
                             f"CER {value} against ar's {ar_value} ({on})" if lossy else ""))
        if lossy and {**wanted, **opts} == wanted and name not in costs:     # what every way in runs
            costs[name] = quality_entry("CER", value, ar_value, on, "BENCHMARKS.md, Document", command,
                                        options={**wanted})
    write_section("document", headline_table(rows, machine(), command), page or PAGE)
    write_quality(folder or Path(__file__).parent, "document", costs)


if __name__ == "__main__":
    sys.exit(main())
