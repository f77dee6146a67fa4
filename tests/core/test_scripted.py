"""A scripted model with known logits pins forward counts, accepted lengths, EOS and budgets."""
from suite.models.capabilities import Capabilities
import pytest
import torch
from scripted import ScriptedModel, successor

import suite

V = 10
CYCLE = [list(range(V)) + [0]]          # 0..9 then 0: the text continues 1, 2, ... (successor)


def run(decoder, prompt=CYCLE, new=20, eos=None, **options):
    model = ScriptedModel(successor(V), vocab=V, eos=eos)
    out = suite.generate(model, torch.tensor(prompt), decoder=decoder, max_new_tokens=new, **options)
    assert model.calls == out.stats.num_forwards
    return out


def expected(prompt, new):
    return [(prompt[-1] + 1 + i) % V for i in range(new)]


def test_ar_one_forward_per_token():
    out = run("ar")
    assert out.new_tokens[0] == expected(CYCLE[0], 20)
    assert out.stats.num_forwards == 20 and out.stats.accepted_lengths == [[1]] * 20


def test_ngram_drafts_the_repeated_cycle():
    # forward 1: prefill; the bigram (9, 0) never occurred before: no draft, 1 token.
    # forward 2: (0, 1) occurred at the start: draft 10 * 2/4 = 5 tokens, all right, + bonus = 6.
    # forward 3: (4, 5, 6, 7) matches the prompt: 10 tokens (doubled after the full acceptance,
    #            cut at the prompt's end), all right, + bonus = 11. forward 4: the last 2.
    out = run("ngram")
    assert out.new_tokens[0] == expected(CYCLE[0], 20)
    assert out.stats.accepted_lengths == [[1], [6], [11], [2]]


def test_speculative_with_a_perfect_draft_commits_k_plus_one():
    out = run("speculative", draft_model=ScriptedModel(successor(V), vocab=V), num_draft=4)
    assert out.stats.accepted_lengths == [[5]] * 4
    assert out.stats.num_draft_forwards == 16


def test_jacobi_and_sjd_greedy_converge_one_position_per_forward_at_least():
    for name in ("jacobi", "sjd", "mc_sjd", "lookahead"):
        out = run(name, prompt=[[3, 4]], new=12)
        assert out.new_tokens[0] == expected([3, 4], 12), name
        assert all(n >= 1 for n, in out.stats.accepted_lengths)


def test_eos_inside_an_accepted_block():
    out = run("ngram", eos=5)
    assert out.new_tokens[0] == [1, 2, 3, 4, 5]
    assert out.stats.accepted_lengths == [[1], [4]]   # the 6-token block is cut after EOS
    assert run("ar", eos=5).stats.num_forwards == 5


@pytest.mark.parametrize("name", suite.TEXT_DECODERS)
def test_max_new_tokens_is_never_exceeded(name):
    opts = {"draft_model": ScriptedModel(successor(V), vocab=V)} if name == "speculative" else {}
    for new in (1, 2, 7):
        out = run(name, new=new, **opts)
        assert out.new_tokens[0] == expected(CYCLE[0], new)


def test_ragged_rows_advance_by_their_own_accepted_length():
    # row 0 repeats its cycle (n-gram drafts hit); row 1 has nothing to look up
    out = run("ngram", prompt=[[0, 1, 2, 3, 0, 1], [0, 0, 0, 0, 7, 9]], new=6)
    assert out.new_tokens == [expected([1], 6), expected([9], 6)]
    first = out.stats.accepted_lengths[0]
    assert first[0] > 1 and first[1] == 1


def test_bad_requests_raise_value_errors_that_name_the_fix():
    with pytest.raises(ValueError, match="choose one of"):
        run("nope")
    with pytest.raises(ValueError, match="its options are"):
        run("ngram", window=3)
    with pytest.raises(ValueError, match="greedy only"):
        run("jacobi", temperature=1.0)
    with pytest.raises(ValueError, match="draft_model"):
        run("speculative")
    with pytest.raises(ValueError, match="empty prompt"):
        run("ar", prompt=[[]])


def test_a_decoder_needing_custom_masks_is_refused_by_an_adapter_without_them():
    model = ScriptedModel(successor(V), vocab=V)
    model.capabilities = Capabilities()
    with pytest.raises(ValueError, match="custom_mask"):
        suite.generate(model, torch.tensor(CYCLE), decoder="lookahead", max_new_tokens=4)
