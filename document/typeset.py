"""Typeset training lines: text as printed documents set it, read back as a page scan shows it.

The text (labels) comes from the same sources as `document.data` (standard-library docstrings and
source, numbers) but is laid out the way manuals, specifications and man pages are: curly quotes,
dashes, ellipses, bullets and numbered items, tables of contents with dot leaders, section
headings, command-line options, code, hyphenated line ends, and the lines of real man pages as `man |
col -b` prints them (printed in monospace). It is rendered in the fonts documents are set in (TeX's
Latin Modern, the URW base35 PostScript clones, TeX Gyre, Liberation, DejaVu, FreeFont, Noto Mono,
Computer Modern from KaTeX) in every weight and slant they come in, with ligatures, underlines and
the neighbouring lines a detector's box takes in, set word by word (document/line_layout.py:
justified spaces, italic or bold runs, small caps, footnote sizes), then degraded as printing and
scanning do (150-300 dpi, blur, JPEG, noise, thresholding, slight skew).

The held-out split is the same as `document.data`'s (by text hash); the held-out set itself is
still `data.heldout_set` (rendered in the base fonts), so old and new weights meet on one set.
"""
from __future__ import annotations

import glob
import io
import os
import random
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from . import data, line_layout

# characters of typeset text beyond ASCII, each one a reader should write as itself
EXTRA_CHARS = "\u2022\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u00a7\u00b0\u00a9\u00ae\u00d7\u00b1\u00b7\u00ab\u00bb\u00a3\u20ac"
CHARSET = data.CHARSET + EXTRA_CHARS
# ligature glyphs drawn in place of their letters (the label keeps the letters)
LIGATURES = (("ffi", "\ufb03"), ("ffl", "\ufb04"), ("ff", "\ufb00"), ("fi", "\ufb01"), ("fl", "\ufb02"))
TYPESET_FONT_GLOBS = (
    "/usr/share/texmf/fonts/opentype/public/lm/lm*.otf",                 # fonts-lmodern
    "/usr/share/texmf/fonts/opentype/public/tex-gyre/texgyre*.otf",      # fonts-texgyre
    "/usr/share/fonts/opentype/urw-base35/*.otf",                        # fonts-urw-base35
    "/usr/share/fonts/truetype/freefont/*.ttf",                          # fonts-freefont-ttf
    "/usr/share/fonts/truetype/noto/NotoMono*.ttf",                      # fonts-noto-mono
    "/usr/share/fonts/truetype/dejavu/*.ttf",                            # fonts-dejavu-core / -extra
    "/usr/share/fonts/truetype/liberation*/*.ttf",                       # fonts-liberation(2)
)
NOT_TEXT_FONTS = ("math", "Math", "D050000L", "StandardSymbols", "dunh", "ExtraLight", "lmmonocaps",
                  "lmromancaps")
MONO_HINTS = ("mono", "Mono", "cursor", "Typewriter", "Courier")


@lru_cache(maxsize=1)
def font_paths() -> tuple[str, ...]:
    """Every text font of the typeset families found on this machine, plus Computer Modern."""
    paths = sorted({p for g in TYPESET_FONT_GLOBS for p in glob.glob(g)})
    paths = [p for p in paths if not any(k in os.path.basename(p) for k in NOT_TEXT_FONTS)]
    out = tuple(paths) + data.extra_font_paths()
    if len(out) < 10:
        raise RuntimeError("few typeset fonts found; install requirements/apt-document.txt "
                           "(fonts-lmodern, fonts-urw-base35, fonts-texgyre, ...) to train on typeset lines")
    return out


@lru_cache(maxsize=1)
def mono_font_paths() -> tuple[str, ...]:
    return tuple(p for p in font_paths() if any(k in p for k in MONO_HINTS))


def clean(text: str) -> str:
    return " ".join("".join(c for c in text if c in CHARSET).split())


