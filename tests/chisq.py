"""A chi-square goodness-of-fit test without scipy (Wilson-Hilferty approximation of the tail)."""
from __future__ import annotations

import math
from collections import Counter


def chi2_sf(stat: float, dof: int) -> float:
    if dof <= 0:
        return 1.0
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def goodness_of_fit(samples: list, probs: dict, min_expected: float = 5.0) -> float:
    """p-value that `samples` come from `probs` (outcome -> probability). Outcomes with small
    expected counts are pooled into one bin; an outcome outside `probs` fails at once."""
    counts, n = Counter(samples), len(samples)
    if any(o not in probs or probs[o] == 0 for o in counts):
        return 0.0
    stat, dof, pooled_obs, pooled_exp = 0.0, -1, 0, 0.0
    for outcome, p in probs.items():
        expected = n * p
        if expected < min_expected:
            pooled_obs, pooled_exp = pooled_obs + counts.get(outcome, 0), pooled_exp + expected
            continue
        stat += (counts.get(outcome, 0) - expected) ** 2 / expected
        dof += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 1e-9)
        dof += 1
    return chi2_sf(stat, dof)
