"""SuffixDecoding (suite/decoders/chain/suffix.py): the suffix trees' matching, frequency scores and adaptive
length; the global tree learned across requests, shared per model and bounded under a stream of requests.
(Greedy equality with ar on every architecture: test_exact.py; sampling in distribution: test_distribution.py.)"""
import random
import tracemalloc

import torch
from tinymodels import tiny_model

import suite
from suite.decoders.chain.suffix import SuffixDecoding, global_tree, global_tree_stats
from suite.decoders.chain.suffix_tree import ANCHORS, SHIFT, SuffixTree


def tree_of(*seqs, **kw) -> SuffixTree:
    tree = SuffixTree(**kw)
    for seq in seqs:
        tree.add(tree.new_sequence(), list(seq))
    return tree


def test_frequency_scores_follow_the_counts():
    """After "1 2 3", 4 followed three times and 5 once: 4 scores 3/4, 5 1/4; below min_prob it is left out."""
    tree = tree_of([1, 2, 3, 4, 6], [1, 2, 3, 4, 6], [9, 2, 3, 4, 7], [1, 2, 3, 5, 8])
    spec = tree.speculate([0, 2, 3], alpha=4, max_spec=8, min_prob=0.0)
    first = {t: p for t, par, p in zip(spec.tokens, spec.parents, spec.probs) if par < 0}
    assert first == {4: 0.75, 5: 0.25}
    below_4 = [t for t, par in zip(spec.tokens, spec.parents) if par >= 0 and spec.tokens[par] == 4]
    assert sorted(below_4) == [6, 7]
    assert spec.score == sum(spec.probs) and spec.match_length == 2
    assert 5 not in tree.speculate([0, 2, 3], alpha=4, max_spec=8, min_prob=0.3).tokens


def test_adaptive_length_is_alpha_times_the_match():
    """MAX_SPEC = alpha * p: a 2-token match drafts 2 tokens at alpha 1, a longer match more; a longer match
    narrows the occurrences to those that agree further back."""
    long = list(range(10, 40))
    tree = tree_of(long, [50, 51, 12, 13, 90, 91, 92, 93, 94, 95])
    short = tree.speculate([70, 12, 13], alpha=1, max_spec=32, min_prob=0.0)
    assert short.match_length == 2 and len(short.tokens) == 2
    deep = tree.speculate(long[:8], alpha=1, max_spec=32, min_prob=0.0)
    assert deep.match_length == 8 and deep.tokens == long[8:16]        # one occurrence: a path, all prob 1
    assert tree.speculate(long[:8], alpha=2, max_spec=5, min_prob=0.0).tokens == long[8:13]


def test_path_mode_follows_the_most_frequent_child():
    tree = tree_of([1, 2, 3, 4, 6], [1, 2, 3, 4, 6], [1, 2, 3, 5, 8])
    spec = tree.speculate([2, 3], alpha=4, max_spec=8, min_prob=0.0, tree=False)
    assert spec.tokens == [4, 6] and spec.parents == [-1, 0]


def test_stream_of_1000_requests_stays_within_the_cap():
    """The global tree under 1,000 requests of 20-300 tokens: never over its token cap, the oldest requests
    evicted first, no index entry left of an evicted one, and its memory flat once full."""
    rng = random.Random(0)
    cap = 20_000
    tree = SuffixTree(max_tokens=cap)
    phrases = [[rng.randrange(500) for _ in range(rng.randrange(3, 12))] for _ in range(60)]
    tracemalloc.start()
    sizes, order = [], []
    for r in range(1000):
        sid = tree.new_sequence()
        order.append(sid)
        for _ in range(rng.randrange(1, 12)):        # outputs arrive a few tokens at a time
            chunk = [t for _ in range(rng.randrange(1, 4)) for t in rng.choice(phrases)]
            tree.add(sid, chunk)
            assert tree.tokens <= cap
        if r in (400, 999):
            sizes.append(tracemalloc.get_traced_memory()[0])
        tree.speculate(rng.choice(phrases)[:4], alpha=2, max_spec=16, min_prob=0.1)
    tracemalloc.stop()
    assert tree.evicted > 500
    kept = list(tree.seqs)
    assert kept == order[-len(kept):]                                 # the newest, in order: FIFO eviction
    assert tree.tokens == sum(len(s) for s in tree.seqs.values())
    live = set(kept)
    positions = [p for slots in tree.index.values() for p in slots]
    assert all(p >> SHIFT in live for p in positions)
    assert len(positions) <= len(ANCHORS) * tree.tokens
    assert sizes[1] < 1.25 * sizes[0]                                 # full at 400: no growth after


