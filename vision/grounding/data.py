"""Generated grounding scenes with known boxes and referring expressions (nothing downloaded).

A scene is a 128x128 RGB image with 1-5 objects: coloured shapes (two sizes), real face photos
(scikit-image's LFW crops; faces 0-99 train, 100-199 held out) and rendered words. `make_query`
draws a referring expression over a scene ("the red circle", "the small square", "the square left
of the blue star", "the face", "the word cat") whose answer is every matching object (at most
MAX_BOXES, left to right), or no match. Oriented scenes (task "obb") hold rotated bars, ellipses
and words with their rotated boxes (centre, size, angle). Scene i of a split comes from its own
seeded generator, so the held-out split is fixed and never overlaps the training one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SIZE = 128
_SS = 2                                  # draw at 2x, downsample: antialiased edges, exact masks
MAX_BOXES = 4
SHAPES = ("circle", "square", "triangle", "star", "cross", "ring")
COLOURS = {"red": (215, 35, 35), "green": (40, 160, 50), "blue": (35, 75, 215),
           "yellow": (235, 200, 25), "purple": (150, 50, 190), "orange": (240, 130, 20)}
WORDS = ("cat", "dog", "sun", "tree", "book", "lamp", "car", "fish", "milk", "door", "bird", "key")
OBB_SHAPES = ("bar", "ellipse")
SPLIT_SEEDS = {"train": 11, "test": 22}
RELATIONS = ("left of", "right of", "above", "below")


@dataclass
class Obj:
    kind: str                 # a shape name, "face" or "word" (obb: "bar", "ellipse", "word")
    colour: str = ""          # colour name ("" for faces, words)
    size: str = ""            # "small" | "large" (shapes)
    text: str = ""            # the word, for words
    box: tuple = (0, 0, 0, 0)           # (x0, y0, x1, y1) pixels, tight around the drawn pixels
    rbox: tuple | None = None           # (cx, cy, w, h, theta) pixels/radians, w >= h, theta in [0, pi)

    @property
    def centre(self):
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


@dataclass
class Scene:
    image: np.ndarray                   # (SIZE, SIZE, 3) uint8
    objects: list[Obj] = field(default_factory=list)
    task: str = "aabb"


@dataclass
class Query:
    text: str
    targets: list[Obj]                  # every matching object, left to right ([] = no match)


@lru_cache(maxsize=8)
def _font(px: int):
    return ImageFont.truetype("DejaVuSans-Bold.ttf", px)


@lru_cache(maxsize=1)
def _faces() -> np.ndarray:
    from skimage import data
    return (data.lfw_subset() * 255).astype(np.uint8)          # (200, 25, 25)


def _background(rng: np.random.Generator) -> Image.Image:
    """A plain, two-tone gradient or noisy background, light or dark."""
    base = rng.integers(170, 250) if rng.random() < 0.7 else rng.integers(20, 90)
    tint = rng.integers(-15, 16, size=3)
    top, bottom = base + tint, base + tint + rng.integers(-30, 31)
    ramp = np.linspace(0, 1, SIZE * _SS)[:, None, None]
    img = top[None, None, :] * (1 - ramp) + bottom[None, None, :] * ramp
    img = np.broadcast_to(img, (SIZE * _SS, SIZE * _SS, 3)) + rng.normal(0, rng.uniform(0, 6), (SIZE * _SS, SIZE * _SS, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def _polygon(n: int, r: float, inner: float | None = None, phase: float = -math.pi / 2):
    pts = []
    for k in range(n * (2 if inner else 1)):
        a = phase + k * math.pi * (1 if inner else 2) / n
        rad = inner if inner and k % 2 else r
        pts.append((rad * math.cos(a), rad * math.sin(a)))
    return pts


def _place(pts, cx, cy, angle=0.0):
    c, s = math.cos(angle), math.sin(angle)
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in pts]


def _shape_mask(kind: str, r: float, angle: float) -> Image.Image:
    """An L mask (2r+4 square, at _SS scale) of a shape of radius r centred in it."""
    n = int(2 * r + 4)
    m = Image.new("L", (n, n), 0)
    d = ImageDraw.Draw(m)
    c = n / 2
    if kind == "circle":
        d.ellipse([c - r, c - r, c + r, c + r], fill=255)
    elif kind == "ring":
        d.ellipse([c - r, c - r, c + r, c + r], fill=255)
        w = r * 0.42
        d.ellipse([c - r + w, c - r + w, c + r - w, c + r - w], fill=0)
    elif kind == "square":
        d.polygon(_place(_polygon(4, r, phase=math.pi / 4), c, c, angle * 0.3), fill=255)
    elif kind == "triangle":
        d.polygon(_place(_polygon(3, r), c, c + r * 0.15, angle * 0.3), fill=255)
    elif kind == "star":
        d.polygon(_place(_polygon(5, r, inner=r * 0.45), c, c, angle * 0.3), fill=255)
    elif kind == "cross":
        w = r * 0.33
        bar = [(-r, -w), (r, -w), (r, w), (-r, w)]
        d.polygon(_place(bar, c, c, angle * 0.3), fill=255)
        d.polygon(_place(bar, c, c, angle * 0.3 + math.pi / 2), fill=255)
    else:
        raise ValueError(kind)
    return m


def _word_mask(text: str, px: int, angle: float = 0.0):
    """An L mask of a rendered word (at _SS scale), rotated by `angle` about its centre, and the
    unrotated text size (w, h) in mask pixels."""
    font = _font(px)
    x0, y0, x1, y1 = font.getbbox(text)
    w, h = x1 - x0, y1 - y0
    n = int(math.hypot(w, h)) + 6
    m = Image.new("L", (n, n), 0)
    ImageDraw.Draw(m).text((n / 2 - w / 2 - x0, n / 2 - h / 2 - y0), text, font=font, fill=255)
    if angle:
        m = m.rotate(-math.degrees(angle), center=(n / 2, n / 2), resample=Image.BICUBIC)
    return m, (w, h)


def _free(box, taken, gap=3) -> bool:
    return all(box[2] + gap <= t[0] or t[2] + gap <= box[0] or box[3] + gap <= t[1] or t[3] + gap <= box[1] for t in taken)


def _paste(canvas: Image.Image, mask: Image.Image, colour, x: int, y: int) -> tuple:
    """Composite `colour` through `mask` at (x, y) (_SS scale); returns the tight box in SIZE pixels."""
    canvas.paste(Image.new("RGB", mask.size, colour), (x, y), mask)
    ys, xs = np.nonzero(np.asarray(mask) > 96)
    return ((x + xs.min()) / _SS, (y + ys.min()) / _SS, (x + xs.max() + 1) / _SS, (y + ys.max() + 1) / _SS)


def _text_colour(rng, bg_light: bool):
    return tuple(int(v) for v in (rng.integers(0, 60, 3) if bg_light else rng.integers(200, 256, 3)))


def make_scene(rng: np.random.Generator, split: str = "train", task: str = "aabb") -> Scene:
    """One scene; `split` picks the face identities (train 0-99, test 100-199)."""
    canvas = _background(rng)
    light = float(np.asarray(canvas).mean()) > 128
    objects, taken = [], []
    n = int(rng.integers(1, 6)) if task == "aabb" else int(rng.integers(1, 5))
    for _ in range(n):
        for _try in range(20):
            obj, mask, colour = _draw_object(rng, split, task, light)
            W, H = mask.size
            x, y = int(rng.integers(2, SIZE * _SS - W - 2)), int(rng.integers(2, SIZE * _SS - H - 2))
            ys, xs = np.nonzero(np.asarray(mask) > 96)
            box = ((x + xs.min()) / _SS, (y + ys.min()) / _SS, (x + xs.max() + 1) / _SS, (y + ys.max() + 1) / _SS)
            if _free(box, taken):
                break
        else:
            continue
        if obj.kind == "face":
            canvas.paste(colour, (x, y))
            obj.box = box
        else:
            obj.box = _paste(canvas, mask, colour, x, y)
        if obj.rbox is not None:
            cx, cy, w, h, th = obj.rbox
            obj.rbox = ((x + mask.size[0] / 2) / _SS, (y + mask.size[1] / 2) / _SS, w / _SS, h / _SS, th)
        taken.append(obj.box)
        objects.append(obj)
    image = np.asarray(canvas.resize((SIZE, SIZE), Image.LANCZOS), dtype=np.uint8)
    return Scene(image, objects, task)


def _draw_object(rng, split: str, task: str, light: bool):
    """(Obj without position, mask at _SS scale, colour or face image)."""
    if task == "obb":
        return _draw_rotated(rng, light)
    u = rng.random()
    if u < 0.12:
        k = int(rng.integers(0, 100)) + (100 if split == "test" else 0)
        side = int(rng.integers(24, 38)) * _SS
        face = Image.fromarray(_faces()[k]).resize((side, side), Image.BICUBIC).convert("RGB")
        return Obj("face"), Image.new("L", (side, side), 255), face
    if u < 0.24:
        word = WORDS[rng.integers(len(WORDS))]
        mask, _ = _word_mask(word, int(rng.integers(12, 17)) * _SS)
        return Obj("word", text=word), mask, _text_colour(rng, light)
    size = "small" if rng.random() < 0.5 else "large"
    r = (rng.uniform(8, 11) if size == "small" else rng.uniform(15, 21)) * _SS
    kind = SHAPES[rng.integers(len(SHAPES))]
    colour = list(COLOURS)[rng.integers(len(COLOURS))]
    rgb = tuple(int(np.clip(v + rng.integers(-15, 16), 0, 255)) for v in COLOURS[colour])
    return Obj(kind, colour, size), _shape_mask(kind, r, rng.uniform(-1, 1)), rgb


def _draw_rotated(rng, light: bool):
    """A rotated bar, ellipse or word with its exact rotated box (w >= h)."""
    theta = float(rng.uniform(0, math.pi))
    u = rng.random()
    if u < 0.3:
        word = WORDS[rng.integers(len(WORDS))]
        mask, (w, h) = _word_mask(word, int(rng.integers(13, 18)) * _SS, theta)
        return Obj("word", text=word, rbox=(0, 0, w, h, theta)), mask, _text_colour(rng, light)
    kind = OBB_SHAPES[int(u > 0.65)]
    w = rng.uniform(26, 56) * _SS
    h = w / rng.uniform(2.0, 4.0)
    n = int(math.hypot(w, h)) + 6
    m = Image.new("L", (n, n), 0)
    d = ImageDraw.Draw(m)
    c = n / 2
    if kind == "bar":
        d.polygon(_place([(-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)], c, c, theta), fill=255)
    else:   # ellipse: draw axis-aligned, rotate
        e = Image.new("L", (n, n), 0)
        ImageDraw.Draw(e).ellipse([c - w / 2, c - h / 2, c + w / 2, c + h / 2], fill=255)
        m = e.rotate(-math.degrees(theta), center=(c, c), resample=Image.BICUBIC)
    colour = list(COLOURS)[rng.integers(len(COLOURS))]
    rgb = tuple(int(np.clip(v + rng.integers(-15, 16), 0, 255)) for v in COLOURS[colour])
    return Obj(kind, colour, text="", rbox=(0, 0, w, h, theta)), m, rgb


# ---------------------------------------------------------------- referring expressions

def _matches(objs, **attrs):
    return [o for o in objs if all(getattr(o, k) == v for k, v in attrs.items())]


def _related(o: Obj, anchor: Obj, rel: str) -> bool:
    ox, oy = o.centre
    return {"left of": ox < anchor.box[0], "right of": ox > anchor.box[2],
            "above": oy < anchor.box[1], "below": oy > anchor.box[3]}[rel]


def _sorted(objs):
    return sorted(objs, key=lambda o: (o.box[0], o.box[1]))[:MAX_BOXES]


def make_query(scene: Scene, rng: np.random.Generator) -> Query:
    """A referring expression over the scene and every object it names (maybe none)."""
    objs = scene.objects
    if scene.task == "obb":
        return _obb_query(objs, rng)
    shapes = [o for o in objs if o.kind in SHAPES]
    u = rng.random()
    if u < 0.12 or not objs:                              # no match: an absent colour + shape
        for _ in range(20):
            c, s = list(COLOURS)[rng.integers(len(COLOURS))], SHAPES[rng.integers(len(SHAPES))]
            if not _matches(objs, colour=c, kind=s):
                return Query(f"the {c} {s}", [])
    pick = objs[rng.integers(len(objs))]
    if pick.kind == "face":
        return Query("the face", _sorted(_matches(objs, kind="face")))
    if pick.kind == "word":
        if rng.random() < 0.25:
            return Query("the text", _sorted(_matches(objs, kind="word")))
        return Query(f"the word {pick.text}", _sorted(_matches(objs, kind="word", text=pick.text)))
    v = rng.random()
    if v < 0.2 and len(shapes) > 1:                       # relation to a uniquely named anchor
        anchors = [a for a in shapes if a is not pick and len(_matches(objs, kind=a.kind, colour=a.colour)) == 1]
        rels = [r for a in anchors for r in RELATIONS if _related(pick, a, r)]
        if rels:
            rel = rels[rng.integers(len(rels))]
            a = [a for a in anchors if _related(pick, a, rel)][0]
            hits = [o for o in _matches(objs, kind=pick.kind) if _related(o, a, rel)]
            return Query(f"the {pick.kind} {rel} the {a.colour} {a.kind}", _sorted(hits))
    if v < 0.45:
        return Query(f"the {pick.size} {pick.kind}", _sorted(_matches(objs, kind=pick.kind, size=pick.size)))
    if v < 0.6:
        return Query(f"the {pick.kind}", _sorted(_matches(objs, kind=pick.kind)))
    if v < 0.7:
        return Query(f"the {pick.colour} shape", _sorted(_matches(shapes, colour=pick.colour)))
    return Query(f"the {pick.colour} {pick.kind}", _sorted(_matches(objs, kind=pick.kind, colour=pick.colour)))


def _obb_query(objs, rng) -> Query:
    if not objs or rng.random() < 0.1:
        for _ in range(20):
            c, s = list(COLOURS)[rng.integers(len(COLOURS))], OBB_SHAPES[rng.integers(2)]
            if not _matches(objs, colour=c, kind=s):
                return Query(f"the {c} {s}", [])
    pick = objs[rng.integers(len(objs))]
    if pick.kind == "word":
        return Query(f"the word {pick.text}", _sorted(_matches(objs, kind="word", text=pick.text)))
    if rng.random() < 0.3:
        return Query(f"the {pick.kind}", _sorted(_matches(objs, kind=pick.kind)))
    return Query(f"the {pick.colour} {pick.kind}", _sorted(_matches(objs, kind=pick.kind, colour=pick.colour)))


def all_query_texts() -> list[str]:
    """Every expression the generator can produce (builds the query vocabulary)."""
    out = {"the face", "the text"} | {f"the word {w}" for w in WORDS}
    for c in COLOURS:
        out.add(f"the {c} shape")
        for s in SHAPES + OBB_SHAPES:
            out.add(f"the {c} {s}")
            for rel in RELATIONS:
                out.add(f"the {s} {rel} the {c} {s}")
    for s in SHAPES + OBB_SHAPES:
        out |= {f"the {s}", f"the small {s}", f"the large {s}"}
    return sorted(out)


def scene_rng(split: str, index: int, task: str = "aabb") -> np.random.Generator:
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
    return np.random.default_rng([SPLIT_SEEDS[split], index, 0 if task == "aabb" else 1])


def scene(split: str, index: int, task: str = "aabb") -> Scene:
    return make_scene(scene_rng(split, index, task), split, task)


def heldout(n: int, task: str = "aabb") -> list[tuple[Scene, Query]]:
    """The fixed held-out set: scene i of the test split with its one seeded query."""
    out = []
    for i in range(n):
        s = scene("test", i, task)
        out.append((s, make_query(s, np.random.default_rng([SPLIT_SEEDS["test"], i, 7]))))
    return out


def validation(n: int, task: str = "aabb") -> list[tuple[Scene, Query]]:
    """Scenes of the train split that training never draws (it uses indices below 100000), for
    tuning decoder settings without touching the held-out split."""
    out = []
    for i in range(100_000, 100_000 + n):
        s = scene("train", i, task)
        out.append((s, make_query(s, np.random.default_rng([SPLIT_SEEDS["train"], i, 7]))))
    return out
