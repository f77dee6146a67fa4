"""A typeset line set word by word, as TeX, browsers and office suites set it: the spaces of a
justified line stretched, a run of words in the family's italic or bold, small caps (lowercase
letters drawn as smaller capitals), ligatures; all pieces on one baseline.

The label is the text itself (single spaces, the letters a ligature replaces, small caps in their
own case), which is what a PDF's text layer holds for such a line.
"""
from __future__ import annotations

import os
import random
import re
from functools import lru_cache

from . import data

JUSTIFIED = 0.35        # share of lines whose spaces are stretched
STYLED_RUN = 0.3        # share of lines with a run of words in another face of the family
SMALL_CAPS = 0.05       # share of lines with a run in small caps
SMALL_CAP_SCALE = 0.78  # a small capital's height against a capital's


def family_key(path: str) -> tuple[str, str]:
    """(folder, family) of a font file: its name without the weight/slant suffix."""
    stem = os.path.splitext(os.path.basename(path))[0].split("-")[0]
    return os.path.dirname(path), re.sub(r"(Bold|Italic|Oblique)+$", "", stem)


@lru_cache(maxsize=None)
def _families(paths: tuple[str, ...]) -> dict:
    out: dict = {}
    for p in paths:
        out.setdefault(family_key(p), []).append(p)
    return out


def variants(path: str, paths: tuple[str, ...]) -> list[str]:
    """The other faces (italic, bold, ...) of `path`'s family among `paths`."""
    return [p for p in _families(paths).get(family_key(path), []) if p != path]


def set_line(text: str, path: str, size: int, rng: random.Random, paths: tuple[str, ...],
             missing, ligatures) -> list[tuple[float, float, str, object]]:
    """The pieces of a line, (x, dy, string, font) each, x from the line's start, dy from the
    baseline. `missing(path)` -> the characters the font lacks; `ligatures` -> (letters, glyph)."""
    font = data._font(path, size)
    words = text.split(" ")
    space = font.getlength(" ") * (rng.uniform(1.3, 2.6) if rng.random() < JUSTIFIED else rng.uniform(0.9, 1.1))
    faces = [path] * len(words)
    small = [False] * len(words)
    a = rng.randrange(len(words))
    b = min(len(words), a + rng.randrange(1, 5))
    span = set(" ".join(words[a:b]))
    if rng.random() < STYLED_RUN:
        ok = [v for v in variants(path, paths) if not missing(v) & span]
        if ok:
            faces[a:b] = [rng.choice(ok)] * (b - a)
    elif rng.random() < SMALL_CAPS and not missing(path) & set("".join(words[a:b]).upper()):
        small[a:b] = [True] * (b - a)
    use_ligatures = rng.random() < 0.5
    pieces, x = [], 0.0
    for word, face, sc in zip(words, faces, small):
        f = data._font(face, size)
        for run, dy, rf in _runs(word, f, face, size, sc):
            if use_ligatures:
                for letters, glyph in ligatures:
                    if glyph not in missing(face):
                        run = run.replace(letters, glyph)
            pieces.append((x, dy, run, rf))
            x += rf.getlength(run)
        x += space
    return pieces


def _runs(word: str, font, path: str, size: int, small_caps: bool):
    """(string, dy, font) runs of one word: the word itself, or in small caps its lowercase runs as
    capitals of the smaller size."""
    if not small_caps:
        return [(word, 0, font)]
    small = data._font(path, max(6, round(size * SMALL_CAP_SCALE)))
    return [(m.group().upper(), 0, small) if m.group().islower() else (m.group(), 0, font)
            for m in re.finditer(r"[a-z]+|[^a-z]+", word)]


def width(pieces) -> float:
    x, _, s, f = pieces[-1]
    return x + f.getlength(s)


def draw(canvas, pieces, x0: float, baseline: float, fill) -> tuple[int, int, int, int]:
    """Draw the pieces with their baseline at `baseline`; the union of their ink boxes."""
    box = None
    for x, dy, s, f in pieces:
        at = (x0 + x, baseline + dy)
        canvas.text(at, s, font=f, fill=fill, anchor="ls")
        b = canvas.textbbox(at, s, font=f, anchor="ls")
        box = b if box is None else (min(box[0], b[0]), min(box[1], b[1]), max(box[2], b[2]), max(box[3], b[3]))
    return box
