"""Calibrated line confidence: the probability that a line was read exactly, from the reader's own
signals, fitted on pages with a text layer (`python -m document.calibrate`).

Signals of a line (document.ocr, score=True): the least probable token the decoder read
(min_prob), the mean token probability with the missing-words discount (mean_prob), and whether
the model's CTC head, reading from the encoder alone, reads the same tokens (ctc_agree). A
logistic model of these gives P(exact); its coefficients and the flag threshold (the highest
recall of wrong lines at at least TARGET_PRECISION precision, on the fitting pages) live in the
weights folder as calibration.json. Without that file the confidence is the mean probability, as
before, and the flag threshold DEFAULT_CHECK_BELOW.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

FILE = "calibration.json"
TARGET_PRECISION = 0.8
DEFAULT_CHECK_BELOW = 0.9


def features(mean_prob: float, min_prob: float, ctc_agree) -> list[float]:
    logit = lambda p: math.log(max(p, 1e-6) / max(1 - p, 1e-6))      # noqa: E731
    return [logit(min_prob), logit(mean_prob), 0.0 if ctc_agree is None else (1.0 if ctc_agree else -1.0)]


def probability(cal: dict | None, mean_prob: float, min_prob: float, ctc_agree) -> float:
    """P(the line is read exactly); without a calibration, the mean token probability."""
    if not cal:
        return mean_prob
    z = cal["bias"] + sum(w * x for w, x in zip(cal["weights"], features(mean_prob, min_prob, ctc_agree)))
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def check_below(cal: dict | None) -> float:
    return cal["check_below"] if cal else DEFAULT_CHECK_BELOW


def load(folder) -> dict | None:
    path = Path(folder) / FILE if folder is not None else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


def fit(x: np.ndarray, correct: np.ndarray, l2: float = 1e-2, steps: int = 200) -> tuple[np.ndarray, float]:
    """Logistic regression (Newton steps, a little L2): (weights, bias)."""
    a = np.c_[x, np.ones(len(x))]
    w = np.zeros(a.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(a @ w, -30, 30)))
        grad = a.T @ (p - correct) + l2 * np.r_[w[:-1], 0]
        hess = (a * (p * (1 - p))[:, None]).T @ a + l2 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], float(w[-1])


def flag_threshold(prob: np.ndarray, wrong: np.ndarray, precision: float = TARGET_PRECISION) -> float:
    """The threshold t (flag: prob < t) with the most wrong lines flagged at >= `precision`."""
    best_t, best_hits = 0.5, -1
    for t in np.unique(np.r_[prob, 1.0]):
        flagged = prob < t
        hits = int((flagged & wrong).sum())
        if flagged.any() and hits / flagged.sum() >= precision and hits > best_hits:
            best_t, best_hits = float(t), hits
    return best_t


def flag_scores(prob, wrong, t: float) -> tuple[float, float]:
    """(recall, precision) of flagging prob < t as wrong."""
    prob, wrong = np.asarray(prob), np.asarray(wrong, dtype=bool)
    flagged = prob < t
    hits = int((flagged & wrong).sum())
    return hits / max(int(wrong.sum()), 1), hits / max(int(flagged.sum()), 1)
