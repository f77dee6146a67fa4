"""Synthetic OCR lines: real text (stdlib docstrings and source, numbers, dates, prices) rendered
with PIL in many fonts, sizes, colours, with noise, blur and slight rotation; a fixed held-out split.

Text lines are at most `MAX_CHARS` characters of printable ASCII. The held-out split is by text:
a line whose hash falls in bucket 0 of 20 never appears in training.
"""
from __future__ import annotations

import glob
import hashlib
import importlib
import inspect
import os
import random
import string
import sysconfig
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

MAX_CHARS = 32
HEIGHT, WIDTH = 32, 384          # model input (H, W); wider lines are squeezed to WIDTH
CHARSET = "".join(chr(c) for c in range(32, 127))
FONT_DIRS = ("/usr/share/fonts/truetype", "/usr/share/fonts/opentype")
STDLIB_MODULES = (
    "os", "sys", "re", "json", "math", "string", "collections", "itertools", "functools", "pathlib",
    "datetime", "random", "statistics", "decimal", "fractions", "textwrap", "shutil", "subprocess",
    "argparse", "logging", "unittest", "email", "http.client", "urllib.parse", "csv", "sqlite3",
    "threading", "asyncio", "socket", "zipfile", "tarfile", "gzip", "hashlib", "base64", "struct",
    "heapq", "bisect", "array", "enum", "typing", "dataclasses", "contextlib", "inspect", "ast",
    "tokenize", "pickle", "copy", "pprint", "difflib", "calendar", "time", "locale", "gettext",
    "io", "tempfile", "glob", "fnmatch", "operator", "weakref", "abc", "numbers", "queue", "sched",
    "smtplib", "ftplib", "imaplib", "uuid", "html", "xml.dom.minidom", "configparser", "platform",
)


def is_held_out(text: str) -> bool:
    return int(hashlib.md5(text.encode()).hexdigest(), 16) % 20 == 0


def clean(text: str) -> str:
    return " ".join("".join(c for c in text if c in CHARSET).split())


@lru_cache(maxsize=1)
def docstring_words() -> tuple[str, ...]:
    """Running text: the words of the docstrings of ~70 standard-library modules, in order."""
    words = []
    for name in STDLIB_MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:   # an optional module missing on this Python
            continue
        docs = [mod.__doc__ or ""]
        for _, obj in inspect.getmembers(mod):
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and isinstance(getattr(obj, "__doc__", None), str):
                docs.append(obj.__doc__)
        for d in docs:
            words.extend(clean(d).split())
    return tuple(w for w in words if len(w) <= MAX_CHARS)


@lru_cache(maxsize=1)
def code_lines() -> tuple[str, ...]:
    """Stripped source lines of the standard library (code, comments, strings)."""
    lines = []
    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:120]:
        with open(path, encoding="utf-8", errors="ignore") as f:
            for raw in f:
                s = clean(raw)
                if 3 <= len(s) <= MAX_CHARS:
                    lines.append(s)
    return tuple(lines)


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
NUMBER_KINDS = (     # one random number-like string each: amount, price, ISO date, date, time, percent, phone, integer
    lambda rng: f"{rng.uniform(0, 10000):,.2f}",
    lambda rng: f"${rng.uniform(0, 999):.2f}",
    lambda rng: f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
    lambda rng: f"{rng.randrange(1, 29)} {rng.choice(MONTHS)} {rng.randrange(1950, 2040)}",
    lambda rng: f"{rng.randrange(0, 24):02d}:{rng.randrange(60):02d}",
    lambda rng: f"{rng.uniform(-100, 100):.{rng.randrange(1, 4)}f}%",
    lambda rng: "+" + "".join(rng.choice(string.digits) for _ in range(rng.randrange(6, 12))),
    lambda rng: str(rng.randrange(0, 10 ** rng.randrange(1, 8))),
)


def _number(rng: random.Random) -> str:
    return NUMBER_KINDS[rng.randrange(len(NUMBER_KINDS))](rng)


def _prose(rng: random.Random, words: tuple[str, ...]) -> str:
    return words_up_to(rng, words, 4, MAX_CHARS)


def words_up_to(rng: random.Random, words, lo: int, hi: int) -> str:
    """Consecutive words from a random start, as many as fit a random length in [lo, hi] characters
    (the first word cut to `hi` when none fits)."""
    start = rng.randrange(len(words))
    target = rng.randrange(lo, hi + 1)
    out = ""
    for w in words[start:start + 40]:
        nxt = (out + " " + w).strip()
        if len(nxt) > target:
            break
        out = nxt
    return out or words[start][:hi]


