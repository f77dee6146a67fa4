"""auto's prior on disk: a new process (a freshly loaded model) starts from what earlier requests of the
same model on this machine saw, instead of probing every candidate; nothing is written where the cost
curve is off (PARASUITE_COST=0, the tests' default)."""
import torch
from tinymodels import tiny_model

import suite
from suite.decoders.chain import auto, auto_prior
from suite.decoders.chain.auto import Seen


def test_a_new_load_of_the_model_starts_from_the_saved_prior(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    monkeypatch.setenv("PARASUITE_COST", "1")
    first = auto._prior(suite.as_adapter(tiny_model("llama")))
    assert first == {} and first.path is not None
    first["ngram"] = Seen(committed=2.5, width=4.0, factor=1.2, steps=9)
    auto_prior.save(first, force=True)
    again = auto._prior(suite.as_adapter(tiny_model("llama")))     # another model object: read from disk
    assert again == {"ngram": Seen(committed=2.5, width=4.0, factor=1.2, steps=9)}
    assert auto._prior(suite.as_adapter(tiny_model("qwen2"))) == {}  # another model: its own prior


def test_auto_with_a_saved_prior_still_equals_ar(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    monkeypatch.setenv("PARASUITE_COST", "1")
    model = tiny_model("llama")
    prior = auto._prior(suite.as_adapter(model))
    prior.update(ngram=Seen(3.0, 4.0, 1.0, 50), ar=Seen(1.0, 1.0, 1.0, 50), lookahead=Seen(0.1, 8.0, 5.0, 50))
    ids = torch.randint(1, 99, (2, 6), generator=torch.Generator().manual_seed(1))
    ref = suite.generate(model, ids, decoder="ar", max_new_tokens=16)
    out = suite.generate(model, ids, decoder=suite.make_decoder("auto", candidates=("ngram", "lookahead", "ar")),
                         max_new_tokens=16)
    assert torch.equal(out.sequences, ref.sequences)
    assert "auto:lookahead" not in out.stats.events     # judged from the prior: no probe step for it


def test_nothing_is_written_with_the_cost_curve_off(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    monkeypatch.setenv("PARASUITE_COST", "0")
    prior = auto._prior(suite.as_adapter(tiny_model("llama")))
    prior["ar"] = Seen(1.0, 1.0, 1.0, 3)
    auto_prior.save(prior, force=True)
    assert prior.path is None and not (tmp_path / "auto-prior").exists()
