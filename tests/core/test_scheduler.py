"""suite.scheduler: requests join a running batch and finished rows leave it, and each request's
output is what it gives decoded alone (greedy: token for token)."""
import gc
from dataclasses import dataclass

import pytest
import torch
from tinymodels import tiny_model

import suite
from suite import draft
from suite.cost import CostCurve
from suite.decoders.chain.ar import AR
from suite.scheduler import RequestCancelled, Scheduler

PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7], [20, 21, 22, 20, 21], [30, 31, 30, 31, 30, 31, 32], [40, 41]]


@pytest.fixture(scope="module")
def llama():
    return suite.as_adapter(tiny_model("llama"))


def alone(model, prompt, decoder="ar", budget=12, **kw):
    return suite.generate(model, [prompt], decoder=decoder, max_new_tokens=budget, **kw).new_tokens[0]


@pytest.mark.parametrize("decoder", ["ar", "jacobi", "ngram", "lookahead", "sjd"])
def test_requests_joining_mid_flight_get_their_alone_output(llama, decoder):
    sched = Scheduler(llama, max_rows=8)
    budgets = [12, 5, 9, 3]
    first = sched.submit([PROMPTS[0]], decoder=decoder, max_new_tokens=budgets[0], stream=True)
    steps = first.steps()
    next(steps)                                   # the first request is running: the others join it
    later = [sched.submit([p], decoder=decoder, max_new_tokens=b) for p, b in zip(PROMPTS[1:], budgets[1:])]
    list(steps)
    outs = [first.result().new_tokens[0]] + [r.result().new_tokens[0] for r in later]
    assert outs == [alone(llama, p, decoder, b) for p, b in zip(PROMPTS, budgets)]
    sched.close()


def test_short_prompts_prefill_inside_the_running_forward(llama):
    sched = Scheduler(llama, max_rows=8)
    first = sched.submit([PROMPTS[0]], max_new_tokens=40, stream=True)
    steps = first.steps()
    next(steps)
    short = sched.submit([PROMPTS[3]], max_new_tokens=5)              # 2 tokens: joins before any forward
    long = sched.submit([PROMPTS[0] + PROMPTS[2]], max_new_tokens=5)  # 15 tokens: a prefill forward of its own
    list(steps)
    assert short.result().new_tokens[0] == alone(llama, PROMPTS[3], budget=5)
    assert long.result().new_tokens[0] == alone(llama, PROMPTS[0] + PROMPTS[2], budget=5)
    assert short.forward_ids[0] in first.forward_ids
    assert long.forward_ids[0] not in first.forward_ids
    sched.close()


def test_a_multi_row_request_and_its_stats(llama):
    sched = Scheduler(llama)
    req = sched.submit(PROMPTS[:3], decoder="ngram", max_new_tokens=10)
    res = req.result()
    ref = suite.generate(llama, PROMPTS[:3], decoder="ngram", max_new_tokens=10)
    assert res.new_tokens == ref.new_tokens
    assert res.stats.num_new_tokens == sum(map(len, res.new_tokens))
    assert len(res.stats.accepted_lengths) == res.stats.num_forwards
    sched.close()


def test_a_bad_request_fails_alone_and_others_finish(llama):
    sched = Scheduler(llama)
    good = sched.submit([PROMPTS[0]], max_new_tokens=6)
    with pytest.raises(ValueError, match="unknown decoder"):
        sched.submit([PROMPTS[1]], decoder="nonsense")
    with pytest.raises(ValueError, match="empty prompt"):
        sched.submit([[]])
    assert good.result().new_tokens[0] == alone(llama, PROMPTS[0], budget=6)
    sched.close()


@dataclass(frozen=True)
class Fragile(AR):
    """ar, except that a step holding a row with token 99 raises (an error in one request's rows)."""

    def propose(self, state):
        if any(99 in t for t in state.tokens):
            raise RuntimeError("a row holds token 99")
        return super().propose(state)


def test_an_error_in_a_shared_forward_fails_only_its_request(llama):
    sched = Scheduler(llama)
    fragile = Fragile()
    good = sched.submit([PROMPTS[0]], decoder=fragile, max_new_tokens=120, stream=True)   # long: bad joins it
    steps = good.steps()
    first = next(steps)
    bad = sched.submit([[99, 5]], decoder=fragile, max_new_tokens=5)     # joins good's batch: their forward fails
    streamed = first.committed[0] + [t for s in steps for t in s.committed[0]]
    assert good.result().new_tokens[0] == streamed == alone(llama, PROMPTS[0], budget=120)
    assert good.isolated                     # it ran on alone, from what it had been given
    with pytest.raises(RuntimeError, match="token 99"):
        bad.result()
    sched.close()
    assert sched.live_rows == 0


def test_cancel_frees_the_rows(llama):
    sched = Scheduler(llama)
    long = sched.submit([PROMPTS[0]], max_new_tokens=40, stream=True)
    short = sched.submit([PROMPTS[1]], max_new_tokens=8)
    next(long.steps())
    long.cancel()
    with pytest.raises(RequestCancelled):
        long.result(timeout=30)
    assert short.result().new_tokens[0] == alone(llama, PROMPTS[1], budget=8)
    sched.close()
    assert sched.live_rows == 0