def _mixed(rng: random.Random, words: tuple[str, ...]) -> str:
    labels = ["Invoice No.", "Total:", "Date:", "Page", "Amount", "Ref", "Qty", "Item", "Tel.", "Due"]
    s = f"{rng.choice(labels + list(rng.sample(words, 2)))} {_number(rng)}"
    if rng.random() < 0.4:
        s += " " + rng.choice(words)
    return s[:MAX_CHARS].strip()


def sample_text(rng: random.Random, split: str = "train") -> str:
    """One line of text of the given split ("train" or "heldout")."""
    words, code = docstring_words(), code_lines()
    while True:
        r = rng.random()
        if r < 0.5:
            text = _prose(rng, words)
        elif r < 0.65:
            text = rng.choice(code)
        elif r < 0.85:
            text = _mixed(rng, words)
        else:
            text = " ".join(_number(rng) for _ in range(rng.randrange(1, 4)))[:MAX_CHARS].strip()
        if r < 0.1 and text:
            text = text.upper() if rng.random() < 0.5 else text.capitalize()
        if text and (is_held_out(text) == (split == "heldout")):
            return text


# the base families (fonts-dejavu-core/-extra, fonts-liberation, fonts-liberation2): the held-out set
# renders in these alone, so fonts installed for training (document.typeset) leave it unchanged
BASE_FONT_FAMILIES = ("dejavu", "liberation", "liberation2")


@lru_cache(maxsize=1)
def font_paths() -> tuple[str, ...]:
    paths = sorted(p for d in FONT_DIRS for p in glob.glob(os.path.join(d, "**", "*.[ot]tf"), recursive=True)
                   if "MathTeX" not in p and os.path.basename(os.path.dirname(p)) in BASE_FONT_FAMILIES)
    if not paths:
        raise RuntimeError("no TrueType fonts found; install fonts-dejavu-core (apt) to render OCR data")
    return tuple(paths)


# Computer Modern (the TeX fonts most PDFs are set in: roman, sans, typewriter) from the KaTeX
# fonts that gradio (requirements/core.txt) ships; used for training only, so the held-out set
# (`heldout_set`) renders in the base fonts alone. Fonts lacking a glyph of a text are not used for it.
EXTRA_FONT_GLOBS = ("KaTeX_Main-*.ttf", "KaTeX_SansSerif-*.ttf", "KaTeX_Typewriter-*.ttf")


@lru_cache(maxsize=1)
def extra_font_paths() -> tuple[str, ...]:
    import importlib.util
    spec = importlib.util.find_spec("gradio")
    if spec is None or not spec.origin:
        return ()
    assets = os.path.join(os.path.dirname(spec.origin), "templates", "frontend", "assets")
    return tuple(sorted(p for g in EXTRA_FONT_GLOBS for p in glob.glob(os.path.join(assets, g))))


@lru_cache(maxsize=1)
def training_font_paths() -> tuple[str, ...]:
    return font_paths() + extra_font_paths()


@lru_cache(maxsize=None)
def missing_glyphs(path: str) -> frozenset:
    """Printable characters the font has no glyph for (renders as blank or as the .notdef box)."""
    font = _font(path, 24)
    notdef = np.asarray(font.getmask("\uffff"))
    out = set()
    for c in CHARSET[1:]:
        m = np.asarray(font.getmask(c))
        if m.size == 0 or m.max() == 0 or (m.shape == notdef.shape and (m == notdef).all()):
            out.add(c)
    return frozenset(out)


@lru_cache(maxsize=256)
def _font(path: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size)


