"""Decoders with batch-wide state (`state.shared`: lookahead's mode gains, speculative's draft
cache, eagle's head cache, auto's candidates) let rows leave and join a running batch: two started
requests are joined mid-flight (`DecodeState.extend`), stepped together, and finished rows leave
(`DecodeState.select`); every row's greedy output is its prompt's decoded alone, token for token."""
import pytest
import torch
from tinymodels import tiny_eagle_head, tiny_model, tiny_tts

import suite
from suite.loop import advance, begin
from suite.scheduler import Scheduler

PROMPTS_A = [[5, 6, 7, 8, 9, 5, 6, 7], [3, 1, 4, 1, 5, 9, 2]]
PROMPTS_B = [[20, 21, 22, 20, 21], [40, 41], [30, 31, 30, 31, 30, 31, 32]]


@pytest.fixture(scope="module")
def llama():
    return suite.as_adapter(tiny_model("llama"))


@pytest.fixture(scope="module")
def options(llama):
    head = tiny_eagle_head(llama.model)
    return {"lookahead": {},
            "speculative": {"draft_model": tiny_model("llama", seed=1)},
            "eagle": {"draft_head": head},
            "auto": {"draft_head": head}}


def alone(model, prompt, budget):
    return suite.generate(model, [prompt], decoder="ar", max_new_tokens=budget).new_tokens[0]


def draft_view(decoder: str, state, i: int):
    """Row i's part of the batch-wide state, as a row decoded alone would hold it: the live slots
    of speculative's draft cache (positions, K/V) or of eagle's head cache (K/V); None otherwise."""
    s = state.shared
    if decoder == "eagle":
        live = s.valid[i]
        return (s.k[i][:, live], s.v[i][:, live])
    if decoder == "speculative":
        live = s.cache.valid[i]
        first, last = s.cache.backend.layers[0], s.cache.backend.layers[-1]
        return (s.cache.positions[i][live], first.keys[i][:, live], last.values[i][:, live])
    return None


def same_view(x, y) -> bool:
    return x is None and y is None or (len(x) == len(y) and all(
        a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=1e-4) for a, b in zip(x, y)))


def alone_steps(model, dec, decoder, prompt, budget):
    """The row decoded alone by `dec`, step by step: its new tokens, and each step's committed
    tokens and `draft_view`."""
    _, _, state = suite.prepare(model, [prompt], decoder=dec, max_new_tokens=budget)
    begin(dec, state)
    steps = []
    while not state.done[0]:
        step = advance(model, dec, state)
        steps.append((step.committed[0], draft_view(decoder, state, 0)))
    return state.new_tokens(0), steps


@pytest.mark.parametrize("ahead", [1, 3])
@pytest.mark.parametrize("decoder", ["lookahead", "speculative", "eagle", "auto"])
def test_rows_join_and_leave_a_running_batch(llama, options, decoder, ahead):
    """A runs `ahead` steps, B one (its prefill); B joins A; rows leave as they finish. Every row's
    tokens are its prompt's decoded alone. speculative's and eagle's drafts are deterministic
    (greedy, fixed sizes under PARASUITE_COST=0), so each row also steps as it does alone: the
    same tokens each forward, and after each, the same live slots in the draft or head cache (a
    lossless decoder's tokens alone cannot show its batch-wide state followed its rows).
    lookahead's first trajectories are random prompt tokens and auto picks candidates by what they
    committed before (its model's prior, from earlier tests too): only their tokens are compared, and A's
    budget outlasts `ahead` steps of its best candidate."""
    budget_a = 40 if decoder == "auto" else 14
    _, dec, a = suite.prepare(llama, PROMPTS_A, decoder=decoder, max_new_tokens=budget_a, **options[decoder])
    _, _, b = suite.prepare(llama, PROMPTS_B, decoder=dec, max_new_tokens=6)
    history = {}

    def record(side_or_owners, state, step):
        for i, new in enumerate(step.committed):
            owner = side_or_owners[i] if isinstance(side_or_owners, list) else (side_or_owners, i)
            if new:
                history.setdefault(owner, []).append((new, draft_view(decoder, state, i)))

    for side, state, steps in (("a", a, ahead), ("b", b, 1)):
        assert begin(dec, state) is None
        for _ in range(steps):
            record(side, state, advance(llama, dec, state))
        assert state.regroupable
    owners = [("a", r) for r in range(a.batch)] + [("b", r) for r in range(b.batch)]
    a.extend(b)
    out = {o: list(a.new_tokens(i)) for i, o in enumerate(owners)}
    joint = False
    while True:
        keep = [i for i in range(a.batch) if not a.done[i]]
        if len(keep) < a.batch:
            a.select(keep)
            owners = [owners[i] for i in keep]
        if not owners:
            break
        joint |= {side for side, _ in owners} == {"a", "b"}
        record(owners, a, advance(llama, dec, a))
        for i, o in enumerate(owners):
            out[o] = list(a.new_tokens(i))
    assert joint          # rows of both requests shared forwards
    for (side, r), tokens in out.items():
        prompt, budget = (PROMPTS_A[r], budget_a) if side == "a" else (PROMPTS_B[r], 6)
        ref, ref_steps = alone_steps(llama, dec, decoder, prompt, budget)
        assert tokens == ref == alone(llama, prompt, budget), (side, r)
        if decoder in ("speculative", "eagle"):
            mine = history[(side, r)]
            assert [new for new, _ in mine] == [new for new, _ in ref_steps], (side, r)
            for k, ((_, view), (_, ref_view)) in enumerate(zip(mine, ref_steps)):
                assert same_view(view, ref_view), (side, r, k)


@pytest.mark.parametrize("decoder", ["lookahead", "speculative", "eagle", "auto"])
def test_the_scheduler_joins_them_mid_flight(llama, options, decoder):
    """The scheduler's own path: newcomers extended into one state before their prefill (empty
    draft and head caches), then into the running batch."""
    sched = Scheduler(llama, max_rows=8)
    prompts, budgets = PROMPTS_A + PROMPTS_B, [12, 5, 9, 3, 7]
    first = sched.submit([prompts[0]], decoder=decoder, max_new_tokens=budgets[0], stream=True, **options[decoder])
    steps = first.steps()
    next(steps)
    later = [sched.submit([p], decoder=decoder, max_new_tokens=n, **options[decoder])
             for p, n in zip(prompts[1:], budgets[1:])]
    list(steps)
    outs = [first.result().new_tokens[0]] + [r.result().new_tokens[0] for r in later]
    assert outs == [alone(llama, p, n) for p, n in zip(prompts, budgets)]
    assert len({r.key for r in [first] + later}) == 1      # they shared a batch key
    sched.close()


def test_generate_returns_sequences_of_frames():
    """suite.generate over a multi-codebook model: sequences (B, P + new, Q), prompt then new frames."""
    from speech.alignment import frame_conditioning
    from speech.tts_model import FrameTTSAdapter
    model = tiny_tts()
    cfg = model.config
    prompt = [(cfg.parallel_token,) + (cfg.pad,) * (cfg.num_codebooks - 1), (cfg.bos,) * cfg.num_codebooks]
    table = frame_conditioning(cfg.phone_ids("a b c a".split()), [2, 1, 0, 3], 3)
    adapter = FrameTTSAdapter(model, "frame").for_request([1], [table])
    out = suite.generate(adapter, [prompt], decoder="parallel", max_new_tokens=5, seed=0, temperature=1.0)
    assert out.sequences.shape == (1, 2 + len(out.new_tokens[0]), cfg.num_codebooks)
    assert out.sequences[0].tolist() == [list(f) for f in prompt + out.new_tokens[0]]
