"""auto shares batches: concurrent auto requests (greedy, and seeded sampled ones) run in one batch, each
with the tokens it gets alone; its choice reads the request's own figures and the batch's live rows."""
import pytest
from tinymodels import tiny_model

import suite
from suite.cost import CostCurve
from suite.decoders.chain.auto import Auto, Seen
from suite.scheduler import Scheduler

PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7], [20, 21, 22, 20, 21], [30, 31, 30, 31, 30, 31, 32]]
CANDIDATES = ("ngram", "lookahead", "ar")


@pytest.fixture(scope="module")
def llama():
    return suite.as_adapter(tiny_model("llama"))


def alone(model, prompt, **kw):
    return suite.generate(model, [prompt], decoder=Auto(candidates=CANDIDATES), max_new_tokens=10, **kw).new_tokens[0]


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.8, "seed": 3}])
def test_concurrent_auto_requests_share_forwards_and_keep_their_tokens(llama, sampling):
    sched = Scheduler(llama, max_rows=8)
    requests = sched.enqueue([sched.request([p], decoder=Auto(candidates=CANDIDATES), max_new_tokens=10, **sampling)
                              for p in PROMPTS])
    outs = [r.result().new_tokens[0] for r in requests]
    assert outs == [alone(llama, p, **sampling) for p in PROMPTS]
    shared = set(requests[0].forward_ids) & set(requests[1].forward_ids) & set(requests[2].forward_ids)
    assert len(shared) >= 5                     # one batch: the three rows in the same forwards
    sched.close()


def test_the_choice_follows_the_cost_of_the_live_batch():
    """A draft that commits 2 tokens a row in a 4-token forward beats ar's 1 in 1 on a flat curve, and
    loses to it once the rows make the forward wide."""
    curve = CostCurve((1, 2, 4, 8, 16, 32, 64), (1.0, 1.0, 1.1, 1.4, 2.5, 5.0, 10.0))
    auto = Auto(curves=(curve, curve))
    draft, ar = type("D", (), {"requires": frozenset()})(), type("A", (), {"requires": frozenset()})()
    drafting, plain = Seen(2.0, 4.0, 5), Seen(1.0, 1.0, 5)
    assert auto.estimate(draft, drafting, 1) > auto.estimate(ar, plain, 1)
    assert auto.estimate(draft, drafting, 16) < auto.estimate(ar, plain, 16)


def test_equal_autos_compare_equal_by_value():
    a = Auto(options={"sam_decoding": {"corpus": "x.txt"}})
    b = Auto(options={"sam_decoding": {"corpus": "x.txt"}})
    assert a == b and hash(a) == hash(b) and a != Auto(options={"sam_decoding": {"corpus": "y.txt"}})


@pytest.mark.parametrize("step", ["free", "fixed"])
def test_auto_takes_the_same_steps_whatever_the_clock(monkeypatch, tmp_path, step):
    """No choice of auto reads the clock: the same greedy request, run three times on fresh loads of one model
    (the same empty prior; the last two under clocks that jump at random), takes the same forwards with the
    same candidates, and gives ar's tokens; on free widths it reads the measured cost curve, on a fixed step
    every slot up to W is free."""
    import random
    import time

    from suite.models.step import fixed_step
    monkeypatch.setenv("PARASUITE_COST", "1")               # the cost curve, measured once (in a temporary cache)
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    def load():
        model = tiny_model("llama")
        return fixed_step(model, 8, 16, max_cache_len=128) if step == "fixed" else suite.as_adapter(model)
    ids = [PROMPTS[0] + PROMPTS[2], PROMPTS[1] + PROMPTS[0]]
    decoder = Auto(candidates=("ngram", "lookahead", "token_recycling", "suffix", "ar"), recheck=4,
                   options={"suffix": {"global_tree": None}})       # no tree shared between the runs
    ar = suite.generate(load(), ids, decoder="ar", max_new_tokens=40).new_tokens
    real, runs = time.perf_counter, []
    for clock in (None, 0, 1):
        if clock is not None:
            jumps = random.Random(clock)
            monkeypatch.setattr(time, "perf_counter", lambda: real() + 10 * jumps.random())
        out = suite.generate(load(), ids, decoder=decoder, max_new_tokens=40)
        choices = {k: v for k, v in out.stats.events.items() if k.startswith("auto:")}
        runs.append((out.new_tokens, out.stats.num_forwards, choices))
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] == ar and len(runs[0][2]) >= 3
