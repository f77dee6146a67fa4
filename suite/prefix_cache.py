"""Automatic prefix caching: the K/V of finished rows (prompt and output), kept in a prefix tree keyed
by token ids, so a new request starts from its longest cached prefix instead of prefilling it again.

vLLM's automatic prefix caching, SGLang's RadixAttention and llama.cpp's `cache_prompt` do the same.
One `PrefixCache` belongs to one model (suite.scheduler.Scheduler holds it): `reuse(state)` copies
the cached K/V rows of each row's longest cached prefix into a request's empty cache and marks them
cached (`DecodeState.num_cached`), leaving at least the last prompt token pending (the decoder's first
step scores it); `store(state, rows)` keeps rows' cached tokens and their K/V (suite.scheduler stores a
request's prompt after its prefill and its prompt and output when it finishes); `defer` holds back
requests of one burst that share a long prefix with an earlier one until that one's prompt is stored. Entries are
evicted least recently used first once their K/V pass `max_bytes`; an entry whose tokens are a prefix
of a newer one is dropped (the newer one serves both: a chat's turns). Exactness: a cached slot holds
the K/V the model computed for that token at that position, as a prefill would (greedy outputs equal
those without the cache; tests/core/test_prefix_cache.py).

Counters (`counters()`): lookups, hits, hit_tokens, stored entries and tokens, evictions, bytes. A
request's own hit tokens are in its stats' events["prefix_cache_hit_tokens"].
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import torch

from .cache import KVCache, layer_tensors, new_layer, seat_layer, slots_for

HIT_EVENT = "prefix_cache_hit_tokens"


class _Node:
    __slots__ = ("children", "owners", "ends")

    def __init__(self):
        self.children: dict[int, _Node] = {}
        self.owners: set[int] = set()      # entries whose tokens pass through this node
        self.ends: int | None = None        # the entry whose tokens end here


@dataclass(eq=False)
class _Entry:
    key: int
    tokens: tuple[int, ...]
    kv: list[tuple[torch.Tensor, torch.Tensor]]    # per layer (keys, values), (H, T, D) each
    nbytes: int
    used: int                                      # tick of its last store or hit (LRU)


class PrefixCache:
    """A prefix tree of cached token rows with their K/V, LRU under `max_bytes`. min_tokens: shorter
    prefixes are not worth a copy (nor stored)."""

    def __init__(self, max_bytes: int = 512 << 20, min_tokens: int = 8):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.max_bytes, self.min_tokens = max_bytes, min_tokens
        self._root = _Node()
        self._entries: dict[int, _Entry] = {}
        self._keys = itertools.count()
        self._tick = itertools.count()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.lookups = self.hits = self.hit_tokens = 0
        self.stored = self.stored_tokens = self.evictions = 0

    def counters(self) -> dict[str, int]:
        return {"lookups": self.lookups, "hits": self.hits, "hit_tokens": self.hit_tokens, "stored": self.stored,
                "stored_tokens": self.stored_tokens, "evictions": self.evictions, "entries": len(self._entries),
                "bytes": self.nbytes}

    # -- the tree ---------------------------------------------------------------------------------------

    def longest(self, tokens: list[int]) -> tuple[int, _Entry | None]:
        """(length, entry) of the longest cached prefix of `tokens` (entry: the most recent holding it)."""
        node, depth = self._root, 0
        for t in tokens:
            child = node.children.get(t)
            if child is None:
                break
            node, depth = child, depth + 1
        if not depth:
            return 0, None
        entry = max((self._entries[k] for k in node.owners), key=lambda e: e.used)
        return depth, entry

    def _insert(self, entry: _Entry) -> None:
        node = self._root
        for t in entry.tokens:
            node = node.children.setdefault(t, _Node())
            node.owners.add(entry.key)
            if node.ends is not None and node.ends != entry.key:      # an older entry, a prefix of this one
                self._remove(self._entries[node.ends])
        node.ends = entry.key
        self._entries[entry.key] = entry
        self.nbytes += entry.nbytes

    def _remove(self, entry: _Entry) -> None:
        node = self._root
        for t in entry.tokens:
            child = node.children[t]
            child.owners.discard(entry.key)
            if not child.owners:
                del node.children[t]            # nothing else passes below: the whole branch goes
                break
            node = child
        else:
            if node.ends == entry.key:
                node.ends = None
        del self._entries[entry.key]
        self.nbytes -= entry.nbytes

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._entries:
            self._remove(min(self._entries.values(), key=lambda e: e.used))
            self.evictions += 1

    # -- requests ---------------------------------------------------------------------------------------

    def reuse(self, state) -> list[int]:
        """Fill an unstarted request's empty cache with each row's longest cached prefix (leaving its
        last token pending); returns the tokens reused per row (all 0: nothing changed)."""
        cache = state.cache
        if not _plain(cache) or cache.num_slots or any(state.num_cached):
            return [0] * state.batch
        with self._lock:
            found = []
            for row in state.tokens:
                self.lookups += 1
                n, entry = self.longest(row[:-1])
                if n < self.min_tokens:
                    n, entry = 0, None
                if entry is not None:
                    entry.used = next(self._tick)
                    self.hits += 1
                    self.hit_tokens += n
                found.append((n, entry))
        if not any(n for n, _ in found):
            return [0] * state.batch
        _seat(cache, found)
        for b, (n, _) in enumerate(found):
            state.num_cached[b] = n
            if n:
                state.stats.count(HIT_EVENT, n)
        return [n for n, _ in found]

    def defer(self, prompts: list[list[list[int]]]) -> list[bool]:
        """Of requests admitted together (each a list of token rows), which should wait one step: those
        sharing with an earlier one of them at least `min_tokens` more than the cache holds (a burst
        sharing a system prompt): once the earlier one's prefill stored its prompt, they reuse it."""
        with self._lock:
            held = [[self.longest(row[:-1])[0] for row in rows] for rows in prompts]
        out, leaders = [], []
        for rows, cached in zip(prompts, held):
            wait = any(_common(row, other) - c >= self.min_tokens
                       for row, c in zip(rows, cached) for lead in leaders for other in lead)
            out.append(wait)
            if not wait:
                leaders.append(rows)
        return out

    def store(self, state, rows: list[int]) -> None:
        """Keep rows' cached tokens (prompt and output, in order from position 0) and their K/V."""
        cache = state.cache
        if not _plain(cache) or not cache.backend.layers:
            return
        for b in rows:
            n = state.num_cached[b]
            if n < self.min_tokens:
                continue
            slots = cache.valid[b].nonzero().squeeze(1)
            order = cache.positions[b, slots].argsort()
            slots = slots[order]
            if slots.numel() != n or not bool((cache.positions[b, slots] == torch.arange(n, device=slots.device)).all()):
                continue                      # this row's slots are not its first n positions: skip it
            kv = []
            for layer in cache.backend.layers:
                k, v = layer.keys[b], layer.values[b]          # (H, S, D)
                kv.append((k.index_select(1, slots), v.index_select(1, slots)))   # copies
            tokens = tuple(state.tokens[b][:n])
            nbytes = sum(k.numel() * k.element_size() * 2 for k, _ in kv)
            with self._lock:
                length, held = self.longest(list(tokens))
                if held is not None and length == n:      # already held (maybe inside a longer entry)
                    held.used = next(self._tick)
                    continue
                self._insert(_Entry(next(self._keys), tokens, kv, nbytes, next(self._tick)))
                self.stored += 1
                self.stored_tokens += n
                self._evict()