def render_line(text: str, rng: random.Random, clean_style: bool = False,
                fonts: tuple[str, ...] | None = None) -> Image.Image:
    """Render one text line as a grayscale PIL image cropped around the text (random margins), in
    a font of `fonts` (default: the system fonts) that has every glyph of the text."""
    fonts = fonts or font_paths()
    if all(missing_glyphs(f) & set(text) for f in fonts):
        raise ValueError(f"no font of {len(fonts)} has every glyph of {text!r}; install one that does")
    path = rng.choice(fonts)
    while missing_glyphs(path) & set(text):
        path = rng.choice(fonts)
    font = _font(path, 28 if clean_style else rng.randrange(18, 44))
    bg = 255 if clean_style else rng.randrange(170, 256)
    fg = 0 if clean_style else rng.randrange(0, max(1, bg - 110))
    left, top, right, bottom = font.getbbox(text)
    pad = 8
    img = Image.new("L", (right - left + 2 * pad, max(bottom, font.size) - min(top, 0) + 2 * pad), bg)
    ImageDraw.Draw(img).text((pad - left, pad - min(top, 0)), text, font=font, fill=fg)
    if not clean_style:
        if rng.random() < 0.5:
            img = img.rotate(rng.uniform(-1.5, 1.5), resample=Image.BILINEAR, expand=False, fillcolor=bg)
        if rng.random() < 0.4:
            img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.2, 1.0)))
    # crop: text box plus random margins (like a detector's box)
    arr = np.asarray(img)
    ink = np.argwhere(arr < (int(bg) + int(fg)) / 2)
    if ink.size == 0:
        return img
    (y0, x0), (y1, x1) = ink.min(0), ink.max(0)
    min_h = int(0.7 * font.size)              # punctuation-only lines still get a line-high box
    if y1 - y0 < min_h:
        mid = (y0 + y1) // 2
        y0, y1 = max(0, mid - min_h // 2), min(img.height - 1, mid + min_h // 2)
    h = y1 - y0
    m = (lambda: 0.15) if clean_style else (lambda: rng.uniform(0.05, 0.35))
    box = (max(0, x0 - int(m() * h)), max(0, y0 - int(m() * h)),
           min(img.width, x1 + 1 + int(m() * h)), min(img.height, y1 + 1 + int(m() * h)))
    img = img.crop(box)
    if not clean_style and rng.random() < 0.5:
        noise = np.random.default_rng(rng.randrange(2 ** 31)).normal(0, rng.uniform(3, 15), (img.height, img.width))
        img = Image.fromarray(np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8))
    return img


TIGHT_MARGIN = 0.15     # margin kept around the ink by `tight_box`, in units of the ink height


def _ink_band(rows: np.ndarray, min_gap: int) -> tuple[int, int] | None:
    """[start, end) of the run of ink rows with the most ink, with runs closer than min_gap merged
    (an i's dot, a colon); None if no row has ink."""
    idx = np.nonzero(rows)[0]
    if idx.size == 0:
        return None
    cuts = np.nonzero(np.diff(idx) > min_gap)[0]
    starts, ends = np.r_[idx[0], idx[cuts + 1]], np.r_[idx[cuts], idx[-1]] + 1
    mass = [rows[a:b].sum() for a, b in zip(starts, ends)]
    k = int(np.argmax(mass))
    return int(starts[k]), int(ends[k])


def _underscore_rows(ink: np.ndarray, y0: int, y1: int) -> int:
    """The band's new end: a thin run of ink rows just below the band [y0, y1) that holds a solid
    horizontal stroke (an underscore under a line without descenders) joins the band; anything
    else below (the tops of the next line) stays out."""
    bh = y1 - y0
    stop = min(ink.shape[0], y1 + max(2, int(0.25 * bh)) + 1)
    rows = np.nonzero(ink[y1:stop].any(1))[0]
    if rows.size == 0:
        return y1
    a = y1 + int(rows[0])
    b = a
    while b < ink.shape[0] and ink[b].any() and b - a <= max(1, int(0.2 * bh)):
        b += 1
    if b - a > max(1, int(0.2 * bh)) or (b < ink.shape[0] and ink[b].any()):
        return y1                                        # too thick for a stroke: not an underscore
    run = 0
    for c in ink[a:b].any(0):                            # longest horizontal run of ink columns
        run = run + 1 if c else 0
        if run >= 0.3 * bh:
            return b
    return y1