def _curly(text: str, rng: random.Random) -> str:
    """Straight quotes, double hyphens and triple dots as a typesetter sets them."""
    out, double_open, single_open = [], True, True
    for i, c in enumerate(text):
        if c == '"':
            out.append("\u201c" if double_open else "\u201d")
            double_open = not double_open
        elif c == "'":
            prev = text[i - 1] if i else " "
            out.append("\u2019" if prev.isalnum() or not single_open else "\u2018")
            if not prev.isalnum():
                single_open = not single_open
        else:
            out.append(c)
    s = "".join(out).replace("...", "\u2026")
    s = s.replace("--", rng.choice(("\u2014", "\u2013"))).replace(" - ", rng.choice((" \u2013 ", " \u2014 ")))
    return s


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return data.words_up_to(rng, data.docstring_words(), lo, hi)


def _title(rng: random.Random) -> str:
    return " ".join(w.strip(".,:;()") .capitalize() for w in _words(rng, 6, 20).split())


def _toc(rng: random.Random) -> str:
    num = ".".join(str(rng.randrange(1, 13)) for _ in range(rng.randrange(1, 4)))
    head = f"{num} {_title(rng)}"[:22]
    page = str(rng.randrange(1, 400))
    leader = rng.choice((".", ". ", " . "))
    fill = max(2, data.MAX_CHARS - len(head) - len(page) - 2)
    return f"{head} {(leader * fill)[:fill].strip()} {page}"


def _option(rng: random.Random) -> str:
    w = [x.strip(".,:;()'\"").lower() for x in rng.sample(data.docstring_words(), 3)]
    w = [x for x in w if x.isalnum()] or ["file"]
    forms = (f"-{w[0][0]}, --{w[0]}", f"--{w[0]}={w[-1].upper()}", f"-{w[0][0]} {w[-1].upper()}",
             f"{w[0]}({rng.randrange(1, 9)})", f"{w[0]} [OPTION]... [FILE]...", f"[--{w[0]}] [-{w[-1][0]}]")
    s = rng.choice(forms)
    if rng.random() < 0.4:
        s += " " + _words(rng, 4, max(4, data.MAX_CHARS - len(s) - 1))
    return s


def _bullet(rng: random.Random) -> str:
    mark = rng.choice(("\u2022 ", "\u2022 ", "\u2013 ", "- ", "* ", "\u00b7 ", f"{rng.randrange(1, 20)}. ",
                       f"({chr(97 + rng.randrange(8))}) ", f"{rng.randrange(1, 10)}) "))
    return mark + _words(rng, 4, data.MAX_CHARS - len(mark))


def _punctuated(rng: random.Random) -> str:
    """Prose with the punctuation of running text made denser (the `,`/`.` and `;`/`:` cases)."""
    words = _words(rng, 10, data.MAX_CHARS).split()
    out = []
    for w in words:
        r = rng.random()
        if r < 0.15:
            w += rng.choice((",", ";", ":", ".", "?", "!"))
        elif r < 0.2:
            w = rng.choice(("(", "[", "\u201c", "\u2018", '"')) + w + rng.choice((")", "]", "\u201d", "\u2019", '"'))
        out.append(w)
    return " ".join(out)


def _symbols(rng: random.Random) -> str:
    s = rng.choice((f"\u00a7{rng.randrange(1, 30)}.{rng.randrange(1, 9)}", f"{rng.randrange(-40, 300)}\u00b0C",
                    f"\u00a9 {rng.randrange(1980, 2030)}", f"{rng.randrange(2, 99)} \u00d7 {rng.randrange(2, 99)}",
                    f"\u00b1{rng.uniform(0, 9):.2f}", f"\u00a3{rng.uniform(0, 999):.2f}",
                    f"\u20ac{rng.uniform(0, 999):.2f}", "\u00abtext\u00bb", f"Name\u00ae {rng.randrange(100)}"))
    return (s + " " + _words(rng, 4, max(4, data.MAX_CHARS - len(s) - 1))).strip()


