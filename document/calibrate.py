"""Fit what a line's confidence means: `python -m document.calibrate [--weights DIR] [PDF ...]`.

Reads validation pages (pages 4-5 of the manuals `python -m document.bench --real` reads pages
2-3 of, and the man page of `ls`, which the bench does not read; or the PDFs given) with the
default decoder and line finder, labels each line exact or wrong against the page's text layer
(document/bench_real.py), fits the logistic model of document/confidence.py and the flag
threshold (most wrong lines flagged at >= 80% precision), and writes DIR/calibration.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from . import bench_real, confidence

VALIDATION_FIRST_PAGE = 3          # 0-based: the bench reads pages 1-2 (after the title page)
VALIDATION_MAN_PAGES = ("ls",)


def labelled_lines(ocr, pages) -> tuple[np.ndarray, np.ndarray]:
    """(features (n, 3), wrong (n,)) of every line our reader finds on the pages."""
    from .text_layer import text_in_box
    from .reader import DEFAULT_DECODER, read_page
    x, wrong = [], []
    for page in pages:
        read = read_page(page.image, 0, ocr, DEFAULT_DECODER, "auto")
        for line, (mean, low, agree) in zip(read.lines, read.signals):
            ref = bench_real.fold(text_in_box(page.chars, line.box))
            x.append(confidence.features(mean, low, agree))
            wrong.append(ref != bench_real.fold(line.text))
    return np.array(x), np.array(wrong, dtype=bool)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", nargs="*", help="validation PDFs with a text layer (default: see above)")
    ap.add_argument("--weights", default=None, help="the OCR weights folder (default: the shipped ones)")
    ap.add_argument("--pages", type=int, default=2, help="pages per PDF")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dpi", type=int, default=200)
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    from .ocr import DEFAULT_WEIGHTS, load_ocr
    folder = args.weights or DEFAULT_WEIGHTS
    ocr = load_ocr(folder)
    ocr.calibration = None
    first = bench_real.FIRST_PAGE
    bench_real.FIRST_PAGE = VALIDATION_FIRST_PAGE
    try:
        with tempfile.TemporaryDirectory() as tmp:
            paths = args.pdfs or [p for p in bench_real.REAL_PDFS if os.path.isfile(p)] + \
                bench_real.man_pdfs(VALIDATION_MAN_PAGES, tmp)
            pages = bench_real.real_pages(paths, args.pages, args.dpi)
    finally:
        bench_real.FIRST_PAGE = first
    x, wrong = labelled_lines(ocr, pages)
    if wrong.all() or not wrong.any():
        print(f"error: {len(wrong)} lines, {int(wrong.sum())} wrong: need both kinds to calibrate", file=sys.stderr)
        return 2
    weights, bias = confidence.fit(x, (~wrong).astype(float))
    prob = 1 / (1 + np.exp(-(x @ weights + bias)))
    t = confidence.flag_threshold(prob, wrong)
    recall, precision = confidence.flag_scores(prob, wrong, t)
    cal = {"weights": [round(float(w), 5) for w in weights], "bias": round(bias, 5), "check_below": round(t, 5),
           "features": ["logit(min token prob)", "logit(mean token prob x words seen)", "CTC head agrees (+1/-1, 0: none)"],
           "fitted_on": [p.name for p in pages], "lines": int(len(wrong)), "wrong": int(wrong.sum()),
           "flag_recall_on_fit": round(recall, 3), "flag_precision_on_fit": round(precision, 3)}
    path = os.path.join(folder, confidence.FILE)
    with open(path, "w") as f:
        json.dump(cal, f, indent=1)
    print(f"{path}: {len(wrong)} lines ({int(wrong.sum())} wrong) on {len(pages)} pages; flags below {t:.3f}: "
          f"recall {recall:.0%}, precision {precision:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
