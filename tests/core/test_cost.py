"""Cost-aware sizing: the cost curve is measured once and cached on disk, drafts are sized by
expected tokens per second (a plain step where none pays), and sizing never changes the tokens."""
import pytest
import torch
from tinymodels import tiny_model

import suite
from suite.cost import AcceptanceRates, CostCurve, RunningMean, best_size, forward_cost


def test_curve_interpolates_and_extrapolates():
    c = CostCurve((1, 2, 4), (1.0, 1.2, 1.6))
    assert c(1) == 1.0 and c(3) == pytest.approx(1.4) and c(6) == pytest.approx(2.0)
    assert c.relative(4) == pytest.approx(1.6) and c.step(2, 2) == c(4)


def test_best_size_drafts_only_what_pays():
    cpu = CostCurve((1, 2, 4, 8), (1.0, 1.2, 1.55, 1.8))
    flat = CostCurve((1, 64), (1.0, 1.0))
    sure, hopeless = AcceptanceRates(8, prior=0.95, strength=50), AcceptanceRates(8, prior=0.05, strength=50)
    assert best_size([hopeless.gains(7)], cpu) == 0              # a plain one-token step
    assert best_size([sure.gains(7)], cpu) == 7
    assert best_size([hopeless.gains(7)], flat) >= 5             # free slots: draft (nearly) everything
    assert best_size([[0.0]], cpu) == 0                          # nothing to draft


def test_rates_learn_and_drift_back_to_the_prior():
    r = AcceptanceRates(4, prior=0.5)
    for _ in range(20):
        r.update(4, 0)
    assert r.alpha(0) < 0.1
    for _ in range(60):
        r.update(0, 0)             # plain steps: no news, the estimate drifts back
    assert r.alpha(0) > 0.3
    m = RunningMean(2.0)
    m.add(1.0), m.add(1.0)
    assert 1.0 < m.value < 2.0


def test_forward_cost_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    model = suite.as_adapter(tiny_model("llama", seed=3))
    curve = forward_cost(model, context=16, widths=(1, 2, 4), repeats=1, refresh=True)
    files = list((tmp_path / "cost").glob("*.json"))
    assert len(files) == 1 and len(curve.seconds) == 3 and all(s > 0 for s in curve.seconds)
    assert forward_cost(model) is curve                       # memoised in the process
    assert list(curve.seconds) == sorted(curve.seconds)


@pytest.mark.parametrize("name", ["ngram", "jacobi", "sjd", "lookahead"])
def test_sizing_keeps_the_tokens(name):
    model = tiny_model("qwen2")
    ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]])
    ref = suite.generate(model, ids, decoder="ar", max_new_tokens=20)
    expensive = CostCurve((1, 2, 64), (1.0, 1.9, 60.0))        # every extra slot nearly doubles the cost
    for cost in (expensive, CostCurve((1, 64), (1.0, 1.0))):
        dec = suite.make_decoder(name, cost=cost)
        out = suite.generate(model, ids, decoder=dec, max_new_tokens=20)
        assert out.new_tokens == ref.new_tokens
    out = suite.generate(model, ids, decoder=suite.make_decoder(name, cost=expensive), max_new_tokens=20)
    assert sum(n > 1 for step in out.stats.accepted_lengths for n in step) <= 3   # almost only plain steps
