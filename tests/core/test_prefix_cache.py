"""suite.prefix_cache: a request starts from its longest cached prefix (prompt and output of finished
rows), and its greedy tokens equal those decoded without the cache; the tree keeps the longest entry,
evicts least recently used entries past its memory cap, and counts what it did."""
import pytest
import torch
from tinymodels import tiny_eagle_head, tiny_model

import suite
from suite.prefix_cache import HIT_EVENT, PrefixCache
from suite.scheduler import Scheduler

SYSTEM = [3, 9, 14, 27, 33, 41, 52, 60, 7, 18, 29, 35]


@pytest.fixture(scope="module")
def llama():
    return suite.as_adapter(tiny_model("llama"))


def alone(model, prompt, decoder="ar", budget=10, **options):
    return suite.generate(model, [prompt], decoder=decoder, max_new_tokens=budget, **options).new_tokens[0]


@pytest.mark.parametrize("decoder", ["ar", "ngram", "lookahead", "eagle"])
def test_a_chat_and_a_shared_prefix_reuse_the_cache_and_keep_their_tokens(llama, decoder):
    options = {"draft_head": tiny_eagle_head(llama.model)} if decoder == "eagle" else {}
    cache = PrefixCache(min_tokens=4)
    sched = Scheduler(llama, max_rows=4, prefix_cache=cache)
    first = SYSTEM + [70, 71]
    out1 = sched.generate([first], decoder=decoder, max_new_tokens=10, **options).new_tokens[0]
    turn2 = first + out1 + [80, 81, 82]                     # the next turn: history, then a new message
    req = sched.submit([turn2], decoder=decoder, max_new_tokens=10, **options)
    assert req.result().new_tokens[0] == alone(llama, turn2, decoder, **options)
    cached = len(first) + len(out1) - 1                      # the last committed token was never scored
    assert req.stats.events[HIT_EVENT] >= cached - 1
    batch = sched.submit([SYSTEM + [90, 91, 92], SYSTEM + [93]], decoder=decoder, max_new_tokens=10, **options)
    new = batch.result().new_tokens
    assert new == [alone(llama, SYSTEM + [90, 91, 92], decoder, **options), alone(llama, SYSTEM + [93], decoder, **options)]
    assert batch.stats.events[HIT_EVENT] == 2 * len(SYSTEM)
    counts = cache.counters()
    assert counts["hits"] >= 3 and counts["hit_tokens"] >= cached - 1 + 2 * len(SYSTEM)
    sched.close()


def test_a_burst_sharing_a_prefix_waits_for_the_first_prefill_and_reuses_it(llama):
    cache = PrefixCache(min_tokens=4)
    sched = Scheduler(llama, max_rows=8, prefix_cache=cache, max_tokens=8)    # prompts prefilled in chunks
    prompts = [SYSTEM + [70 + i, 71 + i] for i in range(3)]
    requests = sched.enqueue([sched.request([p], decoder="ar", max_new_tokens=6) for p in prompts])
    assert [r.result().new_tokens[0] for r in requests] == [alone(llama, p, budget=6) for p in prompts]
    assert [r.stats.events.get(HIT_EVENT, 0) >= 8 for r in requests] == [False, True, True]
    sched.close()


def test_the_tree_keeps_the_longest_entry_and_evicts_past_its_cap():
    cache = PrefixCache(max_bytes=40 * 2 * 2 * 4 * 4, min_tokens=1)     # 40 tokens of K and V (H 2, D 4, fp32)
    cache.store(_State(list(range(10))), [0])
    cache.store(_State(list(range(15))), [0])              # extends the first: the first goes
    assert cache.counters()["entries"] == 1 and cache.longest(list(range(12)) + [99])[0] == 12
    cache.store(_State([50 + i for i in range(20)]), [0])
    cache.store(_State(list(range(8))), [0])               # held inside the first: nothing new, the first used
    cache.store(_State([80 + i for i in range(10)]), [0])  # 45 tokens: the least recently used goes
    assert cache.counters()["evictions"] == 1 and cache.longest([50, 51])[0] == 0
    assert cache.longest(list(range(5)))[0] == 5 and cache.nbytes <= cache.max_bytes


class _State:
    """A finished one-row state whose cache holds its tokens' K/V at positions 0..T-1."""

    def __init__(self, row):
        n = len(row)
        self.tokens = [row]
        self.num_cached = [n]
        self.cache = suite.cache.KVCache(1)
        self.cache.valid = torch.ones(1, n, dtype=torch.bool)
        self.cache.positions = torch.arange(n)[None]
        from suite.growing_layer import GrowingLayer
        layer = GrowingLayer()
        layer.seat(torch.randn(1, 2, n, 4), torch.randn(1, 2, n, 4), n)
        self.cache.backend.layers.append(layer)
