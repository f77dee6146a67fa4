"""The suffix trees SuffixDecoding drafts from (suite/decoders/chain/suffix.py): token sequences, the
occurrences of any suffix of a context in them, and the frequency-scored continuation tree below it.

A suffix tree over sequences has a node for every substring; its count is how often the substring
occurs, and the subtree below the node of the context's matched suffix holds every continuation seen
after it, each child with its count. This form keeps the sequences and, per anchor n-gram, where it
last occurred (at most `occurrences` places, the most recent), and builds the node's subtree on demand
from those occurrences: the same counts (over the recent occurrences) without a node per substring, so
memory is a few entries per stored token. The tree is bounded by `max_tokens`: adding past it evicts
whole sequences, oldest first, and every index entry of an evicted sequence goes with it.

`save` / `load` keep a tree on disk (its sequences, oldest first, as compact JSON, written atomically; the
index is rebuilt on load): the file holds at most `max_tokens` tokens, a few bytes each.
"""
from __future__ import annotations

import heapq
import os
import threading
import time
from dataclasses import dataclass, field

ANCHORS = (8, 2, 1)  # n-gram lengths indexed, the longest with an earlier occurrence looked up first
SHIFT = 32           # a position is sequence id << SHIFT | index


@dataclass
class Speculation:
    """A candidate tree below the matched suffix: node i holds tokens[i] under parents[i] (-1: after
    the context), probs[i] the share of the occurrences that continue through it (the paper's
    estimate of its chance); score = sum(probs) (the expected accepted length)."""
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    match_length: int = 0

    @property
    def score(self) -> float:
        return sum(self.probs)


