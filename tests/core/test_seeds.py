"""Token Recycling and SAM-Decoding beyond the registry's contract: the suffix automaton against brute
force, the dynamic match is an earlier occurrence, a static corpus drafts (and pays), the adjacency
matrix recycles the scored candidates, and a bad corpus= is refused naming the path."""
import random

import pytest
import torch
from tinymodels import tiny_model

import suite
from suite.decoders.chain.sam_decoding import SAMDecoding, SamRow, SuffixAutomaton, corpus_automaton
from suite.decoders.chain.token_recycling import seed_adjacency

NEW = 24


def _occurs(text: list[int], pattern: list[int]) -> bool:
    n = len(pattern)
    return any(text[i:i + n] == pattern for i in range(len(text) - n + 1))


def test_automaton_recognises_exactly_the_substrings():
    rng = random.Random(0)
    text = [rng.randrange(3) for _ in range(60)]
    sam = SuffixAutomaton()
    for x in text:
        sam.extend(x)
    for n in range(1, 7):
        for _ in range(60):
            pattern = [rng.randrange(3) for _ in range(n)]
            assert sam.contains(pattern) == _occurs(text, pattern), pattern
    assert len(sam.length) <= 2 * len(text)     # at most 2n - 1 states (+ the root)


def test_longest_suffix_match_and_its_continuation():
    """Matching a query against a fixed automaton keeps the longest suffix that occurs, and the
    state's continuation follows a real occurrence of it."""
    rng = random.Random(1)
    text = [rng.randrange(4) for _ in range(80)]
    query = [rng.randrange(4) for _ in range(40)]
    sam = SuffixAutomaton()
    for x in text:
        sam.extend(x)
    match = (0, 0)
    for i, x in enumerate(query):
        match = sam.advance(match, x)
        seen = query[:i + 1]
        longest = max((n for n in range(len(seen) + 1) if _occurs(text, seen[len(seen) - n:])), default=0)
        assert match[1] == longest
        if longest:
            start = sam.end[match[0]] + 1
            assert text[start - longest:start] == seen[len(seen) - longest:]


def test_dynamic_match_is_an_earlier_occurrence():
    """On the row's own text, the match is the longest suffix that occurred before the newest token,
    and the draft is what followed it."""
    text = [1, 2, 3, 4, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    dec = SAMDecoding(auxiliary=None)
    row = SamRow(SuffixAutomaton())
    dec._feed(row, text)
    assert row.match[1] == 3                                      # "1 2 3" occurred earlier
    assert row.dynamic.continuation(row.match[0], 2) in ([4, 9], [7, 8])
    assert row.dynamic.continuation(row.match[0], 2) == [7, 8]    # the latest occurrence
    dec._feed(row, text + [5])
    assert row.match == (0, 0)                                    # "... 3 5" never occurred before


def test_static_corpus_drafts_and_pays():
    """A corpus holding the continuation: greedy output equals ar's in far fewer forwards."""
    model = tiny_model("llama")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11]
    ar = suite.generate(model, torch.tensor([prompt]), decoder="ar", max_new_tokens=NEW)
    corpus = [[40, 41, 42], prompt + ar.new_tokens[0]]
    out = suite.generate(model, torch.tensor([prompt]), decoder="sam_decoding", max_new_tokens=NEW,
                         corpus=corpus, auxiliary=None, max_draft=12)
    assert out.new_tokens == ar.new_tokens
    assert out.stats.num_forwards <= 4      # prefill, then 12 + 1 accepted per step
    alone = suite.generate(model, torch.tensor([prompt]), decoder="sam_decoding", max_new_tokens=NEW,
                           auxiliary=None, max_draft=12)
    assert alone.new_tokens == ar.new_tokens and alone.stats.num_forwards > out.stats.num_forwards


def test_token_recycling_recycles_candidates():
    """The prompt seeds the matrix (most recent successor first), every scored slot's top-k replaces
    its token's row, and the trees it drafts save forwards on a tiny model."""
    assert seed_adjacency([1, 2, 1, 3, 1, 2], k=2) == {1: [2, 3], 2: [1], 3: [1]}
    model = tiny_model("llama")
    ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 10, 11]])
    adapter = suite.as_adapter(model)
    _, dec, state = suite.prepare(adapter, ids, decoder="token_recycling", max_new_tokens=NEW)
    res = suite.decode(adapter, dec, state)
    assert res.new_tokens == suite.generate(model, ids, max_new_tokens=NEW).new_tokens
    adjacency = state.rows[0].adjacency
    tokens = state.tokens[0]
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    # the newest committed tokens were scored in the last forward: their rows are the target's top-k there
    last = tokens[-2]
    rows = [i for i in range(len(tokens) - 1) if tokens[i] == last]
    assert adjacency[last] in [logits[i].topk(dec.k).indices.tolist() for i in rows]
    assert res.stats.num_forwards < NEW


def test_bad_corpus_is_refused_naming_it(tmp_path):
    class Tok:
        name_or_path = "t"

        def __len__(self):
            return 10

        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[ord(c) % 10 for c in t] for t in texts]}

    missing = tmp_path / "nowhere.txt"
    with pytest.raises(ValueError, match="nowhere.txt.*does not exist"):
        corpus_automaton(missing, Tok())
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\x00\x01\x02\xff")
    with pytest.raises(ValueError, match="weights.bin.*is not text"):
        corpus_automaton(binary, Tok())
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.bin").write_bytes(b"\x00")
    with pytest.raises(ValueError, match="empty.*holds no text"):
        corpus_automaton(empty, Tok())
    good = tmp_path / "good"
    good.mkdir()
    (good / "a.txt").write_text("hello world")
    (good / "b.png").write_bytes(b"\x89PNG\x00")
    with pytest.raises(ValueError, match="tokenizer="):
        corpus_automaton(good, None)
    built = corpus_automaton(good, Tok())
    assert built.documents == 1 and built.automaton.contains([ord(c) % 10 for c in "world"])
    with pytest.raises(ValueError, match="nowhere.txt"):
        suite.generate(tiny_model("llama"), torch.tensor([[1, 2, 3]]), decoder="sam_decoding", max_new_tokens=2,
                       corpus=str(missing), tokenizer=Tok())


def test_shipped_corpus_is_small_text():
    from text.generator import SAM_CORPUS
    assert SAM_CORPUS.is_file(), "python -m text.build_corpus writes it"
    data = SAM_CORPUS.read_bytes()
    assert 10_000 < len(data) <= 400_000 and b"\x00" not in data
    data.decode("utf-8")