def _hyphenated(rng: random.Random) -> str:
    """A justified line's end: running words, then the first part of a word broken by a hyphen."""
    long_words = [w for w in data.docstring_words() if len(w) >= 7 and w.isalpha()]
    w = rng.choice(long_words)
    head = w[:rng.randrange(2, len(w) - 2)] + "-"
    return (_words(rng, 4, max(4, data.MAX_CHARS - len(head) - 1)) + " " + head).strip()


# man pages whose printed lines train the reader; `document.bench --real` reads tar and grep,
# document.calibrate ls, and the development set (document/devset.py) its own: none of those here
TRAIN_MAN_PAGES = ("cp", "mv", "rm", "cat", "chmod", "chown", "ln", "touch", "mkdir", "head", "tail", "wc", "sort",
                   "uniq", "cut", "date", "df", "diff", "xargs", "gzip", "env", "kill", "nice", "tee", "tr", "rsync",
                   "make", "less", "ps", "top", "git", "python3", "patch", "ip", "mount", "ssh-keygen")


@lru_cache(maxsize=1)
def man_lines() -> tuple[str, ...]:
    """The lines of the training man pages as `man | col -b` prints them (80 columns), cut into
    pieces of at most data.MAX_CHARS characters at spaces; empty when man is missing."""
    import shutil
    import subprocess
    if shutil.which("man") is None:
        return ()
    out = []
    for name in TRAIN_MAN_PAGES:
        text = subprocess.run(f"MANWIDTH=80 man {name} 2>/dev/null | col -b", shell=True, capture_output=True,
                              text=True).stdout
        for raw in text.splitlines():
            words = clean(raw).split()
            while words:
                take = []
                while words and len(" ".join(take + words[:1])) <= data.MAX_CHARS:
                    take.append(words.pop(0))
                piece = " ".join(take) or words.pop(0)[:data.MAX_CHARS]
                out.append(piece)
    return tuple(out)


@lru_cache(maxsize=1)
def _man_set() -> frozenset:
    return frozenset(man_lines())


def _man(rng: random.Random) -> str:
    lines = man_lines()
    return rng.choice(lines) if lines else _option(rng)


STYLES = (   # (weight, text maker)
    (0.26, lambda rng: _words(rng, 4, data.MAX_CHARS)),
    (0.05, _hyphenated),
    (0.10, _man),
    (0.14, _punctuated),
    (0.12, lambda rng: rng.choice(data.code_lines())),
    (0.10, _bullet),
    (0.06, _toc),
    (0.08, _option),
    (0.06, lambda rng: rng.choice((_title(rng), _title(rng).upper(),
                                   f"{rng.randrange(1, 12)}.{rng.randrange(1, 9)} {_title(rng)}"))),
    (0.06, lambda rng: data.sample_text(rng, "train")),
    (0.04, _symbols),
    (0.04, lambda rng: " ".join(data._number(rng) for _ in range(rng.randrange(1, 4)))),
)


def sample_text(rng: random.Random) -> str:
    """One typeset training line (never a held-out text), at most data.MAX_CHARS characters."""
    weights = [w for w, _ in STYLES]
    while True:
        make = rng.choices([f for _, f in STYLES], weights)[0]
        text = make(rng)
        if rng.random() < 0.5:
            text = _curly(text, rng)
        text = clean(text)[:data.MAX_CHARS].strip()
        if text and not data.is_held_out(text):
            return text


@lru_cache(maxsize=None)
def missing_glyphs(path: str) -> frozenset:
    """Characters of CHARSET (and ligatures) the font has no glyph for."""
    font = data._font(path, 24)
    notdef = np.asarray(font.getmask("\uffff"))
    out = set()
    for c in CHARSET[1:] + "".join(lig for _, lig in LIGATURES):
        m = np.asarray(font.getmask(c))
        if m.size == 0 or m.max() == 0 or (m.shape == notdef.shape and (m == notdef).all()):
            out.add(c)
    return frozenset(out)


