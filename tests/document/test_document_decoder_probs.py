"""Line confidence from the decoder's own forwards (document.decoder_probs): the same tokens, and
the same token probabilities as a teacher-forced pass, with no pass for chain decoders."""
import numpy as np
import pytest

import document.ocr
from document import data

LINES = 24


@pytest.fixture(scope="module")
def lines(ocr):
    """Held-out lines read whole (one piece each): the pass below scores whole images."""
    images = [s.image for s in data.heldout_set(LINES)]
    owners = ocr.pieces(images).owner
    whole = [im for i, im in enumerate(images) if owners.count(i) == 1]
    assert len(whole) >= 8
    return whole


def teacher_forced(ocr, images, tokens):
    """(mean, least) token probability of each line by the separate scoring pass."""
    bound = ocr.adapter.for_images(ocr.adapter.pixels(images))
    lps = document.ocr.confidence(bound, tokens)
    return [float(np.exp(np.mean(lp))) for lp in lps], [float(np.exp(np.min(lp))) for lp in lps]


@pytest.mark.parametrize("decoder,opts", [("ar", {}), ("ctc_speculative", {}),
                                          ("ctc_speculative", {"max_guesses": 4, "realign": True})])
def test_chain_decoders_score_their_lines_without_a_pass(ocr, lines, decoder, opts, monkeypatch):
    plain = ocr(lines, decoder="ar")
    passes = []
    real = document.ocr.confidence
    monkeypatch.setattr(document.ocr, "confidence", lambda *a: passes.append(1) or real(*a))
    res = ocr(lines, decoder=decoder, score=True, **opts)
    monkeypatch.undo()
    assert res.tokens == plain.tokens
    assert not passes
    pieces = ocr.pieces(lines).images       # what the model read: wide word gaps squeezed
    means, lows = teacher_forced(ocr, pieces, res.tokens)
    assert np.allclose(res.min_probs, lows, rtol=1e-4, atol=1e-6)
    words = [min(1.0, len(t.split()) / max(document.ocr.words_seen(im), 1)) for t, im in zip(res.texts, pieces)]
    assert np.allclose(res.confidences, np.array(means) * words, rtol=1e-4, atol=1e-6)


def test_block_diffusion_lines_are_scored_by_the_pass(ocr, lines):
    """Tokens read from noisy slots carry no causal probability: the pass scores them."""
    res = ocr(lines, decoder="block_diffusion", score=True, block_size=8, threshold=0.9)
    _, lows = teacher_forced(ocr, ocr.pieces(lines).images, res.tokens)
    assert np.allclose(res.min_probs, lows, rtol=1e-4, atol=1e-6)
