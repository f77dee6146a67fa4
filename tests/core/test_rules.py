"""Pure functions: sampling transforms and acceptance rules (with chi-square laws)."""
import pytest
import torch
from chisq import goodness_of_fit

from suite import (SamplingParams, accept_by_confidence, accept_greedy_prefix, accept_multi_draft,
                   accept_speculative, logits_to_probs, sample)


def test_greedy_probs_are_one_hot_on_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 3.0, 0.0]])
    probs = logits_to_probs(logits, SamplingParams())
    assert probs.tolist() == [[0, 1, 0], [1, 0, 0]]


def test_top_k_and_top_p_filter():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert (logits_to_probs(logits, SamplingParams(1.0, top_k=2)) > 0).tolist() == [True, True, False, False]
    p = logits_to_probs(logits, SamplingParams(1.0, top_p=0.8))
    assert (p > 0).tolist() == [True, True, False, False]
    assert torch.allclose(p[:2], torch.tensor([0.5, 0.3]) / 0.8)
    # top-p always keeps the most likely token
    assert (logits_to_probs(logits, SamplingParams(1.0, top_p=0.01)) > 0).sum() == 1


def test_bad_sampling_params_name_the_fix():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(-1.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(1.0, top_p=0.0)


def test_sample_follows_probs():
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    draws = sample(probs.expand(4000, 4), g).tolist()
    assert 1 not in draws
    assert goodness_of_fit(draws, {0: 0.1, 2: 0.6, 3: 0.3}) > 1e-3


def test_draw_is_sampling_the_processed_probs():
    from suite.sampling import draw
    logits = torch.randn(6, 3, 50, generator=torch.Generator().manual_seed(1))
    logits[0, 0, :2] = 9.0                                       # a tie: the lowest index, as sampling a one-hot
    greedy = SamplingParams()
    assert torch.equal(draw(logits, greedy), sample(logits_to_probs(logits, greedy), torch.Generator().manual_seed(2)))
    warm = SamplingParams(0.8, top_k=20)
    assert torch.equal(draw(logits, warm, torch.Generator().manual_seed(3)),
                       sample(logits_to_probs(logits, warm), torch.Generator().manual_seed(3)))


def test_greedy_prefix():
    v = accept_greedy_prefix(torch.tensor([4, 5, 6]), torch.tensor([4, 5, 9, 1]))
    assert (v.num_accepted, v.next_token) == (2, 9)
    v = accept_greedy_prefix(torch.tensor([4, 5]), torch.tensor([4, 5, 7]))
    assert (v.num_accepted, v.next_token) == (2, 7)


def _first_token(verdict, draft):
    return int(draft[0]) if verdict.num_accepted > 0 else verdict.next_token


@pytest.mark.parametrize("point_mass", [False, True])
def test_speculative_rule_preserves_target_distribution(point_mass):
    g = torch.Generator().manual_seed(1)
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.7, 0.1, 0.1, 0.1]])
    out = []
    for _ in range(4000):
        draft = torch.tensor([0]) if point_mass else sample(q, g)
        v = accept_speculative(draft, None if point_mass else q, p, g)
        out.append(_first_token(v, draft))
    assert goodness_of_fit(out, {i: float(p[0, i]) for i in range(4)}) > 1e-3


def test_wrong_rule_is_caught():
    """Negative control: accepting every draft yields q, and the chi-square test must notice."""
    g = torch.Generator().manual_seed(2)
    q = torch.tensor([0.7, 0.1, 0.1, 0.1])
    out = sample(q.expand(4000, 4), g).tolist()
    assert goodness_of_fit(out, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}) < 1e-6


def test_multi_draft_preserves_target_distribution():
    g = torch.Generator().manual_seed(3)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    out = [accept_multi_draft(p, [0, 3], g)[0] for _ in range(4000)]
    assert goodness_of_fit(out, {i: float(p[i]) for i in range(4)}) > 1e-3
    assert accept_multi_draft(torch.tensor([0.0, 1.0, 0.0]), [0, 1], g) == (1, True)
    assert accept_multi_draft(torch.tensor([0.0, 0.0, 1.0]), [0, 1], g) == (2, False)


def test_accept_by_confidence():
    probs = torch.tensor([[0.95, 0.05], [0.6, 0.4], [0.1, 0.9]])
    tokens = torch.tensor([0, 0, 1])
    assert accept_by_confidence(probs, tokens, threshold=0.9).tolist() == [True, False, True]
    assert accept_by_confidence(probs, tokens, threshold=0.99).tolist() == [True, False, False]  # at least one
    assert accept_by_confidence(probs, tokens, top_k=2).tolist() == [True, False, True]
    with pytest.raises(ValueError):
        accept_by_confidence(probs, tokens)
