"""EAGLE-2 tree drafting with a tiny random draft head: greedy equals `ar` token for token (batch 1
and ragged batches, two architectures), sampling matches the target distribution (χ²), and bad
heads are refused with the fix named."""
import pytest
import torch
from chisq import goodness_of_fit
from tinymodels import tiny_model, tiny_eagle_head

import suite
from suite import SamplingParams, logits_to_probs
from suite.decoders.chain.eagle import Eagle


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("options", [{}, {"top_k": 2, "depth": 3, "max_nodes": 5, "cost": None}])
def test_greedy_equals_ar(arch, options):
    model = tiny_model(arch)
    head = tiny_eagle_head(model)
    prompts = [torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]]), torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])]
    for ids in prompts:
        ref = suite.generate(model, ids, decoder="ar", max_new_tokens=16)
        out = suite.generate(model, ids, decoder=Eagle(head, **options), max_new_tokens=16)
        assert out.new_tokens == ref.new_tokens
    # ragged batch, left-padded
    ids = torch.tensor([[0, 0, 0, 5, 6, 7, 8], [3, 1, 4, 1, 5, 9, 2]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1] * 7])
    ref = suite.generate(model, ids, mask, decoder="ar", max_new_tokens=20)
    out = suite.generate(model, ids, mask, decoder=Eagle(head, **options), max_new_tokens=20)
    assert out.new_tokens == ref.new_tokens


def test_trees_commit_several_tokens_per_forward():
    # the target's own greedy continuation is easy for a head on a model this sharp: some forward
    # commits more than one token (the tree path was verified)
    model = tiny_model("llama", vocab=8, sharpen=12.0)
    head = tiny_eagle_head(model, k=8)
    out = suite.generate(model, torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4]]), decoder=Eagle(head, cost=None), max_new_tokens=40)
    assert max(n for step in out.stats.accepted_lengths for n in step) > 1


V, NEW, ROWS = 5, 3, 300
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


def exact_law(model, params):
    law = {(): 1.0}
    for _ in range(NEW):
        seqs = list(law)
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT + list(s) for s in seqs])).logits[:, -1]
        probs = logits_to_probs(logits, params)
        law = {s + (t,): law[s] * float(probs[i, t]) for i, s in enumerate(seqs) for t in range(V)}
    return law


@pytest.mark.parametrize("kw", [dict(temperature=1.0), dict(temperature=0.7, top_k=3)])
def test_sampling_matches_target(kw):
    model = tiny_model("llama", vocab=V, sharpen=3.0)
    head = tiny_eagle_head(model, k=V)
    law = exact_law(model, SamplingParams(**kw))
    samples, longest = [], 0
    for seed in range(4):
        out = suite.generate(model, torch.tensor([PROMPT] * ROWS), max_new_tokens=NEW, seed=seed,
                             decoder=Eagle(head, top_k=2, depth=2, max_nodes=4, cost=None), **kw)
        samples += [tuple(t) for t in out.new_tokens]
        longest = max([longest] + [n for step in out.stats.accepted_lengths for n in step])
    assert goodness_of_fit(samples, law) > 1e-3
    assert longest > 1


def test_bad_heads_are_refused(tmp_path):
    model = tiny_model("llama")
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="text.train_draft"):
        suite.generate(model, ids, decoder=Eagle(), max_new_tokens=4)
    with pytest.raises(ValueError, match="text.train_draft"):
        suite.generate(model, ids, decoder=Eagle(tmp_path / "missing"), max_new_tokens=4)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="text.train_draft"):
        suite.generate(model, ids, decoder=Eagle(tmp_path / "bad"), max_new_tokens=4)
    other = tiny_model("llama", vocab=50)
    tiny_eagle_head(other, k=32).save(tmp_path / "other")
    with pytest.raises(ValueError, match=r"vocabulary 50 .*hidden size 32.*vocabulary 99 and hidden size 32"):
        suite.generate(model, ids, decoder=Eagle(tmp_path / "other"), max_new_tokens=4)


def test_auto_equals_ar_and_reports_its_choices():
    from suite.decoders.chain.auto import Auto
    model = tiny_model("llama")
    head = tiny_eagle_head(model)
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8])
    ref = suite.generate(model, ids, mask, decoder="ar", max_new_tokens=24)
    out = suite.generate(model, ids, mask, decoder=Auto(draft_head=head, probe=1, recheck=4), max_new_tokens=24)
    assert out.new_tokens == ref.new_tokens
    choices = {k: v for k, v in out.stats.events.items() if k.startswith("auto:")}
    assert sum(choices.values()) == out.stats.num_forwards and len(choices) >= 3


def test_auto_samples_the_target_distribution():
    from suite.decoders.chain.auto import Auto
    model = tiny_model("llama", vocab=V, sharpen=3.0)
    head = tiny_eagle_head(model, k=V)
    kw = dict(temperature=1.0)
    law = exact_law(model, SamplingParams(**kw))
    samples = []
    for seed in range(3):
        out = suite.generate(model, torch.tensor([PROMPT] * ROWS), max_new_tokens=NEW, seed=seed,
                             decoder=Auto(draft_head=head, probe=1, recheck=2), **kw)
        samples += [tuple(t) for t in out.new_tokens]
    assert goodness_of_fit(samples, law) > 1e-3


@pytest.mark.parametrize("decoder", ["eagle", "speculative"])
def test_drafts_are_sized_the_same_whatever_the_clock(monkeypatch, tmp_path, decoder):
    """Eagle's tree depth and a draft model's draft length are sized by the cost curve and the drafter's
    price in target forwards (the share of the target's weights it reads), never by the clock: under
    clocks that jump at random, greedy and seeded sampled requests take the same steps."""
    import random
    import time

    from suite.decoders.chain.speculative import Speculative
    monkeypatch.setenv("PARASUITE_COST", "1")               # the cost curve, measured once (in a temporary cache)
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    model = tiny_model("llama", vocab=8, sharpen=12.0)       # sharp: drafts are accepted, so their sizes show
    make = (lambda: Eagle(tiny_eagle_head(model, k=8))) if decoder == "eagle" else (lambda: Speculative(draft="self:1"))
    ids = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4], [3, 1, 4, 1, 5, 7, 2, 6]])
    real, runs = time.perf_counter, []
    for clock in (None, 0, 1):
        if clock is not None:
            jumps = random.Random(clock)
            monkeypatch.setattr(time, "perf_counter", lambda: real() + 10 * jumps.random())
        for kw in ({}, {"temperature": 1.0, "seed": 7}):
            out = suite.generate(model, ids, decoder=make(), max_new_tokens=32, **kw)
            runs.append((clock is None, out.new_tokens, out.stats.accepted_lengths))
    first = [r[1:] for r in runs if r[0]]
    assert [r[1:] for r in runs[2:4]] == first and [r[1:] for r in runs[4:6]] == first
    assert first[0][0] == suite.generate(model, ids, decoder="ar", max_new_tokens=32).new_tokens


