"""Quality metrics more than one domain reports."""
from __future__ import annotations


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences (strings or token lists)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(refs: list[str], hyps: list[str], collapse_spaces: bool = False) -> float:
    """Corpus character error rate: total edits / total reference characters."""
    if collapse_spaces:
        refs, hyps = [" ".join(r.split()) for r in refs], [" ".join(h.split()) for h in hyps]
    edits = sum(edit_distance(r, h) for r, h in zip(refs, hyps))
    return edits / max(sum(len(r) for r in refs), 1)
