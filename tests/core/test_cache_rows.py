"""Rows leave and join a cache (continuous batching): after `KVCache.select` and `KVCache.extend` each
row's next logits equal those of the row decoded alone, over the growing cache, the static cache and
CFG's doubled cache (fanout 2), the forward's mask chosen as the loop chooses it (so `holes` is
checked too)."""
import copy

import pytest
import torch
from tinymodels import tiny_model

import suite
from suite import ClassifierFreeGuidance, Draft, HFCausalLM
from suite.loop import forward_mask
from suite.models.static_cache import StaticHFCausalLM

KINDS = ["growing", "static", "cfg", "cfg_static"]
RAGGED = [[5, 6, 7, 8, 9, 5, 6, 7, 8], [20, 21, 22, 20], [30, 31, 32, 33, 34, 35]]
EVEN = [[7, 3, 4, 5, 6, 8], [9, 3, 4, 5, 6, 2], [11, 3, 4, 5, 6, 12]]   # CFG: one prompt length per batch


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def prompts(kind):
    return EVEN if kind.startswith("cfg") else RAGGED


def adapter_for(kind, model, rows):
    """The adapter of a batch of `rows` (CFG binds its rows' null prompts: the first token nulled)."""
    static = kind.endswith("static")
    base = StaticHFCausalLM(model, max_cache_len=64, compiled_widths=()) if static else HFCausalLM(model)
    if not kind.startswith("cfg"):
        return base
    return ClassifierFreeGuidance(base, 2.0, torch.tensor([[1] + r[1:] for r in rows]))


def run(adapter, rows, steps, decoder="ar"):
    _, dec, state = suite.prepare(adapter, rows, decoder=decoder, max_new_tokens=20)
    it = suite.decode_steps(adapter, dec, state)
    for _ in range(steps):
        next(it)
    return state


def next_logits(adapter, cache, rows):
    """Each row's logits after its last token: (tokens, num_cached) per row, the uncached tail as one
    ragged draft over a copy of `cache`, with the mask the loop would pass (None when plain causal)."""
    pending = [t[n:] for t, n in rows]
    draft = Draft.from_rows(pending, [list(range(n, len(t))) for t, n in rows], device=cache.valid.device)
    cache = copy.deepcopy(cache)
    with torch.no_grad():
        logits = adapter(draft.tokens, draft.positions, cache, forward_mask(adapter, cache, draft))
    return [logits[b, len(p) - 1] for b, p in enumerate(pending)]


def alone(kind, model, tokens):
    """The row's next logits decoded alone: its whole sequence through a fresh cache."""
    adapter = adapter_for(kind, model, [tokens[:len(prompts(kind)[0])]])
    return next_logits(adapter, adapter.new_cache(1), [(tokens, 0)])[0]


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_select_keeps_rows_as_decoded_alone(kind, model):
    rows = prompts(kind)[:2]
    state = run(adapter_for(kind, model, rows), rows, steps=4, decoder="jacobi")
    seqs = [(list(state.tokens[b]), state.num_cached[b]) for b in range(2)]
    both = copy.deepcopy(state.cache)
    both.select([1, 0])                                       # reordered
    got = next_logits(adapter_for(kind, model, rows[::-1]), both, seqs[::-1])
    for b, (tokens, _) in enumerate(seqs[::-1]):
        close(got[b], alone(kind, model, tokens))
    cache = state.cache
    cache.select([1])                                         # row A leaves
    assert cache.batch == 1 and cache.fanout == (2 if kind.startswith("cfg") else 1)
    live = int(cache.lengths()[0])
    assert cache.num_slots - live <= 0.25 * cache.num_slots   # no wide cache left behind by A
    for layer in cache.backend.layers:
        assert layer.keys.shape[0] == cache.fanout
        assert (int(layer.cumulative_length) if kind.endswith("static") else layer.keys.shape[2]) == cache.num_slots
    close(next_logits(adapter_for(kind, model, rows[1:]), cache, seqs[1:])[0], alone(kind, model, seqs[1][0]))


