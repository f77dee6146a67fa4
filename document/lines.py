"""Line geometry shared by the reader and the OCR: our own projection detector, and cutting a long
line at word gaps into pieces the model reads."""
from __future__ import annotations

import numpy as np
from PIL import Image

from . import data

PIECE_WIDTH = 0.8        # long lines are cut into pieces at most this fraction of the model's width (chosen on validation lines)
# ... and of at most this many words: the model reads up to 32 characters, which one-letter words (a
# table of contents' leader dots, ". . . .") fill in a third of the width prose does
MAX_WORDS = 12


def pad_box(x0, y0, x1, y1, size, frac: float = 0.12):
    h = y1 - y0
    return (int(max(0, x0 - frac * h)), int(max(0, y0 - frac * h)),
            int(min(size[0], x1 + frac * h)), int(min(size[1], y1 + frac * h)))


def ink_mask(gray: np.ndarray) -> np.ndarray:
    """Bool ink mask: pixels clearly darker than the local background (rows' median)."""
    bg = np.median(gray, axis=1, keepdims=True)
    spread = max(float(np.percentile(gray, 95) - np.percentile(gray, 5)), 1.0)
    return gray < bg - 0.25 * spread


def projection_lines(image: Image.Image) -> list[tuple[int, int, int, int]]:
    """Our own detector: rows with ink form bands; each band's ink columns give its x extent."""
    gray = np.asarray(image.convert("L"), dtype=np.float32)
    ink = ink_mask(gray)
    rows = ink.sum(1) > max(2, 0.002 * ink.shape[1])
    lines = []
    for y0, y1 in ink_runs(rows, min_gap=1):
        if y1 - y0 < 4:
            continue
        cols = np.nonzero(ink[y0:y1].any(0))[0]
        if cols.size:
            lines.append(pad_box(cols[0], y0, cols[-1] + 1, y1, image.size, 0.2))
    return lines


