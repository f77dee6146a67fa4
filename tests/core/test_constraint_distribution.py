"""Sampling under a grammar stays lossless (issue 37): with a regex constraint on a tiny vocabulary,
the joint law of the first three new tokens of each in-distribution decoder matches the constrained
law (the target's logits masked to what the grammar allows, then softmax), computed exactly by
enumeration: chi-square at T = 1. The drafts' q (speculative's draft model) are masked the same way."""
import pytest
import torch
from chisq import goodness_of_fit
from tinymodels import tiny_model

import suite
from suite import SamplingParams, logits_to_probs

V, NEW, ROWS, BATCHES = 5, 3, 400, 4
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]
PIECES = ["a", "b", "c", "ab", "ca"]          # token id -> its text
REGEX = "(a|b)cab[abc]*"    # a or b first, then "cab" forced (spelled c+ab, ca+b or c+a+b: the target picks), then free


@pytest.fixture(scope="module")
def grammar():
    xgr = pytest.importorskip("xgrammar")
    from suite.constraint import Grammar
    info = xgr.TokenizerInfo(PIECES, vocab_size=V, stop_token_ids=[])
    compiled = xgr.GrammarCompiler(info).compile_regex(REGEX)
    return Grammar("regex", REGEX, compiled, V)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", vocab=V, sharpen=3.0)


def constrained_law(model, grammar) -> dict:
    params, law = SamplingParams(1.0), {(): 1.0}
    row = grammar.row()
    for _ in range(NEW):
        seqs = list(law)
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT + list(s) for s in seqs])).logits[:, -1]
        masked = torch.stack([row.masked(logits[i], s) for i, s in enumerate(seqs)])
        probs = logits_to_probs(masked, params)
        law = {s + (t,): law[s] * float(probs[i, t]) for i, s in enumerate(seqs) for t in range(V) if probs[i, t] > 0}
    return law


OPTIONS = {"sjd": {}, "lookahead": {}, "ngram": {},
           "speculative": lambda: {"draft_model": tiny_model("llama", vocab=V, seed=1, sharpen=3.0), "num_draft": 2}}


@pytest.mark.parametrize("decoder", ["ar", "sjd", "lookahead", "speculative"])
def test_constrained_sampling_matches_the_constrained_law(model, grammar, decoder):
    law = constrained_law(model, grammar)
    assert {s[0] for s in law} == {0, 1} and {s[1] for s in law} == {2, 4}      # the grammar's tokens only
    options = OPTIONS.get(decoder, {})
    options = options() if callable(options) else options
    samples, forced = [], 0
    for seed in range(BATCHES):
        out = suite.generate(model, [PROMPT] * ROWS, decoder=decoder, max_new_tokens=NEW, temperature=1.0,
                             seed=seed, inputs=suite.RequestInputs(constraints=grammar.rows(ROWS, forced=True)),
                             **options)
        samples += [tuple(n[:NEW]) for n in out.new_tokens]
        forced += out.stats.num_forced_tokens
    assert forced > 0                                  # forced spans were verified (speculative rule, point masses)
    assert goodness_of_fit(samples, law) > 1e-3


def test_tree_paths_after_a_rejected_branch_are_still_masked(grammar):
    """path_masks walks a draft tree depth first: a branch the grammar rejects ((a, a): after "a" comes
    "c") leaves its sibling ((a, c)) masked, and only the paths under the rejected token unmasked."""
    row = grammar.row()
    bits = torch.full((4, 1), -1, dtype=torch.int32)
    ok = row.path_masks([(0,), (0, 0), (0, 0, 1), (0, 2)], bits, [0, 1, 2, 3])
    assert ok == [True, False, False, True]
    allowed = lambda r: [t for t in range(V) if int(bits[r, 0]) >> t & 1]     # noqa: E731
    assert allowed(0) == [2, 4] and allowed(3) == [0, 3]     # after "a": c or ca; after "ac": a or ab
    assert row.path_masks([()], bits, [0]) == [True] and allowed(0) == [0, 1]     # rolled back to the start