# decoders whose rows never depend on batch mates (`batch_independent`): chain decoders with fixed sizes
SEEDED = {"ar": {}, "sjd": {"cost": None}, "mc_sjd": {"cost": None}, "ngram": {"cost": None},
          "lookahead": {"cost": None}, "speculative": {"cost": None, "draft_model": "tiny"},
          "token_recycling": {"cost": None}, "s2d2": {"mask_token_id": 3, "block_size": 3},
          "block_diffusion": {"mask_token_id": 3, "block_size": 3, "threshold": 0.5}}


@pytest.mark.parametrize("decoder", list(SEEDED))
def test_seeded_sampling_does_not_depend_on_batch_mates(llama, decoder):
    """Seeded sampled requests share forwards (each row draws from its own stream, keyed by its
    request's seed and its index there) and each gets its alone tokens, a two-row request too."""
    opts = {k: tiny_model("llama", seed=1) if v == "tiny" else v for k, v in SEEDED[decoder].items()}
    kw = dict(decoder=decoder, max_new_tokens=10, temperature=1.0, **opts)
    sched = Scheduler(llama)
    rows, seeds = [[PROMPTS[0]], [PROMPTS[1]], PROMPTS[2:]], [3, 4, 3]
    reqs = sched.enqueue([sched.request(r, seed=s, **kw) for r, s in zip(rows, seeds)]
                         + [sched.request([PROMPTS[0]], **kw)])            # an unseeded mate
    outs = [r.result().new_tokens for r in reqs]
    assert set(reqs[0].forward_ids) & set(reqs[1].forward_ids) & set(reqs[2].forward_ids)
    for r, s, out in zip(rows, seeds, outs):
        assert out == suite.generate(llama, r, seed=s, **kw).new_tokens
    sched.close()


def test_seeded_sampling_runs_alone_where_rows_depend_on_mates(llama):
    """sjd sized by a cost curve picks one window for the live rows: a seeded request keeps a
    batch of its own, and its alone tokens."""
    curve = CostCurve((1, 2, 4, 8), (1.0, 1.1, 1.3, 1.8))
    kw = dict(decoder="sjd", max_new_tokens=10, temperature=1.0, cost=curve)
    sched = Scheduler(llama)
    mates = [sched.submit([p], **kw) for p in PROMPTS[1:]]
    mine = sched.submit([PROMPTS[0]], seed=3, **kw)
    assert mine.result().new_tokens[0] == alone(llama, PROMPTS[0], "sjd", 10, temperature=1.0, seed=3, cost=curve)
    for m in mates:
        m.result()
        assert not set(m.forward_ids) & set(mine.forward_ids)
    sched.close()


def test_memory_stays_flat_over_many_requests(llama):
    sched = Scheduler(llama, max_rows=4)

    def burst():
        reqs = [sched.submit([PROMPTS[i % 4]], decoder="ngram", max_new_tokens=3 + i % 5) for i in range(40)]
        reqs[3].cancel()
        for r in reqs:
            try:
                r.result()
            except RequestCancelled:
                pass

    def live_tensors() -> int:
        draft._causal_block.cache_clear()      # cached masks of the batch shapes met so far: not a leak
        gc.collect()
        return len([o for o in gc.get_objects() if isinstance(o, torch.Tensor)])

    burst()
    before = live_tensors()
    for _ in range(3):
        burst()
    after = live_tensors()
    assert sched.live_rows == 0 and after <= before + 5
    sched.close()


def test_an_idle_thread_ends_and_lets_its_model_go():
    # an app evicts a folder's pipeline: once idle, nothing of the scheduler keeps the model alive
    import weakref
    from tinymodels import tiny_model
    model = tiny_model("llama")
    gone = weakref.ref(model)
    sched = Scheduler(model)
    sched.idle_exit_s = 0.05
    first = sched.generate([PROMPTS[0]], max_new_tokens=4)
    thread = sched.engine._thread
    thread.join(5)
    assert not thread.is_alive()
    assert sched.generate([PROMPTS[0]], max_new_tokens=4).new_tokens == first.new_tokens    # a new thread serves it
    sched.engine._thread.join(5)
    del model, sched, thread
    gc.collect()
    assert gone() is None


class Counting:
    """The adapter, counting its forwards."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


@pytest.mark.parametrize("decoder", ["ar", "ngram"])
def test_concurrent_requests_share_forwards(llama, decoder):
    counting = Counting(llama)
    sched = Scheduler(counting)
    reqs = [sched.submit([p], decoder=decoder, max_new_tokens=10) for p in PROMPTS]
    own = [r.result().stats.num_forwards for r in reqs]
    assert counting.calls <= max(own) + len(reqs) < sum(own)   # one batch (a join may prefill in a forward of its own)
    sched.close()
