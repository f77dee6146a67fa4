"""Box metrics: IoU, rotated IoU (shapely polygons), and query-level Acc@0.5 (every target found,
nothing extra; a "no match" query is right only when nothing is returned)."""
from __future__ import annotations

import numpy as np

from .model import rbox_corners


def iou(a, b) -> float:
    """Axis-aligned IoU of (x0, y0, x1, y1) boxes."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def polygon_iou(p, q) -> float:
    """IoU of two polygons given as (K, 2) corner arrays."""
    from shapely.geometry import Polygon
    a, b = Polygon(p), Polygon(q)
    if not a.is_valid or not b.is_valid or a.area <= 0 or b.area <= 0:
        return 0.0
    inter = a.intersection(b).area
    return inter / (a.area + b.area - inter)


def rotated_iou(ra, rb) -> float:
    """IoU of rotated boxes (cx, cy, w, h, theta)."""
    return polygon_iou(rbox_corners(ra), rbox_corners(rb))


def envelope(rbox) -> tuple:
    """The axis-aligned envelope of a rotated box, as a rotated box with theta 0."""
    c = rbox_corners(rbox)
    (x0, y0), (x1, y1) = c.min(0), c.max(0)
    return ((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0, 0.0)


def match(pred, gt, overlap) -> list[float]:
    """Best one-to-one assignment of predictions to targets; returns each target's IoU (0 if unmatched)."""
    if not gt:
        return []
    if not pred:
        return [0.0] * len(gt)
    from scipy.optimize import linear_sum_assignment
    m = np.array([[overlap(p, g) for g in gt] for p in pred])        # (P, G)
    rows, cols = linear_sum_assignment(-m)
    out = [0.0] * len(gt)
    for r, c in zip(rows, cols):
        out[c] = float(m[r, c])
    return out


def query_correct(pred, gt, overlap, thr: float = 0.5) -> bool:
    if len(pred) != len(gt):
        return False
    return all(v >= thr for v in match(pred, gt, overlap))