def _common(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of a[:-1] and b[:-1] (a row's last token is always scored)."""
    n = 0
    for x, y in zip(a[:-1], b[:-1]):
        if x != y:
            break
        n += 1
    return n


def _plain(cache) -> bool:
    """A cache whose rows are one token id a slot, one backend row each, no per-row inputs besides."""
    return (type(cache) is KVCache and cache.fanout == 1 and not cache.row_inputs
            and cache.encdec is None and all(
                layer_tensors(layer) is None or layer.keys.dim() == 4 for layer in cache.backend.layers))


def _seat(cache: KVCache, found: list[tuple[int, _Entry | None]]) -> None:
    """Write each row's cached prefix into slots [0, n) of an empty cache; rows with shorter prefixes
    get dead slots up to the longest (holes: the next forward takes the masked path)."""
    longest = max(n for n, _ in found)
    template = next(e for n, e in found if n).kv
    dev = cache.valid.device
    lengths = torch.tensor([n for n, _ in found], device=dev)
    cache.valid = torch.arange(longest, device=dev)[None] < lengths[:, None]
    cache.positions = torch.arange(longest, device=dev)[None].expand(len(found), -1).clone()
    cache.holes = cache._dirty = bool(min(n for n, _ in found) < longest)
    for i, (k0, _) in enumerate(template):
        if i == len(cache.backend.layers):
            made = new_layer(cache.backend)
            if made is None:
                raise ValueError("the cache backend cannot create layers: prefix caching needs suite's growing cache")
            cache.backend.layers.append(made)
        layer = cache.backend.layers[i]
        k = k0.new_zeros(len(found), k0.shape[0], slots_for(layer, longest), k0.shape[2])
        v = torch.zeros_like(k)
        for b, (n, entry) in enumerate(found):
            if n:
                k[b, :, :n], v[b, :, :n] = entry.kv[i][0][:, :n], entry.kv[i][1][:, :n]
        seat_layer(layer, k, v, longest)