def _pick_font(text: str, rng: random.Random) -> str:
    code_like = sum(c in "{}[]()=_;<>" for c in text) >= 2 or text in _man_set()   # man pages print in mono
    pool = mono_font_paths() if code_like and rng.random() < 0.6 else font_paths()
    for _ in range(50):
        path = rng.choice(pool)
        if not missing_glyphs(path) & set(text):
            return path
    ok = [p for p in font_paths() if not missing_glyphs(p) & set(text)]
    if not ok:
        raise ValueError(f"no typeset font has every glyph of {text!r}")
    return rng.choice(ok)


def render(text: str, rng: random.Random) -> Image.Image:
    """One typeset line as a page crop: grayscale, the line in the middle, maybe parts of the lines
    above and below, degraded as a printed and scanned page. Words are set one by one (document.
    line_layout): stretched spaces of a justified line, a run in the family's italic or bold, small
    caps, a footnote's size."""
    path = _pick_font(text, rng)
    size = rng.randrange(14, 46) if rng.random() < 0.85 else rng.randrange(11, 20)   # body 8-12 pt; footnotes
    font = data._font(path, size)
    bg = rng.randrange(200, 256) if rng.random() < 0.7 else 255
    fg = rng.randrange(0, 70)
    lead = int(size * rng.uniform(1.1, 1.5))
    pieces = line_layout.set_line(text, path, size, rng, font_paths(), missing_glyphs, LIGATURES)
    w = int(line_layout.width(pieces) + 4 * size)
    img = Image.new("L", (w, 3 * lead + size), bg)
    draw = ImageDraw.Draw(img)
    x = size
    y = lead
    left, top, right, bottom = line_layout.draw(draw, pieces, x, y + font.getmetrics()[0], fg)
    if rng.random() < 0.08:                            # underlined heading or link
        ul = y + int(font.getmetrics()[0] + size * 0.08)
        draw.line((left, ul, right, ul), fill=fg, width=max(1, size // 16))
        bottom = max(bottom, ul + max(1, size // 16))
    if rng.random() < 0.4:                             # neighbouring lines a detector's box takes in
        for dy in (-lead, lead):
            other = clean(sample_text(rng))
            if not missing_glyphs(path) & set(other):
                draw.text((x + rng.randrange(-size, size), y + dy), other, font=font, fill=fg)
    h = bottom - top
    m = lambda: int(rng.uniform(0.05, 0.4) * h)        # noqa: E731 - a detector's uneven margins
    box = (max(0, left - m()), max(0, top - m()), min(img.width, right + m()), min(img.height, bottom + m()))
    if rng.random() < 0.3:
        img = img.rotate(rng.uniform(-0.8, 0.8), resample=Image.BILINEAR, fillcolor=bg, center=(x, y + h / 2))
    img = img.crop(box)
    return degrade(img, rng)


def degrade(img: Image.Image, rng: random.Random) -> Image.Image:
    """Printing and scanning: lower resolution, blur, thresholding, noise, JPEG."""
    if rng.random() < 0.35:                            # scanned at a lower resolution, shown larger
        f = rng.uniform(0.45, 0.9)
        small = img.resize((max(2, int(img.width * f)), max(2, int(img.height * f))), Image.BILINEAR)
        img = small.resize(img.size, Image.BILINEAR) if rng.random() < 0.5 else small
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.1)))
    if rng.random() < 0.1:                             # a bilevel scan
        t = rng.randrange(100, 190)
        img = img.point(lambda v: 255 if v > t else 0)
    if rng.random() < 0.3:
        noise = np.random.default_rng(rng.randrange(2 ** 31)).normal(0, rng.uniform(2, 12), (img.height, img.width))
        img = Image.fromarray(np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8))
    if rng.random() < 0.3:
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=rng.randrange(25, 90))
        img = Image.open(io.BytesIO(buf.getvalue())).convert("L")
    return img


def make_samples(n: int, seed: int) -> list[data.LineSample]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = sample_text(rng)
        out.append(data.LineSample(text, render(text, rng)))
    return out
