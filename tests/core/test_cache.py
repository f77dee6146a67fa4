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
