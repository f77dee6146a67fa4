"""The development set that chooses the recogniser: `python -m document.devset --weights A [B ...]`.

Real typeset pages no one here wrote, none of them a page `python -m document.bench --real` reports
(it reads pages 2-3 of libtasn1.pdf, shared-mime-info-spec.pdf and lm-info.pdf and of the tar and grep
man pages) or one `document.calibrate` fits on (pages 4-5 and the ls man page): later pages of the same
manuals, the TeX Gyre Termes and Cursor documentation (other TeX documents), and the sed and find man
pages printed by headless Chromium. Scored as the bench scores them (document/bench_real.py: each line
against the text layer inside its box, folded), `ar`, our reader's own line finder, one thread.

With --heldout it also reads the synthetic held-out lines (document.data.heldout_set, as `python -m
document.bench --lines N`), so that one command gives both figures of the shipping rule in the
weights' README.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

# (PDF, 0-based page indices): disjoint from bench_real (pages 1-2) and calibrate (pages 3-4)
DEV_PDF_PAGES = (("/usr/share/doc/libtasn1-doc/libtasn1.pdf", (6, 9)),
                 ("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf", (6, 8)),
                 ("/usr/share/doc/fonts-lmodern/lm-info.pdf", (6,)),
                 ("/usr/share/doc/fonts-texgyre/qtm-info.pdf", (1,)),
                 ("/usr/share/doc/fonts-texgyre/qcr-info.pdf", (1,)))
DEV_MAN_PAGES = (("sed", (0, 1)), ("find", (1, 3)))


def dev_pages(dpi: int, folder: str) -> list:
    """The development pages present on this machine, rendered at dpi (bench_real.RealPage each)."""
    import pypdfium2 as pdfium

    from .bench_real import RealPage, man_pdfs
    from .text_layer import page_chars
    chosen = [(p, idx) for p, idx in DEV_PDF_PAGES if os.path.isfile(p)]
    for (name, idx), pdf in zip(DEV_MAN_PAGES, [man_pdfs([n], folder) for n, _ in DEV_MAN_PAGES]):
        chosen += [(pdf[0], idx)] if pdf else []
    out = []
    for path, indices in chosen:
        doc = pdfium.PdfDocument(path)
        for i in (i for i in indices if i < len(doc)):
            page, scale = doc[i], dpi / 72
            image = page.render(scale=scale).to_pil().convert("RGB")
            out.append(RealPage(f"{os.path.basename(path)[:-4]} p{i + 1}", image, page_chars(page, scale)))
        doc.close()
    if not out:
        raise RuntimeError("no development pages on this machine: install libtasn1-doc, shared-mime-info, "
                           "fonts-lmodern and fonts-texgyre (requirements/apt-document.txt)")
    return out


def score_dev(ocr, pages, decoder: str = "ar") -> dict:
    """The bench's row (CER, words, wrong lines, ...) of our reader on the pages."""
    from .bench_real import Score, ours_page
    score = Score()
    ours_page(pages[0].image, ocr, decoder, "auto")          # untimed warm-up
    for page in pages:
        lines, cpu = ours_page(page.image, ocr, decoder, "auto")
        score.add(page, lines, cpu)
    return score.row(decoder)


def score_heldout(ocr, n: int, threads: int) -> str:
    """`ar` CER % of the n held-out synthetic lines, as `python -m document.bench --lines n` gives it."""
    from . import data
    from .bench import run_suite
    held = data.heldout_set(n)
    rows = run_suite(ocr, [s.image for s in held], [s.text for s in held], False, threads, False, [("ar", "ar", {})])
    return rows[0]["CER %"] + "%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python -m document.devset --weights document/weights/ocr-small "
                                        "/tmp/ocr-run --heldout 200")
    ap.add_argument("--weights", nargs="+", default=[None], metavar="DIR", help="weights folders (default: shipped)")
    ap.add_argument("--heldout", type=int, default=0, help="also the ar CER of this many held-out synthetic lines")
    ap.add_argument("--dpi", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    from .ocr import load_ocr
    torch.set_num_threads(args.threads)
    try:
        models = [(w or "shipped", load_ocr(w)) for w in args.weights]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        pages = dev_pages(args.dpi, tmp)
    print(f"development pages ({len(pages)}): {', '.join(p.name for p in pages)}", file=sys.stderr)
    print("| weights | dev CER | dev words | wrong lines | lines |" + (" held-out CER |" if args.heldout else ""))
    print("|---|---|---|---|---|" + ("---|" if args.heldout else ""))
    for name, ocr in models:
        row = score_dev(ocr, pages)
        held = f" {score_heldout(ocr, args.heldout, args.threads)} |" if args.heldout else ""
        print(f"| {name} | {row['CER']} | {row['words']} | {row['wrong lines']} | {row['lines']} |{held}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
