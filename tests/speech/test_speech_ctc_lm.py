"""The character n-gram LM and CTC prefix beam search (speech/ctc_lm.py), on synthetic posteriors."""
from __future__ import annotations

import numpy as np
import pytest

from speech.ctc_lm import SYMBOLS, CharNGramLM, prefix_beam_search
from speech.data import ALPHABET

CORPUS = ["return the value of the attribute", "return the name of the module", "the value of the option",
          "set the value of the attribute", "return true if the name is valid", "the module of the class"] * 3


def _text(ids) -> str:
    return "".join(ALPHABET[i - 1] for i in ids)


def _posterior(frames: list[tuple[int, float]], confusions: dict[int, tuple[int, float]] | None = None):
    """(F, 28) log-probs: frame f puts prob p on symbol s, the rest spread evenly; `confusions`
    optionally moves mass of frame f to a second symbol."""
    out = np.full((len(frames), 1 + len(ALPHABET)), 1e-4)
    for f, (sym, p) in enumerate(frames):
        out[f, sym] = p
        if confusions and f in confusions:
            other, q = confusions[f]
            out[f, other] = q
    out /= out.sum(1, keepdims=True)
    return np.log(out)


def _frames(text: str) -> list[tuple[int, float]]:
    frames = []
    for ch in text:
        frames += [(ALPHABET.index(ch) + 1, 0.9), (0, 0.9)]
    return frames


def test_lm_is_normalised_and_prefers_seen_text():
    lm = CharNGramLM.train(CORPUS, order=5, min_count=1)
    for history in ["", "ret", "the valu", "zzzz"]:
        assert np.exp(lm.log_probs(history)).sum() == pytest.approx(1.0, abs=1e-9)
    assert lm.sentence_logprob("return the value") > lm.sentence_logprob("retrun teh vaule") + 10
    assert lm.log_probs("the valu")[SYMBOLS.index("e")] > np.log(0.5)


def test_lm_save_load_round_trip(tmp_path):
    lm = CharNGramLM.train(CORPUS, order=4, min_count=1)
    lm.alpha, lm.beta = 0.7, 1.5
    lm.save(tmp_path / "lm.json.gz")
    back = CharNGramLM.load(tmp_path / "lm.json.gz")
    assert (back.order, back.alpha, back.beta) == (4, 0.7, 1.5)
    assert np.allclose(back.log_probs("the va"), lm.log_probs("the va"))


def test_beam_without_lm_reads_a_clear_posterior_including_double_letters():
    text = "the attribute"      # "tt": a blank between repeats must be kept as two letters
    lp = _posterior(_frames(text))
    assert _text(prefix_beam_search(lp, len(lp))) == text
    assert _text(prefix_beam_search(lp, len(lp) - 4)) == text[:-2]     # length cuts the frames


def test_beam_sums_paths_that_greedy_splits():
    # frames: a 0.45/blank 0.55, a 0.45/blank 0.55 -> best path is all blanks (""), but the paths
    # giving "a" hold 1 - 0.55^2 = 0.70 of the mass: prefix search must return "a"
    a = ALPHABET.index("a") + 1
    lp = _posterior([(0, 0.55), (0, 0.55)], {0: (a, 0.45), 1: (a, 0.45)})
    assert _text(prefix_beam_search(lp, 2)) == "a"


def test_lm_fixes_an_acoustically_ambiguous_letter():
    lm = CharNGramLM.train(CORPUS, order=6, min_count=1)
    frames = _frames("return the value")
    v, b = ALPHABET.index("v") + 1, ALPHABET.index("b") + 1
    i = 2 * "return the value".index("v")
    frames[i] = (b, 0.55)                                    # acoustics say "balue" a little more than "value"
    lp = _posterior(frames, {i: (v, 0.4)})
    assert _text(prefix_beam_search(lp, len(lp))) == "return the balue"
    assert _text(prefix_beam_search(lp, len(lp), lm, alpha=0.8, beta=0.5)) == "return the value"
