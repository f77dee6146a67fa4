"""Sampling decoders match the target distribution: chi-square over the joint law of the first
three new tokens, computed exactly by enumeration on a tiny vocabulary."""

import pytest
import torch
from chisq import goodness_of_fit
from tinymodels import tiny_model

import suite
from suite import SamplingParams, logits_to_probs

V, NEW, ROWS, BATCHES = 5, 3, 400, 5
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", vocab=V, sharpen=3.0)


def exact_law(model, params: SamplingParams) -> dict:
    law = {(): 1.0}
    for _ in range(NEW):
        seqs = list(law)
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT + list(s) for s in seqs])).logits[:, -1]
        probs = logits_to_probs(logits, params)
        law = {s + (t,): law[s] * float(probs[i, t]) for i, s in enumerate(seqs) for t in range(V)}
    return law


SETTINGS = {"t1": dict(temperature=1.0), "topk": dict(temperature=1.0, top_k=3),
            "topp": dict(temperature=1.0, top_p=0.8)}


def decoder_options(name: str) -> dict:
    """What each in-distribution decoder needs beyond the model (a new one without an entry fails)."""
    return {"ar": {}, "sjd": {}, "mc_sjd": {}, "ngram": {}, "lookahead": {}, "auto": {}, "token_recycling": {},
            "sam_decoding": {"corpus": [[1, 2, 3, 4, 1, 2], [3, 2, 1]]}, "suffix": {},
            "speculative": {"draft_model": tiny_model("llama", vocab=V, seed=1, sharpen=3.0)},
            "s2d2": {"mask_token_id": 3, "block_size": 3, "route_threshold": 0.0},
            "ngram_prior": {"inputs": suite.RequestInputs(prior_tokens=(PROMPT + PROMPT[:4],) * ROWS)}}[name]


def cases() -> list[tuple[str, str]]:
    """Every in-distribution decoder of a causal LM at T = 1; the text ones also under top-k and top-p
    (the box decoders' χ² tests: tests/vision/test_vision_locus.py)."""
    names = ["ar"] + suite.list_decoders("document", guarantee="in distribution")
    return [(n, s) for n in names for s in SETTINGS if s == "t1" or n in suite.TEXT_DECODERS]


@pytest.mark.parametrize("decoder,setting", cases())
def test_sampling_matches_target(model, decoder, setting):
    kw = SETTINGS[setting]
    opts = decoder_options(decoder)
    law = exact_law(model, SamplingParams(**kw))
    samples, longest = [], 0
    for seed in range(BATCHES):
        out = suite.generate(model, torch.tensor([PROMPT] * ROWS), decoder=decoder, max_new_tokens=NEW,
                             seed=seed, **kw, **opts)
        samples += [tuple(t) for t in out.new_tokens]
        longest = max([longest] + [n for step in out.stats.accepted_lengths for n in step])
    assert goodness_of_fit(samples, law) > 1e-3
    if decoder != "ar":   # drafts were really accepted: some forward committed several tokens
        assert longest > 1