def test_global_tree_learns_across_requests():
    """A request's output in the model's global tree: the same request again (or one whose answer
    repeats it) is drafted from it, in far fewer forwards, still ar's tokens."""
    model = tiny_model("qwen2")
    prompt = torch.tensor([[3, 17, 29, 41, 8, 66]])
    ar = suite.generate(model, prompt, decoder="ar", max_new_tokens=32)
    shared = SuffixTree(10_000)
    kw = dict(decoder="suffix", max_new_tokens=32, cost=None, max_spec=16, global_tree=shared)
    first = suite.generate(model, prompt, **kw)
    again = suite.generate(model, prompt, **kw)
    alone = suite.generate(model, prompt, **{**kw, "global_tree": None})
    assert first.new_tokens == again.new_tokens == alone.new_tokens == ar.new_tokens
    assert again.stats.num_forwards < alone.stats.num_forwards
    # the match grows with each accepted block, and MAX_SPEC = alpha * match with it
    assert max(n for step in again.stats.accepted_lengths for n in step) > 8
    stats = shared.stats()
    assert stats["sequences"] == 2 and stats["tokens"] == 64                  # first's and again's outputs
    assert stats["accepted"] > 0 and 0 < stats["hit_rate"] <= 1


def test_one_global_tree_per_model():
    """Every request on a model (through its adapter or not) shares one tree; another model has its own."""
    a, b = tiny_model("llama"), tiny_model("llama", seed=1)
    assert global_tree(a) is global_tree(suite.as_adapter(a)) is SuffixDecoding().bind(a).global_tree
    assert global_tree(b) is not global_tree(a)
    before = global_tree_stats(a)["sequences"]
    suite.generate(a, torch.tensor([[5, 6, 7, 5, 6]]), decoder="suffix", max_new_tokens=6)
    stats = global_tree_stats(a)
    assert stats["sequences"] == before + 1 and {"tokens", "max_tokens", "hit_rate", "acceptance"} <= set(stats)
    assert SuffixDecoding(global_tree=None).bind(a).global_tree is None


def test_auto_runs_suffix_where_its_forecast_pays_and_feeds_its_global_tree():
    """auto asks suffix what its draft would promise each step (the same draft its propose then makes): with a
    request already in suffix's global tree, auto runs suffix for most of the repeat, still ar's tokens; the
    global tree also learns the requests whose last steps another candidate ran."""
    from suite.decoders.chain.auto import Auto
    model = tiny_model("qwen2")
    prompt = torch.tensor([[3, 17, 29, 41, 8, 66]])
    ar = suite.generate(model, prompt, decoder="ar", max_new_tokens=40)
    shared = SuffixTree(10_000)
    dec = Auto(candidates=("ngram", "suffix", "ar"), options={"suffix": {"global_tree": shared, "cost": None}})
    first = suite.generate(model, prompt, decoder=dec, max_new_tokens=40)
    assert shared.stats()["tokens"] == 40                  # the whole output, whoever ran its last step
    again = suite.generate(model, prompt, decoder=dec, max_new_tokens=40)
    assert first.new_tokens == again.new_tokens == ar.new_tokens
    assert again.stats.events.get("auto:suffix", 0) >= 1
    without = suite.generate(model, prompt, decoder=Auto(candidates=("ngram", "ar")), max_new_tokens=40)
    assert again.stats.num_forwards < without.stats.num_forwards / 2 and again.stats.num_forwards < 10


def test_suffix_rates_learn_from_steps_another_decoder_ran():
    """follow(): the plan's nodes as deep as the committed tokens go are scored against them."""
    from suite.decoders.chain.suffix import SuffixRow
    from suite.decoders.chain.tree import DraftTree, NodeRates
    rates = NodeRates(ranks=16, prior=lambda rank: 0.5)
    row = SuffixRow(SuffixTree(), rates=rates)
    tree = DraftTree(tokens=[7, 8, 9, 5], parents=[-1, 0, 1, -1], scores=[0.5, 0.25, 0.1, 0.4], ranks=[0, 0, 0, 1],
                     sources=["global"] * 4)
    SuffixDecoding._shadow(row, tree, [7, 8])              # 7 and 8 hit, 5 missed, 9 (depth 3) not known
    assert rates.tries == {("global", 0, 0): 1.0, ("global", 1, 0): 1.0, ("global", 0, 1): 1.0}
    assert rates.hits == {("global", 0, 0): 1.0, ("global", 1, 0): 1.0, ("global", 0, 1): 0.0}


