"""Cached logits equal uncached logits after propose / commit / discard, in ragged batches."""
import copy

import pytest
import torch
from tinymodels import tiny_model

import suite
from suite import Draft
from suite.api import prepare

PROMPTS = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7], [0, 0, 20, 21, 22, 20, 21, 23], [0, 30, 31, 32, 30, 31, 32, 30]])
MASK = (torch.arange(8)[None] >= torch.tensor([[0], [2], [1]])).long()


def check_cache_against_full_forward(model, adapter, state):
    cache = copy.deepcopy(state.cache)
    for b in range(state.batch):
        live = cache.positions[b][cache.valid[b]].sort().values
        assert live.tolist() == list(range(state.num_cached[b]))   # exactly the committed prefix
    pending = [state.pending(b) for b in range(state.batch)]
    draft = Draft.from_rows(pending, [list(range(state.num_cached[b], len(state.tokens[b])))
                                      for b in range(state.batch)], device=state.device)
    with torch.no_grad():
        cached_logits = adapter(draft.tokens, draft.positions, cache, cache.attention_mask(draft.mask))
        for b in range(state.batch):
            full = model(torch.tensor([state.tokens[b]])).logits[0, -1]
            torch.testing.assert_close(cached_logits[b, len(pending[b]) - 1], full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decoder", ["jacobi", "lookahead", "ngram", "speculative"])
def test_cache_after_each_step(decoder):
    model = tiny_model("llama")
    opts = {"draft": "self:1"} if decoder == "speculative" else {}
    adapter, dec, state = prepare(model, PROMPTS, MASK, decoder, max_new_tokens=16, **opts)
    for step in suite.decode_steps(adapter, dec, state):
        if not all(step.done):
            check_cache_against_full_forward(model, adapter, state)


def test_compaction_gathers_live_slots_to_the_front():
    model = tiny_model("qwen2")
    adapter, dec, state = prepare(model, PROMPTS, MASK, "ngram", max_new_tokens=12)
    steps = suite.decode_steps(adapter, dec, state)
    next(steps)
    next(steps)
    dead = torch.zeros_like(state.cache.valid)
    dead[0, 1:] = True
    state.cache.discard(dead)                  # roll row 0 back to its first token, then gather
    state.num_cached[0] = 1
    state.cache.compact(max_dead_fraction=0.0)
    assert state.cache.num_slots == int(state.cache.lengths().max())
    assert state.cache.backend.get_seq_length() == state.cache.num_slots
    check_cache_against_full_forward(model, adapter, state)


def test_growing_layer_appends_in_place_and_equals_the_dynamic_layer():
    """suite.growing_layer.GrowingLayer: the same keys/values as transformers' DynamicLayer through appends,
    crops and a gather that replaces them, while appends write into one buffer (no copy of the cache)."""
    from transformers.cache_utils import DynamicLayer

    from suite.growing_layer import GrowingLayer
    g = torch.Generator().manual_seed(0)
    grow, plain = GrowingLayer(), DynamicLayer()

    def step(n):
        k, v = torch.randn(2, 3, n, 4, generator=g), torch.randn(2, 3, n, 4, generator=g)
        out = grow.update(k, v), plain.update(k, v)
        for a, b in zip(*out):
            torch.testing.assert_close(a, b, rtol=0, atol=0)

    step(5)
    buffer = grow._kbuf.data_ptr()
    for n in (1, 3, 1):
        step(n)
    assert grow._kbuf.data_ptr() == buffer                    # appended in place
    grow.crop(-2), plain.crop(-2)
    step(2)
    order = torch.tensor([[1, 0, 2, 3, 4, 5, 6, 7, 8, 9]] * 2)[:, None, :, None].expand(-1, 3, -1, 4)
    for layer in (grow, plain):                               # what KVCache._gather_backend does
        layer.keys, layer.values = layer.keys.gather(2, order), layer.values.gather(2, order)
    step(70)                                                  # re-seats, then grows past its capacity
    assert grow.get_seq_length() == plain.get_seq_length() == 80


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gather_slots_is_the_gather_along_slots(dtype):
    """Compaction's copy (one index_select over rows of D) equals a gather along the slot axis, for a
    growing layer's strided view of its buffer and for a plain tensor, with spare slots behind."""
    from suite.cache import gather_slots
    buffer = torch.randn(3, 2, 9, 4).to(dtype)
    order = torch.tensor([[0, 2, 5], [1, 3, 4], [6, 5, 0]])
    for t in (buffer[:, :, :7], buffer.clone()):
        want = t.gather(2, order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3]))
        assert torch.equal(gather_slots(t, order), want)
        assert torch.equal(gather_slots(t, order, slots=8)[:, :, :3], want)
