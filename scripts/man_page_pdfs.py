"""Build the justified man-page PDFs of issue 40's OCR check: text no one here wrote, printed to PDF
by a browser (headless chromium), justified so that lines are spaced out to fill the column.

    python scripts/man_page_pdfs.py OUTDIR [gzip tar ...]    # OUTDIR/gzip.pdf (sans), OUTDIR/tar.pdf (serif)

Needs groff (the man pages rendered as text) and chromium (requirements/apt-apps.txt).
"""
from __future__ import annotations

import gzip
import html
import re
import subprocess
import sys
from pathlib import Path

FONTS = ("sans-serif", "serif")


def paragraphs(name: str) -> list[str]:
    source = gzip.open(f"/usr/share/man/man1/{name}.1.gz").read()
    text = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou"], input=source, capture_output=True,
                          check=True).stdout.decode("ascii", "replace")
    paras, cur = [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            cur.append(re.sub(r"\s+", " ", line.strip()))
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    return [p for p in paras if not p.startswith(name.upper() + "(")]      # the running header/footer


def build(name: str, font: str, out: Path) -> Path:
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs(name))
    page = out / f"{name}.html"
    page.write_text(f"<html><head><style>body{{font-family:{font};font-size:12pt;width:10cm}} "
                    f"p{{text-align:justify}}</style></head><body>{body}</body></html>")
    pdf = out / f"{name}.pdf"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                    f"--print-to-pdf={pdf}", page.as_uri()], capture_output=True, timeout=120, check=True)
    return pdf


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(argv[1:] or ["gzip", "tar"]):
        print(build(name, FONTS[i % len(FONTS)], out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