def test_global_tree_kept_on_disk_within_its_cap(tmp_path):
    """save/load: the sequences come back oldest first (the index rebuilt: the same drafts), the cap keeps the
    newest, a missing or foreign file gives an empty tree; the file grows no further once the tree is full."""
    rng = random.Random(1)
    tree = SuffixTree(max_tokens=3_000)
    for _ in range(200):
        tree.add(tree.new_sequence(), [rng.randrange(300) for _ in range(rng.randrange(10, 60))])
    path = tmp_path / "tree.json"
    tree.save(path)
    back = SuffixTree.load(path, 3_000)
    assert list(back.seqs.values()) == list(tree.seqs.values()) and back.tokens == tree.tokens <= 3_000
    context = list(tree.seqs.values())[-1][:12]
    assert back.speculate(context, 4, 16, 0.0) == tree.speculate(context, 4, 16, 0.0)
    small = SuffixTree.load(path, 1_000)                       # a smaller cap keeps the newest sequences
    assert small.tokens <= 1_000 and list(small.seqs.values()) == list(tree.seqs.values())[-len(small.seqs):]
    size = path.stat().st_size
    for _ in range(200):
        tree.add(tree.new_sequence(), [rng.randrange(300) for _ in range(rng.randrange(10, 60))])
    tree.save(path)
    assert path.stat().st_size < 1.3 * size and size < 8 * 3_000     # bounded: a few bytes a token
    (tmp_path / "other.json").write_text('{"not": "a tree"}')
    assert SuffixTree.load(tmp_path / "other.json").tokens == 0 == SuffixTree.load(tmp_path / "none.json").tokens


def test_global_file_keeps_the_model_tree_across_processes(tmp_path):
    """global_file: the model's tree is read from the file when first made and written as requests end, so a new
    process (here: a new model object of the same weights) drafts from the earlier requests' outputs."""
    import suite.decoders.chain.suffix as sfx
    path = str(tmp_path / "g.json")
    model = tiny_model("qwen2")
    prompt = torch.tensor([[3, 17, 29, 41, 8, 66]])
    kw = dict(decoder="suffix", max_new_tokens=32, cost=None, max_spec=16, global_file=path)
    first = suite.generate(model, prompt, **kw)
    assert SuffixTree.load(path).tokens == 32
    sfx._GLOBAL.pop(model)                                     # a new process: no tree in memory
    again = suite.generate(model, prompt, **kw)
    alone = suite.generate(model, prompt, **{**kw, "global_tree": None})
    assert first.new_tokens == again.new_tokens == alone.new_tokens
    assert again.stats.num_forwards < alone.stats.num_forwards
    assert global_tree(model).path == path


def test_auxiliary_recycled_successors_join_the_tree_and_stay_exact():
    """auxiliary='token_recycling' (the default) adds Token Recycling's nodes to the draft tree; None leaves the
    paper's trees alone; both give ar's tokens."""
    from suite.decoders.chain.token_recycling import KIND
    model = tiny_model("llama")
    prompt = torch.tensor([[3, 17, 29, 41, 8, 66, 3, 17]])
    ar = suite.generate(model, prompt, decoder="ar", max_new_tokens=24)
    seen = []
    orig = SuffixDecoding.accept

    def spy(self, state, draft, logits):
        seen.extend(draft.meta[0].sources)
        return orig(self, state, draft, logits)
    SuffixDecoding.accept = spy
    try:
        kw = dict(decoder="suffix", max_new_tokens=24, cost=None, global_tree=None)
        with_aux = suite.generate(model, prompt, **kw)
        assert KIND in seen
        seen.clear()
        alone = suite.generate(model, prompt, **kw, auxiliary=None)
        assert KIND not in seen
    finally:
        SuffixDecoding.accept = orig
    assert with_aux.new_tokens == alone.new_tokens == ar.new_tokens