@pytest.mark.parametrize("kind", KINDS)
def test_extend_joins_caches_of_different_lengths(kind, model):
    a_rows, b_rows = prompts(kind)[:1], prompts(kind)[1:2]
    a = run(adapter_for(kind, model, a_rows), a_rows, steps=4)
    b = run(adapter_for(kind, model, b_rows), b_rows, steps=1)                 # prefilled only
    assert a.cache.num_slots != b.cache.num_slots
    a.cache.extend(b.cache)
    assert a.cache.batch == 2 and a.cache.holes
    if not kind.endswith("static"):                            # GrowingLayer: views of its new buffer
        assert all(layer.keys.data_ptr() == layer._kbuf.data_ptr() for layer in a.cache.backend.layers)
    seqs = [(a.tokens[0], a.num_cached[0]), (b.tokens[0], b.num_cached[0])]
    got = next_logits(adapter_for(kind, model, a_rows + b_rows), a.cache, seqs)
    for row, (tokens, _) in zip(got, seqs):
        close(row, alone(kind, model, tokens))
    for keep in ([0], [1]):                                   # and either leaves again (padding cropped)
        cache = copy.deepcopy(a.cache)
        cache.select(keep)
        assert cache.num_slots == len(seqs[keep[0]][0]) - 1 and not cache.holes
        rows = [(a_rows + b_rows)[keep[0]]]
        got = next_logits(adapter_for(kind, model, rows), cache, [seqs[keep[0]]])[0]
        close(got, alone(kind, model, seqs[keep[0]][0]))


@pytest.mark.parametrize("kind", KINDS)
def test_zero_rows_then_join_prefilled_and_new_rows(kind, model):
    rows = prompts(kind)
    state = run(adapter_for(kind, model, rows[:1]), rows[:1], steps=3)
    cache = state.cache
    cache.select([])
    assert (cache.batch, cache.num_slots, cache.holes) == (0, 0, False)
    b = run(adapter_for(kind, model, rows[1:2]), rows[1:2], steps=2)
    cache.extend(b.cache)
    assert not cache.holes                                    # nothing padded: still plain causal
    fresh = adapter_for(kind, model, rows[2:]).new_cache(1)   # a request not prefilled yet joins
    cache.extend(fresh)
    assert cache.batch == 2 and cache.holes
    seqs = [(b.tokens[0], b.num_cached[0]), (rows[2], 0)]     # B's next step and C's prefill in one forward
    got = next_logits(adapter_for(kind, model, rows[1:]), cache, seqs)
    for row, (tokens, _) in zip(got, seqs):
        close(row, alone(kind, model, tokens))
    empty = adapter_for(kind, model, rows[:1]).new_cache(0)  # an empty running batch takes the rows
    empty.extend(cache)
    assert empty.batch == 2 and empty.num_slots == cache.num_slots


def test_extend_refuses_caches_of_other_kinds(model):
    growing = HFCausalLM(model).new_cache(1)
    with pytest.raises(ValueError, match="fanout"):
        growing.extend(adapter_for("cfg", model, EVEN[:1]).new_cache(1))
    with pytest.raises(ValueError, match="StaticKVCache"):
        growing.extend(adapter_for("static", model, RAGGED[:1]).new_cache(1))


def test_encoder_decoder_cache_moves_cross_attention_rows():
    """The cross-attention K/V (cache.encdec) follows the rows; encoder lengths differ: zero-padded."""
    from transformers import DynamicCache, EncoderDecoderCache

    from suite import KVCache
    g = torch.Generator().manual_seed(0)

    def filled(rows, slots, enc):
        cache = KVCache(rows)
        cache.encdec = EncoderDecoderCache(cache.backend, DynamicCache())
        for i in range(2):
            cache.backend.update(torch.randn(rows, 2, slots, 4, generator=g),
                                 torch.randn(rows, 2, slots, 4, generator=g), i)
            cache.encdec.cross_attention_cache.update(torch.randn(rows, 2, enc, 4, generator=g),
                                                      torch.randn(rows, 2, enc, 4, generator=g), i)
            cache.encdec.is_updated[i] = True
        cache.append(torch.arange(slots).expand(rows, slots), torch.ones(rows, slots, dtype=torch.bool), dense=True)
        return cache

    a, b = filled(2, 3, 5), filled(1, 4, 7)
    a_cross = [layer.keys.clone() for layer in a.encdec.cross_attention_cache.layers]
    b_cross = [layer.keys.clone() for layer in b.encdec.cross_attention_cache.layers]
    a.select([1])
    a.extend(b)
    assert a.valid.tolist() == [[True, True, True, False], [True] * 4] and a.holes
    for layer, old_a, old_b in zip(a.encdec.cross_attention_cache.layers, a_cross, b_cross):
        assert layer.keys.shape == (2, 2, 7, 4)
        assert torch.equal(layer.keys[0, :, :5], old_a[1]) and not layer.keys[0, :, 5:].any()
        assert torch.equal(layer.keys[1], old_b[0])
    assert all(a.encdec.is_updated.values())
    unfilled = KVCache(1)
    unfilled.encdec = EncoderDecoderCache(unfilled.backend, DynamicCache())
    with pytest.raises(ValueError, match="first forward"):
        a.extend(unfilled)


