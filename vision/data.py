"""A class-labelled 64x64 image set drawn procedurally from a seed (nothing downloaded, nothing
stored): coloured shapes, patterns and DejaVu glyphs on plain backgrounds, with random colour,
size, position and rotation. `make_split("train")` / `make_split("test")` give a fixed split:
image i of a split is drawn from its own seeded generator, so the sets never change or overlap.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

CLASSES = ("circle", "square", "triangle", "star", "ring", "cross", "stripes", "checker",
           "letter_A", "digit_7")
SIZE = 64
_SUPER = 2   # draw at 2x and downsample: antialiased edges
FOREGROUNDS = ((220, 40, 40), (40, 170, 60), (40, 80, 220), (240, 200, 30), (200, 60, 200), (30, 190, 200))
BACKGROUNDS = ((245, 245, 240), (25, 25, 30), (128, 128, 128))
SPLIT_SEEDS = {"train": 1, "test": 2}


@lru_cache(maxsize=4)
def _font(size: int):
    return ImageFont.truetype("DejaVuSans-Bold.ttf", size)


def _rotated(points, cx, cy, angle):
    c, s = math.cos(angle), math.sin(angle)
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in points]


def _polygon(n_vertices, r, inner=None):
    pts = []
    for k in range(n_vertices * (2 if inner else 1)):
        a = -math.pi / 2 + k * math.pi * (1 if inner else 2) / n_vertices
        rad = inner if inner and k % 2 else r
        pts.append((rad * math.cos(a), rad * math.sin(a)))
    return pts


def draw_image(label: int, rng: np.random.Generator, pose: dict | None = None) -> np.ndarray:
    """One (SIZE, SIZE, 3) uint8 image of class `label`. `pose` (video frames) changes the drawn
    shape after the same random draws: "center" (x, y) in pixels, "scale" (size factor, patterns'
    period too) and "turn" (radians added; patterns turn too)."""
    s = SIZE * _SUPER
    fg = FOREGROUNDS[rng.integers(len(FOREGROUNDS))]
    bg = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
    img = Image.new("RGB", (s, s), bg)
    d = ImageDraw.Draw(img)
    r = rng.uniform(0.26, 0.38) * s
    cx, cy = s / 2 + rng.uniform(-0.1, 0.1) * s, s / 2 + rng.uniform(-0.1, 0.1) * s
    angle = rng.uniform(-0.35, 0.35)
    name = CLASSES[label]
    if pose is not None:
        if pose.get("center") is not None:
            cx, cy = (v * _SUPER for v in pose["center"])
        r *= pose.get("scale", 1.0)
        angle += pose.get("turn", 0.0)
    if name == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)
    elif name == "ring":
        w = r * rng.uniform(0.3, 0.45)
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)
        d.ellipse([cx - r + w, cy - r + w, cx + r - w, cy + r - w], fill=bg)
    elif name == "square":
        d.polygon(_rotated(_polygon(4, r * 1.1), cx, cy, angle + math.pi / 4), fill=fg)
    elif name == "triangle":
        d.polygon(_rotated(_polygon(3, r * 1.15), cx, cy + r * 0.15, angle), fill=fg)
    elif name == "star":
        d.polygon(_rotated(_polygon(5, r * 1.15, inner=r * 0.48), cx, cy, angle), fill=fg)
    elif name == "cross":
        w = r * rng.uniform(0.3, 0.4)
        bar = [(-r, -w), (r, -w), (r, w), (-r, w)]
        d.polygon(_rotated(bar, cx, cy, angle), fill=fg)
        d.polygon(_rotated(bar, cx, cy, angle + math.pi / 2), fill=fg)
    elif name == "stripes":
        period = s / rng.choice([4, 5, 6])
        vertical = bool(rng.integers(2))
        if pose is not None:
            return _posed_pattern(img, fg, period * pose.get("scale", 1.0), cx, cy, pose.get("turn", 0.0),
                                  "vertical" if vertical else "horizontal")
        for k in range(-1, int(s / period) + 2):
            a = k * period + rng.uniform(0, 0) + (cx % period)
            box = [a, 0, a + period / 2, s] if vertical else [0, a, s, a + period / 2]
            d.rectangle(box, fill=fg)
    elif name == "checker":
        cell = s / rng.choice([4, 5, 6])
        if pose is not None:
            return _posed_pattern(img, fg, cell * pose.get("scale", 1.0), cx, cy, pose.get("turn", 0.0), "checker")
        off = cx % cell
        for i in range(-1, int(s / cell) + 2):
            for j in range(-1, int(s / cell) + 2):
                if (i + j) % 2 == 0:
                    d.rectangle([i * cell + off, j * cell + off, (i + 1) * cell + off, (j + 1) * cell + off], fill=fg)
    else:  # glyphs
        char = {"letter_A": "A", "digit_7": "7"}[name]
        font = _font(int(r * 2.4))
        glyph = Image.new("L", (s, s), 0)
        ImageDraw.Draw(glyph).text((cx, cy), char, font=font, fill=255, anchor="mm")
        glyph = glyph.rotate(math.degrees(angle), center=(cx, cy), resample=Image.BILINEAR)
        img.paste(Image.new("RGB", (s, s), fg), mask=glyph)
    return np.asarray(img.resize((SIZE, SIZE), Image.LANCZOS), dtype=np.uint8)


def _posed_pattern(img, fg, period: float, cx: float, cy: float, turn: float, kind: str) -> np.ndarray:
    """Stripes (half-period bands) or a checker of cell `period` anchored at (cx, cy) and turned by
    `turn`, on the supersampled canvas `img` -> the (SIZE, SIZE, 3) image."""
    d, s = ImageDraw.Draw(img), img.size[0]
    n = int(s / period) + 2
    for i in range(-n, n):
        for j in range(-n, n) if kind == "checker" else (0,):
            if kind == "checker" and (i + j) % 2:
                continue
            u0, u1 = i * period, i * period + (period if kind == "checker" else period / 2)
            v0, v1 = (j * period, (j + 1) * period) if kind == "checker" else (-s, s)
            box = [(u0, v0), (u1, v0), (u1, v1), (u0, v1)]
            if kind == "horizontal":
                box = [(v, u) for u, v in box]
            d.polygon(_rotated(box, cx, cy, turn), fill=fg)
    return np.asarray(img.resize((SIZE, SIZE), Image.LANCZOS), dtype=np.uint8)


def make_split(split: str, per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(N, SIZE, SIZE, 3) uint8 images and (N,) int64 labels, classes interleaved."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
    images, labels = [], []
    for i in range(per_class * len(CLASSES)):
        label = i % len(CLASSES)
        rng = np.random.default_rng([seed, SPLIT_SEEDS[split], i])
        images.append(draw_image(label, rng))
        labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def to_tensor(images: np.ndarray):
    """(N, H, W, 3) uint8 -> (N, 3, H, W) float in [-1, 1]."""
    import torch
    return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def to_uint8(x) -> np.ndarray:
    """(N, 3, H, W) float in [-1, 1] -> (N, H, W, 3) uint8."""
    return ((x.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy()
