"""Class- and motion-conditional clips drawn procedurally (nothing downloaded, nothing stored):
the image classes of `vision.data`, each clip one shape (one random style: colours, size, pose)
moving over FRAMES frames of SIZE x SIZE.

Motions, per frame: "left", "right", "up", "down" move the shape by STEP pixels (one VQ code
cell: 64 px / 16 codes), from STEP * (FRAMES - 1) / 2 on one side of the centre to as far on the
other; "rotate" turns it by TURN radians; "grow" scales it from 0.75x to 1.25x (geometrically).
Pairs whose motion cannot be seen are never drawn: a rotating circle or ring, and stripes moving
along themselves (that style is redrawn). `make_clips("train")` / `make_clips("test")` give a
fixed split: clip i of a split is drawn from its own seeded generator (split seeds apart from the
image splits'), so the sets never change or overlap.
"""
from __future__ import annotations

import numpy as np

from ..data import CLASSES, SIZE, draw_image

MOTIONS = ("left", "right", "up", "down", "rotate", "grow")
FRAMES = 8
STEP = 4                       # pixels per frame for the moves
TURN = 0.1                     # radians per frame for "rotate"
GROW = (0.75, 1.25)            # "grow": scale at the first and the last frame
SPLIT_SEEDS = {"train": 11, "test": 12}
_MOVES = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
_ROUND = ("circle", "ring")    # look the same turned


def visible(label: int, motion: int) -> bool:
    """Whether a clip of this class can show this motion at all (a turned circle looks still)."""
    return not (MOTIONS[motion] == "rotate" and CLASSES[label] in _ROUND)


PAIRS = tuple((c, m) for c in range(len(CLASSES)) for m in range(len(MOTIONS)) if visible(c, m))


def poses(motion: int, frames: int, rng: np.random.Generator) -> list[dict]:
    """The per-frame `draw_image` pose of one clip of `motion`."""
    name = MOTIONS[motion]
    if name in _MOVES:
        dx, dy = _MOVES[name]
        across = SIZE / 2 + rng.uniform(-0.1, 0.1) * SIZE          # the coordinate that stays
        half = STEP * (frames - 1) / 2
        along = [SIZE / 2 - half + STEP * t for t in range(frames)]
        return [{"center": (SIZE / 2 + dx * (a - SIZE / 2), across) if dx else
                 (across, SIZE / 2 + dy * (a - SIZE / 2))} for a in along]
    if name == "rotate":
        return [{"turn": TURN * t} for t in range(frames)]
    lo, hi = GROW
    return [{"scale": lo * (hi / lo) ** (t / max(frames - 1, 1))} for t in range(frames)]


def draw_clip(label: int, motion: int, rng: np.random.Generator, frames: int = FRAMES) -> np.ndarray:
    """One (frames, SIZE, SIZE, 3) uint8 clip; styles under which the motion is invisible
    (stripes moving along themselves) are redrawn."""
    if not visible(label, motion):
        raise ValueError(f"a {CLASSES[label]} cannot show {MOTIONS[motion]!r}; pick another motion")
    while True:
        style = int(rng.integers(2 ** 32))
        clip = np.stack([draw_image(label, np.random.default_rng(style), pose) for pose in poses(motion, frames, rng)])
        if frames < 2 or np.abs(clip[1].astype(np.int16) - clip[0]).mean() > 1.0:
            return clip


def make_clips(split: str, per_pair: int, seed: int = 0, frames: int = FRAMES
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, frames, SIZE, SIZE, 3) uint8 clips, (N,) class ids and (N,) motion ids; the visible
    (class, motion) pairs interleaved, `per_pair` clips each."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
    clips, labels, motions = [], [], []
    for i in range(per_pair * len(PAIRS)):
        label, motion = PAIRS[i % len(PAIRS)]
        clips.append(draw_clip(label, motion, np.random.default_rng([seed, SPLIT_SEEDS[split], i]), frames))
        labels.append(label), motions.append(motion)
    return np.stack(clips), np.asarray(labels, dtype=np.int64), np.asarray(motions, dtype=np.int64)