def test_row_inputs_move_with_their_rows():
    """Per-row inputs an adapter keeps in the cache (encoder states) follow select and extend; rows of
    another length join zero-padded (and say so), rows of another kind are refused, nothing changed."""
    from suite import KVCache
    from suite.cache import row_inputs_shape

    def rows(values, length=2, dim=3):
        cache = KVCache(len(values))
        cache.row_inputs["encoder_states"] = torch.tensor(values, dtype=torch.float)[:, None, None].expand(
            -1, length, dim)
        return cache

    a, b = rows([0, 1, 2]), rows([3, 4])
    a.select([2, 0])
    a.extend(b)
    assert a.row_inputs["encoder_states"][:, 0, 0].tolist() == [2, 0, 3, 4] and not a.inputs_padded
    assert row_inputs_shape(a) == (("encoder_states", (3,)),)
    with pytest.raises(ValueError, match="inputs of one kind"):
        a.extend(rows([5], dim=4))
    assert a.batch == 4 and a.row_inputs["encoder_states"].shape == (4, 2, 3)
    a.extend(rows([6], length=3))
    states = a.row_inputs["encoder_states"]
    assert states.shape == (5, 3, 3) and a.inputs_padded
    assert states[:4, 2].eq(0).all() and states[4].eq(6).all()
    empty = KVCache(0)
    empty.extend(b)
    assert empty.row_inputs["encoder_states"][:, 0, 0].tolist() == [3, 4]


def test_rows_join_and_leave_a_static_cache_in_its_reserved_rows(model):
    """The static cache's buffers hold a bucket of rows (suite.models.static_cache.row_bucket): rows leave in place,
    join into the reserved rows, and the buffers are allocated again only when the batch outgrows its bucket;
    every row's next logits stay those of the row decoded alone."""
    rows = RAGGED
    cache = run(adapter_for("static", model, rows[:1]), rows[:1], steps=3).cache
    b = run(adapter_for("static", model, rows[1:2]), rows[1:2], steps=4)
    cache.extend(b.cache)                                        # 2 rows: bucket 2

    def buffers():
        return [layer.reserve[0].data_ptr() for layer in cache.backend.layers]

    held = buffers()
    assert all(layer.reserve[0].shape[0] == 2 and layer.keys.shape[0] == 2 for layer in cache.backend.layers)
    cache.select([1])                                            # row A leaves: in place
    assert buffers() == held and all(layer.keys.shape[0] == 1 for layer in cache.backend.layers)
    c = run(adapter_for("static", model, rows[2:]), rows[2:], steps=2)
    cache.extend(c.cache)                                        # row C joins into the reserved row
    assert buffers() == held
    seqs = [(b.tokens[0], b.num_cached[0]), (c.tokens[0], c.num_cached[0])]
    got = next_logits(adapter_for("static", model, rows[1:]), cache, seqs)
    for row, (tokens, _) in zip(got, seqs):
        close(row, alone("static", model, tokens))
    cache.extend(adapter_for("static", model, rows[:1]).new_cache(1))   # a third row outgrows the bucket
    assert buffers() != held and all(layer.reserve[0].shape[0] == 4 for layer in cache.backend.layers)