class SuffixTree:
    """Sequences (by id) and their anchor index. `add` appends tokens to a sequence, `speculate`
    drafts after a context; `max_tokens` (None: unbounded) caps the tokens kept, `max_sequences` the
    sequences (the oldest go first)."""

    def __init__(self, max_tokens: int | None = None, max_depth: int = 64, occurrences: int = 32,
                 max_sequences: int = 10_000):
        self.max_tokens, self.max_depth, self.occurrences = max_tokens, max_depth, occurrences
        self.max_sequences = max_sequences          # requests kept at most (those that made no tokens count too)
        self.seqs: dict[int, list[int]] = {}        # insertion order: the oldest first
        self.index: dict[int, list[int]] = {}       # hash of an anchor n-gram -> positions, oldest first
        self.tokens = 0                             # stored tokens (what max_tokens bounds)
        self.lookups = self.hits = self.drafted = self.accepted = 0
        self.evicted = 0
        self.rates = None                           # the drafts' node rates, shared by the requests (suffix.py)
        self.path: str | None = None                # where `save_now` keeps it (suffix.py's global_file)
        self.saved_at = 0.0
        self._next = 0
        self._lock = threading.Lock()               # one tree may serve requests on several threads

    # -- building -----------------------------------------------------------------------------------

    def new_sequence(self) -> int:
        with self._lock:
            self._next += 1
            self.seqs[self._next] = []
            self._evict(keep=self._next)
            return self._next

    def add(self, sid: int, tokens: list[int]) -> None:
        """Append `tokens` to sequence `sid` (ignored once it was evicted), indexing each new
        position under every anchor that ends there; then evict the oldest sequences past the cap."""
        with self._lock:
            seq = self.seqs.get(sid)
            if seq is None or not tokens:
                return
            if self.max_tokens is not None and len(seq) + len(tokens) > self.max_tokens:
                tokens = tokens[:max(self.max_tokens - len(seq), 0)]     # one sequence alone never exceeds the cap
            for x in tokens:
                seq.append(x)
                i = len(seq) - 1
                for n in ANCHORS:
                    if i + 1 >= n:
                        self._index(hash(tuple(seq[i + 1 - n:i + 1])), sid << SHIFT | i)
            self.tokens += len(tokens)
            self._evict(keep=sid)

    def _index(self, key: int, pos: int) -> None:
        slots = self.index.get(key)
        if slots is None:
            self.index[key] = [pos]
            return
        slots.append(pos)
        if len(slots) > self.occurrences:
            del slots[0]

    def _evict(self, keep: int) -> None:
        while (self.max_tokens is not None and self.tokens > self.max_tokens) or len(self.seqs) > self.max_sequences:
            sid = next((s for s in self.seqs if s != keep), None)
            if sid is None:
                return
            self.remove(sid)

    def remove(self, sid: int) -> None:
        """Forget sequence `sid` and its index entries (callers hold the lock, or call from one thread)."""
        seq = self.seqs.pop(sid)
        for n in ANCHORS:
            for i in range(n - 1, len(seq)):
                key = hash(tuple(seq[i + 1 - n:i + 1]))
                slots = self.index.get(key)
                if slots is None:
                    continue
                slots[:] = [p for p in slots if p >> SHIFT != sid]
                if not slots:
                    del self.index[key]
        self.tokens -= len(seq)
        self.evicted += 1

    def entries(self) -> int:
        return sum(len(s) for s in self.index.values())

    # -- matching -----------------------------------------------------------------------------------

    def occurrences_of(self, context: list[int]) -> list[tuple[int, int, int]]:
        """(sequence id, end index, match length) of every recent earlier occurrence of the context's
        longest indexed suffix, each with its own match length (how far back it agrees, at most
        max_depth); only occurrences followed by at least one token."""
        for n in ANCHORS:      # the longest anchor with an earlier occurrence (the context's own end is one)
            if len(context) < n:
                continue
            out = []
            for pos in self.index.get(hash(tuple(context[-n:])), ()):
                sid, i = pos >> SHIFT, pos & ((1 << SHIFT) - 1)
                seq = self.seqs[sid]
                if i + 1 < len(seq):
                    length = _agreement(seq, i, context, self.max_depth)
                    if length >= n:
                        out.append((sid, i, length))
            if out:
                return out
        return []

    def speculate(self, context: list[int], alpha: float, max_spec: int, min_prob: float, tree: bool = True
                  ) -> Speculation | None:
        """The paper's speculation: for each match length p (the longest few), the candidate of at
        most min(max_spec, alpha * p) tokens grown by probability from the occurrences matching at
        least p tokens (a tree, or the most frequent path with tree=False), nodes below min_prob
        left out; the best by score (ties: the longer match)."""
        with self._lock:
            self.lookups += 1
            found = self.occurrences_of(context)
            best = None
            for p in sorted({length for _, _, length in found}, reverse=True)[:4]:
                budget = min(max_spec, int(alpha * p + 1e-6))
                if budget < 1:
                    continue
                cand = self._grow([(s, i) for s, i, length in found if length >= p], budget, min_prob, tree)
                cand.match_length = p
                if cand.tokens and (best is None or cand.score > best.score):
                    best = cand
            self.hits += best is not None
            return best

    def _grow(self, places: list[tuple[int, int]], budget: int, min_prob: float, tree: bool) -> Speculation:
        """Best-first over the continuations of `places` (the matched node's subtree with its counts)."""
        trie: dict = {}                        # token -> [count, children]
        for sid, i in places:
            level = trie
            for x in self.seqs[sid][i + 1:i + 1 + budget]:
                node = level.setdefault(x, [0, {}])
                node[0] += 1
                level = node[1]
        out, total = Speculation(), len(places)
        heap = [(-c / total, k, x, -1, kids) for k, (x, (c, kids)) in enumerate(trie.items())]
        heapq.heapify(heap)
        tie = len(heap)
        while heap and len(out.tokens) < budget:
            neg, _, x, parent, kids = heapq.heappop(heap)
            if -neg < min_prob:
                break
            out.tokens.append(x), out.parents.append(parent), out.probs.append(-neg)
            me = len(out.tokens) - 1
            options = sorted(kids.items(), key=lambda kv: -kv[1][0])[:None if tree else 1]
            for y, (c, grand) in options:
                heapq.heappush(heap, (-c / total, tie, y, me, grand))
                tie += 1
            if not tree:
                heap = [h for h in heap if h[3] == me]     # a path: only the newest node's best child
        return out

    # -- on disk ------------------------------------------------------------------------------------------

    FORMAT = "parasuite-suffix-tree"

    def save(self, path: str | os.PathLike) -> None:
        """The sequences, oldest first, into `path` (compact JSON, written atomically: a reader never sees a
        half-written file); at most `max_tokens` tokens, as in memory."""
        from ...runtime.storage import write_json
        with self._lock:
            data = {"format": self.FORMAT, "version": 1, "max_tokens": self.max_tokens,
                    "sequences": [list(seq) for seq in self.seqs.values() if seq]}
        write_json(path, data, indent=None)
        self.saved_at = time.monotonic()

    def save_now(self, every: float = 0.0) -> bool:
        """Save to `self.path` (where set) if at least `every` seconds passed since the last save; whether it
        saved. A file that cannot be written leaves the tree in memory only."""
        if self.path is None or time.monotonic() - self.saved_at < every:
            return False
        try:
            self.save(self.path)
        except OSError:
            return False
        return True

    @classmethod
    def load(cls, path: str | os.PathLike, max_tokens: int | None = None, **kw) -> "SuffixTree":
        """A tree with the sequences saved in `path` (oldest first, so the cap `max_tokens` keeps the newest);
        an empty tree where the file is missing or not one of these."""
        from ...runtime.storage import read_json
        tree = cls(max_tokens, **kw)
        data = read_json(path, default=None)
        if isinstance(data, dict) and data.get("format") == cls.FORMAT and isinstance(data.get("sequences"), list):
            for seq in data["sequences"]:
                if isinstance(seq, list) and all(isinstance(x, int) for x in seq):
                    tree.add(tree.new_sequence(), seq)
        tree.path = os.fspath(path)
        return tree

    def stats(self) -> dict:
        """Size and use: stored tokens and sequences, index entries, the cap, evictions; lookups that
        found a draft (hit rate) and drafted / accepted tokens (their acceptance)."""
        with self._lock:
            return {"tokens": self.tokens, "sequences": len(self.seqs), "index_entries": self.entries(),
                    "max_tokens": self.max_tokens, "evicted": self.evicted, "file": self.path, "lookups": self.lookups,
                    "hits": self.hits, "hit_rate": self.hits / self.lookups if self.lookups else 0.0,
                    "drafted": self.drafted, "accepted": self.accepted,
                    "acceptance": self.accepted / self.drafted if self.drafted else 0.0}


def _agreement(seq: list[int], i: int, context: list[int], limit: int) -> int:
    """How many tokens seq[..i] and the context agree on, counted back from their ends (at most limit)."""
    n = 0
    top = min(limit, i + 1, len(context))
    while n < top and seq[i - n] == context[-1 - n]:
        n += 1
    return n
