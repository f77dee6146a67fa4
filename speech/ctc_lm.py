"""A character n-gram language model (interpolated Witten-Bell) built from the training
transcripts, and CTC prefix beam search with shallow fusion (Hannun et al. 2014):

    score(prefix) = log P_ctc(prefix | audio) + alpha * log P_lm(prefix) + beta * len(prefix)

The LM never sees the validation or held-out sentences (speech/data.py keeps the splits disjoint).
It lives beside the recogniser as `speech/weights/asr/char_lm.json.gz`; build it with
`python -m speech.train asr-lm`.
"""
from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from suite.runtime.storage import atomic_path

from .data import ALPHABET

BOS, EOS = "^", "$"                # sentence start (context only) and end (predicted only)
SYMBOLS = ALPHABET + EOS           # what the model predicts; index = position in this string
NEG_INF = -1e30


class CharNGramLM:
    """P(c | previous order-1 characters), interpolated Witten-Bell down to a uniform floor."""

    def __init__(self, order: int, counts: dict[str, dict[str, int]], alpha: float = 0.5, beta: float = 1.0):
        self.order = order
        self.counts = counts          # context (0..order-1 chars) -> {next symbol: count}
        self.alpha, self.beta = alpha, beta     # shallow-fusion weights tuned on `valid` (speech.train asr-lm)
        self._memo: dict[str, np.ndarray] = {}

    @classmethod
    def train(cls, sentences, order: int = 6, min_count: int = 2) -> "CharNGramLM":
        """Count every context of 0..order-1 characters; contexts of 3+ characters seen fewer than
        `min_count` times are dropped (keeps the file small; their mass goes to shorter contexts)."""
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for s in sentences:
            text = BOS * (order - 1) + s + EOS
            for i in range(order - 1, len(text)):
                c = text[i]
                for k in range(order):
                    counts[text[i - k:i]][c] += 1
        kept = {h: dict(nxt) for h, nxt in counts.items() if len(h) < 3 or sum(nxt.values()) >= min_count}
        return cls(order, kept)

    def save(self, path: Path) -> None:
        """Gzipped compact JSON, written whole."""
        with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump({"order": self.order, "symbols": SYMBOLS, "alpha": self.alpha, "beta": self.beta,
                       "counts": self.counts}, f, separators=(",", ":"))

    @classmethod
    def load(cls, path: Path) -> "CharNGramLM":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            blob = json.load(f)
        if blob.get("symbols") != SYMBOLS:
            raise ValueError(f"{path}: LM symbols {blob.get('symbols')!r} differ from {SYMBOLS!r}")
        return cls(int(blob["order"]), blob["counts"], float(blob.get("alpha", 0.5)), float(blob.get("beta", 1.0)))

    def log_probs(self, history: str) -> np.ndarray:
        """(len(SYMBOLS),) natural-log P(next | history); history without BOS padding."""
        h = (BOS * (self.order - 1) + history)[-(self.order - 1):] if self.order > 1 else ""
        hit = self._memo.get(h)
        if hit is None:
            hit = np.log(self._probs(h))
            if len(self._memo) > 200000:
                self._memo.clear()
            self._memo[h] = hit
        return hit

    def _probs(self, h: str) -> np.ndarray:
        p = np.full(len(SYMBOLS), 1.0 / len(SYMBOLS))
        for k in range(0, len(h) + 1):          # from the empty context up to the full one
            nxt = self.counts.get(h[len(h) - k:] if k else "")
            if not nxt:
                break                           # longer contexts than an unseen one are unseen too
            total, types = sum(nxt.values()), len(nxt)
            ml = np.zeros(len(SYMBOLS))
            for c, n in nxt.items():
                ml[SYMBOLS.index(c)] = n
            p = (ml + types * p) / (total + types)
        return p

    def sentence_logprob(self, text: str) -> float:
        return float(sum(self.log_probs(text[:i])[SYMBOLS.index(c)] for i, c in enumerate(text + EOS)))


def _lae(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    return a if b <= NEG_INF else a + math.log1p(math.exp(b - a))


def prefix_beam_search(log_probs, length: int, lm: CharNGramLM | None = None, alpha: float = 0.5,
                       beta: float = 1.0, beam: int = 12, prune: float = -8.0) -> list[int]:
    """CTC prefix beam search over (F', 1 + len(ALPHABET)) log-probs (blank 0, characters 1..);
    returns character ids (1..). Without an LM (or alpha 0, beta 0) it is a plain prefix search.
    Symbols whose frame log-prob is below `prune` are not extended (the best one always is)."""
    lp = np.asarray(log_probs[:length], dtype=np.float64)
    beams: dict[str, list[float]] = {"": [0.0, NEG_INF]}      # prefix -> [log p(blank end), log p(char end)]
    lm_cache: dict[str, np.ndarray] = {}

    def lm_score(prefix: str, sym: int) -> float:
        if lm is None or alpha == 0:
            return beta
        table = lm_cache.get(prefix)
        if table is None:
            table = lm_cache[prefix] = lm.log_probs(prefix)
        return alpha * float(table[sym]) + beta

    for t in range(len(lp)):
        row = lp[t]
        cands = [int(c) for c in np.nonzero(row[1:] > prune)[0] + 1]
        if not cands:
            cands = [int(row[1:].argmax()) + 1]
        nxt: dict[str, list[float]] = defaultdict(lambda: [NEG_INF, NEG_INF])
        for prefix, (pb, pnb) in beams.items():
            total = _lae(pb, pnb)
            entry = nxt[prefix]
            entry[0] = _lae(entry[0], total + row[0])
            last = prefix[-1] if prefix else None
            for c in cands:
                ch = ALPHABET[c - 1]
                ext = prefix + ch
                bonus = lm_score(prefix, c - 1)
                if ch == last:
                    entry[1] = _lae(entry[1], pnb + row[c])          # repeat collapses into the same prefix
                    nxt[ext][1] = _lae(nxt[ext][1], pb + row[c] + bonus)
                else:
                    nxt[ext][1] = _lae(nxt[ext][1], total + row[c] + bonus)
        beams = dict(sorted(nxt.items(), key=lambda kv: -_lae(*kv[1]))[:beam])

    def final(kv) -> float:
        prefix, (pb, pnb) = kv
        end = alpha * float(lm.log_probs(prefix)[len(SYMBOLS) - 1]) if lm is not None and alpha else 0.0
        return _lae(pb, pnb) + end

    best = max(beams.items(), key=final)[0]
    return [ALPHABET.index(ch) + 1 for ch in best]