def ink_runs(flags: np.ndarray, min_gap: int) -> list[tuple[int, int]]:
    """[start, end) runs of True, merging runs separated by fewer than min_gap False entries."""
    f = np.asarray(flags, dtype=bool)
    if not f.any():
        return []
    edges = np.diff(np.concatenate(([0], f.view(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    apart = np.flatnonzero(starts[1:] - ends[:-1] >= min_gap)        # gaps wide enough to part two runs
    return list(zip(np.r_[starts[0], starts[apart + 1]].tolist(), np.r_[ends[apart], ends[-1]].tolist()))


def split_line(gray: np.ndarray, box: tuple[int, int, int, int]) -> tuple[list[tuple[int, int, int, int]], list[bool]]:
    """Cut a line box into pieces of at most PIECE_WIDTH of what the model reads (WIDTH/HEIGHT per
    unit of text height, about 27 characters of prose) and of at most MAX_WORDS words, without
    overlap. A piece too wide or with too many words is cut
    in two at its widest gap between ink runs (a word space; among gaps nearly as wide, the one
    nearest its middle), recursively; a word wider than the model with no gap is cut at the
    emptiest ink column near its middle. Each piece keeps a margin of up to 0.15 text heights,
    never reaching into the next word. Returns the boxes, and for each whether a word space comes
    before it (False for the first, and after a cut inside a word: a long path or URL)."""
    x0, y0, x1, y1 = box
    if x1 - x0 < 2 or y1 - y0 < 2:
        return [box], [False]
    tx0, ty0, tx1, ty1 = data.tight_box(data.normalise_contrast(gray[y0:y1, x0:x1].astype(np.uint8)))
    h = max(ty1 - ty0, 1)                       # the text's height, as the model will see it
    max_w = int(PIECE_WIDTH * data.WIDTH / data.HEIGHT * h)
    hard_w = int(0.95 * data.WIDTH / data.HEIGHT * h)
    if x1 - x0 <= max_w:
        return [box], [False]
    band = ink_mask(gray[y0 + ty0:y0 + ty1, x0:x1])              # the text band only: no neighbours
    cols, weight = band.any(0), band.sum(0)
    runs = ink_runs(cols, min_gap=1)
    if not runs:
        return [box], [False]
    min_word_gap = max(2, int(WORD_GAP * h))
    gaps = [(b, c) for (_, b), (c, _) in zip(runs, runs[1:])]     # [end of ink, start of next ink)

    def words(a: int, b: int) -> int:
        return 1 + sum(g1 - g0 >= min_word_gap for g0, g1 in gaps if a < g0 and g1 < b)

    def cut(a: int, b: int) -> list[tuple[int, int]]:
        if b - a <= max_w and words(a, b) <= MAX_WORDS:
            return [(a, b)]
        inner = [(g0, g1) for g0, g1 in gaps if a < g0 and g1 < b]
        widest = max((g1 - g0 for g0, g1 in inner), default=0)
        if widest >= min_word_gap or (inner and b - a > hard_w):
            mid = (a + b) / 2
            g0, g1 = min(((g0, g1) for g0, g1 in inner if g1 - g0 >= 0.8 * widest),
                         key=lambda g: abs((g[0] + g[1]) / 2 - mid))
            return cut(a, g0) + cut(g1, b)
        if b - a <= hard_w:
            return [(a, b)]                                  # one word: the model reads it whole
        lo, hi = a + (b - a) // 3, b - (b - a) // 3          # no gap at all: the emptiest column near the middle
        x = lo + int(np.argmin(weight[lo:hi]))
        return cut(a, x) + cut(x, b)

    spans = [(x0 + a, x0 + b) for a, b in cut(runs[0][0], runs[-1][1])]
    out, m = [], 0.15 * h
    for i, (a, b) in enumerate(spans):
        left = a if i and spans[i - 1][1] == a else int(a - min(m, (a - (spans[i - 1][1] if i else x0)) / 2))
        right = b if i + 1 < len(spans) and spans[i + 1][0] == b else \
            int(b + min(m, ((spans[i + 1][0] if i + 1 < len(spans) else x1) - b) / 2))
        out.append((max(x0, left), y0, min(x1, right), y1))
    spaced = [False] + [a - b >= min_word_gap for (_, b), (a, _) in zip(spans, spans[1:])]
    return out, spaced


WORD_GAP = 0.22          # a gap between ink runs of at least this many text heights separates words
WIDE_GAP = 0.5           # justified lines: word gaps wider than this are squeezed to it (`squeeze_gaps`)
# words_seen counts only words set clearly apart (letter-spaced words stay one): on 178 held-out
# lines read exactly it flags 1 (0.22: 36), on the man-page PDFs 0 of 117 read exactly, and 6 of
# the 7 lines that dropped words before squeeze_gaps
SEEN_GAP = 0.4


def word_runs(gray: np.ndarray, gap: float = WORD_GAP) -> tuple[list[tuple[int, int]], int]:
    """([start, end) x extents of the words of a line image (ink runs at least `gap` text
    heights apart), the text's height)."""
    tx0, ty0, tx1, ty1 = data.tight_box(data.normalise_contrast(gray.astype(np.uint8)))
    h = max(ty1 - ty0, 1)
    return ink_runs(ink_mask(gray[ty0:ty1]).any(0), min_gap=max(2, int(gap * h))), h


def squeeze_gaps(line: Image.Image) -> Image.Image:
    """The line with every word gap wider than WIDE_GAP text heights cut down to that width: a
    justified line, spaced out to fill its column, read as the model was trained to read (on the
    man-page PDFs of issue 40 the model skipped words after wide gaps: 13 of 1,361 words, 5 lines
    at confidence > 0.9; squeezed, 2). A line without wide gaps comes back as it is."""
    runs, h = word_runs(np.asarray(line.convert("L"), dtype=np.float32))
    width = max(1, int(WIDE_GAP * h))
    if all(b0 - a1 <= width for (_, a1), (b0, _) in zip(runs, runs[1:])):
        return line
    arr = np.asarray(line)
    parts = [arr[:, :runs[0][1]]]
    for (_, a1), (b0, b1) in zip(runs, runs[1:]):
        parts += [arr[:, a1:a1 + min(b0 - a1, width)], arr[:, b0:b1]]
    parts.append(arr[:, runs[-1][1]:])
    return Image.fromarray(np.concatenate(parts, 1))


def words_seen(line: Image.Image) -> int:
    """How many words a line image shows set apart (SEEN_GAP): a reading with fewer may have
    dropped some."""
    return len(word_runs(np.asarray(line.convert("L"), dtype=np.float32), SEEN_GAP)[0])


LEADER_DOT = 0.25        # a leader dot: ink at most this share of its line's text rows tall, and about as wide


def leader_text(piece: Image.Image, rows: tuple[int, int]) -> str | None:
    """The text of a piece that holds only leader dots (the ". . . ." of a table of contents), from
    its geometry; None for any other piece. `rows`: its line's text rows (data.text_rows). The model
    reads words: a run of dots cut away from them it has never seen alone, and reads as letters."""
    band = ink_mask(np.asarray(piece.convert("L"), dtype=np.float32)[rows[0]:rows[1]])
    h = rows[1] - rows[0]
    ink_rows = np.flatnonzero(band.any(1))
    runs = ink_runs(band.any(0), min_gap=1)
    if len(runs) < 2 or ink_rows[0] < h / 2 or ink_rows[-1] - ink_rows[0] >= LEADER_DOT * h:
        return None                              # not only low, short ink: letters, dashes or nothing
    dot = ink_rows[-1] - ink_rows[0] + 1
    if any(b - a > 2 * dot for a, b in runs):
        return None                              # a dash or a rule, not a dot
    spaced = min(c - b for (_, b), (c, _) in zip(runs, runs[1:])) >= WORD_GAP * h
    return (" " if spaced else "").join("." * len(runs))


def line_pieces(line: Image.Image) -> tuple[list[Image.Image], list[bool]]:
    """A line image cut at word gaps into pieces the model reads, and for each whether a word space
    comes before it (`split_line`)."""
    gray = np.asarray(line.convert("L"), dtype=np.float32)
    boxes, spaced = split_line(gray, (0, 0, line.width, line.height))
    kept = [(line.crop(b), s) for b, s in zip(boxes, spaced) if b[2] - b[0] >= 2 and b[3] - b[1] >= 2]
    return [p for p, _ in kept], [s for _, s in kept]