def tight_box(arr: np.ndarray) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of a line's text in a contrast-normalised crop (text dark, 0..1): the main
    band of ink rows (fragments of neighbouring lines dropped) and its ink columns, plus
    TIGHT_MARGIN of the band height on each side. Detector boxes (loose, uneven margins) and
    training crops then look alike to the model."""
    h, w = arr.shape
    ink = arr < 0.5
    rows = ink.sum(1) * (ink.sum(1) >= 2)
    band = _ink_band(rows, max(1, h // 10))
    if band is None:
        return 0, 0, w, h
    y0, y1 = band
    y1 = _underscore_rows(ink, y0, y1)
    cols = np.nonzero(ink[y0:y1].sum(0) >= 1)[0]
    m = int(round(TIGHT_MARGIN * (y1 - y0))) + 1
    return max(0, int(cols[0]) - m), max(0, y0 - m), min(w, int(cols[-1]) + 1 + m), min(h, y1 + m)


def flatten(g: Image.Image) -> Image.Image:
    """Dark text on an even light background: each pixel divided by the local background (a max
    filter wider than a stroke), for the polarity (dark-on-light or light-on-dark) whose result is
    mostly background. Removes the shading of scans and photos; a clean render is unchanged."""
    from scipy.ndimage import maximum_filter
    size = int(np.clip(g.height // 4, 3, 31)) | 1
    best = None
    gray = np.asarray(g, dtype=np.float32)
    for a in (gray, 255.0 - gray):
        f = np.clip(a / np.maximum(maximum_filter(a, size), 1.0), 0, 1)
        if best is None or np.median(f) > np.median(best):
            best = f
    return Image.fromarray((best * 255).astype(np.uint8))


def normalise_contrast(gray: np.ndarray) -> np.ndarray:
    """An 8-bit grayscale image -> float32 in [0, 1], text dark on light, contrast stretched
    between its 2nd and 98th percentiles."""
    arr = np.asarray(gray, dtype=np.float32) / 255.0
    inverted = 2 * np.count_nonzero(gray < 128) > gray.size     # mostly dark: light text on dark
    if inverted:
        arr = 1.0 - arr
    lo, hi = _percentiles_2_98(gray, inverted)
    return np.clip((arr - lo) / max(hi - lo, 0.1), 0, 1)


def _percentiles_2_98(gray: np.ndarray, inverted: bool) -> tuple[np.float64, np.float64]:
    """np.percentile(arr, [2, 98]) of `normalise_contrast`'s float image, bit for bit, from a 256-bin
    histogram instead of a partition of every pixel (4x faster)."""
    counts = np.bincount(gray.ravel(), minlength=256)
    values = np.arange(256, dtype=np.float32) / 255.0           # each bin's float32 value, ascending
    if inverted:
        counts, values = counts[::-1], 1.0 - values[::-1]
    rank_end = np.cumsum(counts)                                # sorted ranks < rank_end[i] are in bin i
    out = []
    for q in (0.02, 0.98):
        at = (gray.size - 1) * q                                # numpy's "linear" method
        below = int(at)
        a, b = (values[np.searchsorted(rank_end, r, side="right")] for r in (below, min(below + 1, gray.size - 1)))
        t, step = at - below, float(b - a)                      # float32 step, float64 lerp, as numpy
        out.append(np.float64(float(b) - step * (1 - t) if t >= 0.5 else float(a) + step * t))
    return out[0], out[1]


def text_rows(img: Image.Image) -> tuple[int, int]:
    """The rows [y0, y1) of a line image's text band, with the margin `to_model_input` keeps."""
    _, y0, _, y1 = tight_box(normalise_contrast(np.asarray(flatten(img.convert("L")))))
    return y0, y1


def to_model_input(img: Image.Image) -> np.ndarray:
    """Any PIL line image -> (HEIGHT, WIDTH) float32 in [0, 1], text dark on light: cropped to the
    text (`tight_box`), height scaled to HEIGHT (aspect kept, squeezed if wider than WIDTH),
    right-padded with the background."""
    g = img.convert("L")
    if g.width < 2 or g.height < 2:
        raise ValueError(f"line image of {g.width}x{g.height} pixels is too small to read; crop a text line "
                         "of at least 2x2 pixels")
    g = flatten(g)
    full = normalise_contrast(np.asarray(g))
    x0, y0, x1, y1 = tight_box(full)
    g = g.crop((x0, y0, x1, y1))
    w = max(1, min(WIDTH, round(g.width * HEIGHT / g.height)))
    arr = normalise_contrast(np.asarray(g.resize((w, HEIGHT), Image.BILINEAR)))
    out = np.ones((HEIGHT, WIDTH), dtype=np.float32)
    out[:, :w] = arr
    return out


@dataclass
class LineSample:
    text: str
    image: Image.Image


def make_samples(n: int, seed: int, split: str = "train", clean_style: bool = False,
                 fonts: tuple[str, ...] | None = None) -> list[LineSample]:
    """n lines of the split; `fonts` defaults to the system fonts (`document.train` passes
    `training_font_paths()`)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = sample_text(rng, split)
        out.append(LineSample(text, render_line(text, rng, clean_style, fonts)))
    return out


def heldout_set(n: int = 200, seed: int = 12345) -> list[LineSample]:
    """The fixed held-out lines (texts never trained on) used by tests and the benchmark."""
    return make_samples(n, seed, "heldout")
