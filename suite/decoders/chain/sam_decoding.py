"""SAM-Decoding (Hu et al. 2024, "SAM Decoding: Speculative Decoding via Suffix Automaton").

A suffix automaton (Blumer et al. 1985) of a token sequence S has one state per class of
substrings of S with the same end positions; feeding it a text token by token (a transition, or
suffix links back to a shorter suffix and then a transition) keeps the longest suffix of the text
that occurs in S, in O(1) amortised time per token. Each state records an end position of its
substrings in S, so the tokens after that position are the draft: "the longest suffix match".

Two automata, as in the paper:
  * the dynamic one, over the row's own text (prompt + output so far), extended with each
    committed token; the text is matched against the automaton of the text before the newest token,
    so the match is an earlier occurrence and has a continuation. Each state's end position is the
    latest occurrence fed (the paper drafts from the most recent one);
  * the static one, over a corpus (`corpus=`: a text file or a folder of text files, with the
    tokenizer that turns it into tokens; text.load() passes the embedded model's default corpus,
    text/weights/sam_corpus, and its tokenizer), built once per corpus and shared by every request.

SAM-Decoding "can be combined with other drafters" by match length; its best results pair it with
Token Recycling (suite/decoders/chain/token_recycling.py), `auxiliary="token_recycling"` here.
Where the paper picks one draft by match length, this file puts the candidates in one tree (the
dynamic and static continuations and Token Recycling's tree, merged where they agree), scores each
node by measured acceptance rates per drafter and match length, and lets suite/cost.py keep the
nodes that pay (a lone chain keeps the plain causal mask). Verification is lossless
(tree.py): greedy equals `ar`; sampling uses the multi-draft rule over point masses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ...loop import Acceptance, DecodeState, Draft
from .base import room_for_guesses
from .token_recycling import RecyclingRow, TokenRecycling, read_scored, recycle
from .tree import DraftTree, NodeRates, bind_tree_costs, cut_trees, tree_draft, verify_trees

SEPARATOR = -1          # between a corpus's documents: never a token, so no match or draft crosses it


class SuffixAutomaton:
    """The suffix automaton of a growing token sequence (online construction)."""

    def __init__(self):
        self.next: list[dict[int, int]] = [{}]    # state -> token -> state
        self.link: list[int] = [-1]               # suffix link
        self.length: list[int] = [0]              # longest substring of the state
        self.end: list[int] = [-1]                # an end position of the state's substrings
        self.last = 0                             # the state of the whole sequence
        self.tokens: list[int] = []

    def extend(self, x: int) -> None:
        pos = len(self.tokens)
        self.tokens.append(x)
        cur = self._new(self.length[self.last] + 1, pos, {})
        p = self.last
        while p != -1 and x not in self.next[p]:
            self.next[p][x] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][x]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._new(self.length[p] + 1, self.end[q], dict(self.next[q]))
                self.link[clone] = self.link[q]
                while p != -1 and self.next[p].get(x) == q:
                    self.next[p][x] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def _new(self, length: int, end: int, nxt: dict) -> int:
        self.next.append(nxt), self.link.append(-1), self.length.append(length), self.end.append(end)
        return len(self.length) - 1

    def advance(self, match: tuple[int, int], x: int) -> tuple[int, int]:
        """(state, length) of the longest suffix of (the matched text + x) that occurs in the sequence."""
        state, length = match
        while state > 0 and x not in self.next[state]:
            state = self.link[state]
            length = self.length[state]
        if x in self.next[state]:
            return self.next[state][x], length + 1
        return 0, 0

    def settle(self, match: tuple[int, int]) -> tuple[int, int]:
        """The state holding the matched substring after an `extend` (which may have split it off)."""
        state, length = match
        while state > 0 and length <= self.length[self.link[state]]:
            state = self.link[state]
        return state, length

    def continuation(self, state: int, n: int) -> list[int]:
        """Up to n tokens after the end of the state's substrings (cut at a SEPARATOR)."""
        if state <= 0:
            return []
        start = self.end[state] + 1
        out = self.tokens[start:start + n]
        return out[:out.index(SEPARATOR)] if SEPARATOR in out else out

    def contains(self, pattern: list[int]) -> bool:
        state = 0
        for x in pattern:
            state = self.next[state].get(x, -1)
            if state < 0:
                return False
        return True


@dataclass
class StaticCorpus:
    """A corpus's tokens and their suffix automaton, built once (`corpus_automaton`)."""
    automaton: SuffixAutomaton
    source: str          # where it came from (for messages)
    documents: int
    _successors: dict = field(default_factory=dict, repr=False)

    def successors(self, k: int) -> dict[int, list[int]]:
        """Each token's k most frequent successors in the corpus (Token Recycling's hot start)."""
        if k not in self._successors:
            from collections import Counter
            counts: dict[int, Counter] = {}
            tokens = self.automaton.tokens
            for a, b in zip(tokens, tokens[1:]):
                if a != SEPARATOR and b != SEPARATOR:
                    counts.setdefault(a, Counter())[b] += 1
            self._successors[k] = {a: [t for t, _ in c.most_common(k)] for a, c in counts.items()}
        return self._successors[k]

    def __repr__(self) -> str:
        return f"StaticCorpus({self.source!r}, {len(self.automaton.tokens)} tokens, {self.documents} documents)"


_CORPORA: dict[tuple, StaticCorpus] = {}


def read_corpus(path) -> list[str]:
    """The texts of a corpus path: a text file, or every text file under a folder (hidden ones and
    binary files skipped). ValueError naming the path when it does not exist, is not text, or holds none."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ValueError(f"sam_decoding corpus {str(path)!r} does not exist: pass a text file or a folder of "
                         "text files (corpus=...)")
    if path.is_file():
        text = _as_text(path)
        if text is None:
            raise ValueError(f"sam_decoding corpus {str(path)!r} is not text (binary or not UTF-8): pass a text "
                             "file or a folder of text files")
        texts = [text]
    else:
        texts = [t for f in sorted(path.rglob("*")) if f.is_file()
                 and not any(part.startswith(".") for part in f.relative_to(path).parts)
                 for t in [_as_text(f)] if t is not None]
    if not any(t.strip() for t in texts):
        raise ValueError(f"sam_decoding corpus {str(path)!r} holds no text: pass a text file or a folder of "
                         "text files")
    return texts


def _as_text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def corpus_automaton(corpus, tokenizer=None, max_tokens: int = 500_000) -> StaticCorpus | None:
    """The static automaton of `corpus`: None; a StaticCorpus (as is); token-id sequences; or a text
    file or folder (tokenized by `tokenizer`). Built once per corpus (cached by path, size, time
    and tokenizer)."""
    if corpus is None or isinstance(corpus, StaticCorpus):
        return corpus
    if isinstance(corpus, (str, Path)):
        if tokenizer is None:
            raise ValueError(f"sam_decoding's corpus {str(corpus)!r} is text: pass tokenizer= too (the model's "
                             "tokenizer; text.load() passes its own), or token-id lists as corpus=")
        path = Path(corpus).expanduser()
        files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file()) if path.exists() else []
        key = (str(path.resolve()), tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files),
               getattr(tokenizer, "name_or_path", ""), len(tokenizer) if hasattr(tokenizer, "__len__") else id(tokenizer),
               max_tokens)
        if key not in _CORPORA:
            texts = read_corpus(path)
            docs = tokenizer(texts, add_special_tokens=False)["input_ids"]
            _CORPORA[key] = _build(docs, str(path), max_tokens)
        return _CORPORA[key]
    try:
        docs = [[int(t) for t in doc] for doc in corpus]
    except (TypeError, ValueError):
        raise ValueError("sam_decoding's corpus= takes a text file or folder (with tokenizer=), token-id "
                         f"sequences, or None; got a {type(corpus).__name__}") from None
    return _build(docs, "token lists", max_tokens)


def _build(docs: list[list[int]], source: str, max_tokens: int) -> StaticCorpus:
    total = sum(len(d) for d in docs)
    if total > max_tokens:
        raise ValueError(f"sam_decoding corpus {source!r} has {total} tokens, over max_corpus_tokens="
                         f"{max_tokens}: point corpus= at less text or raise max_corpus_tokens")
    sam = SuffixAutomaton()
    for doc in docs:
        for x in doc:
            sam.extend(x)
        sam.extend(SEPARATOR)
    return StaticCorpus(sam, source, len(docs))


@dataclass
class SamRow:
    dynamic: SuffixAutomaton               # over the row's text so far
    match: tuple[int, int] = (0, 0)        # (state, length): the text's longest earlier-occurring suffix
    static_match: tuple[int, int] = (0, 0)  # the same in the static corpus
    fed: int = 0                           # tokens of the row fed to both automata
    recycling: RecyclingRow | None = None  # the auxiliary Token Recycling's matrix
    rates: NodeRates | None = None         # conditional acceptance by (drafter and match length, depth, rank)


def _bucket(length: int) -> int:
    """Match lengths 1, 2, 3-4, 5-8, 9+ have their own acceptance rates."""
    return 0 if length <= 1 else 1 if length == 2 else 2 if length <= 4 else 3 if length <= 8 else 4


@dataclass(frozen=True)
class SAMDecoding:
    corpus: Any = None        # a text file or folder (with tokenizer=), token-id lists, or None: the text only
    tokenizer: Any = None     # turns a text corpus into tokens (text.load() passes the model's)
    max_draft: int = 16       # tokens drafted from a match at most
    auxiliary: Any = "token_recycling"   # combined drafter (a TokenRecycling or its name); None: SAM alone
    max_nodes: int = 24       # tree nodes scored per step at most (the cost model keeps those that pay)
    max_corpus_tokens: int = 500_000
    trees: bool = True        # merge the drafts into a tree (bind turns it off without custom masks)
    cost: Any = "auto"        # the target's CostCurve ("auto": measured at bind; None: max_nodes always)
    chain_cost: Any = None    # the curve of plain causal forwards (bind fills it): a lone chain may pay more

    name: ClassVar[str] = "sam_decoding"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, model) -> "SAMDecoding":
        """Build the static automaton (once per corpus) and the auxiliary; without custom attention
        masks (chains only) the auxiliary's trees are left out."""
        from ...models.adapters import as_adapter
        trees = self.trees and bool(getattr(as_adapter(model), "supports_custom_mask", False))
        bound = replace(self, corpus=corpus_automaton(self.corpus, self.tokenizer, self.max_corpus_tokens), trees=trees)
        bound = replace(bound, auxiliary=bound._auxiliary() if trees else None)
        return bind_tree_costs(bound, model)

    def _auxiliary(self) -> TokenRecycling | None:
        aux = self.auxiliary
        if aux is None or isinstance(aux, TokenRecycling):
            return aux
        if aux == "token_recycling":
            return TokenRecycling(corpus=self.corpus if isinstance(self.corpus, StaticCorpus) else None, cost=None)
        raise ValueError(f"sam_decoding's auxiliary= takes 'token_recycling', a TokenRecycling or None; got {aux!r}")

    def start(self, state: DecodeState) -> None:
        if self.max_draft < 0 or self.max_nodes < 0:
            raise ValueError("sam_decoding needs max_draft >= 0 and max_nodes >= 0")
        if isinstance(self.corpus, (str, Path)):
            raise ValueError("sam_decoding is not bound to a model: pass it through suite.generate / suite.prepare "
                             "(which build the corpus's automaton)")
        aux = self._auxiliary() if self.trees else None
        state.rows = []
        for b in range(state.batch):
            rates = NodeRates()     # one table for every drafter's nodes, the auxiliary's included
            recycling = RecyclingRow(aux.new_row(state.tokens[b]).adjacency, rates, aux.hot()) if aux else None
            state.rows.append(SamRow(SuffixAutomaton(), recycling=recycling, rates=rates))

    # -- matching ---------------------------------------------------------------------------------------

    def _feed(self, row: SamRow, tokens: list[int]) -> None:
        """Feed the row's new tokens to both automata (the dynamic one matched before it grows)."""
        dyn = row.dynamic
        static = self.corpus.automaton if isinstance(self.corpus, StaticCorpus) else None
        for i in range(row.fed, len(tokens)):
            x = tokens[i]
            if i > 0 and row.match[0] > 0:
                dyn.end[row.match[0]] = i - 1          # the latest occurrence of the matched suffix
            row.match = dyn.advance(row.match, x)
            dyn.extend(x)
            row.match = dyn.settle(row.match)
            if static is not None:
                row.static_match = static.advance(row.static_match, x)
        row.fed = len(tokens)

    def _chains(self, row: SamRow, room: int) -> list[tuple[tuple, list[int]]]:
        """(rate kind, continuation) of each automaton's match, longest match first."""
        n = min(self.max_draft, room)
        out = []
        (state, length), dyn = row.match, row.dynamic
        if state > 0 and n:
            out.append((length, ("dynamic", _bucket(length)), dyn.continuation(state, n)))
        if isinstance(self.corpus, StaticCorpus) and n:
            state, length = row.static_match
            if state > 0:
                out.append((length, ("static", _bucket(length)), self.corpus.automaton.continuation(state, n)))
        out.sort(key=lambda c: -c[0])
        return [(kind, chain) for _, kind, chain in out if chain]

    # -- propose / accept -------------------------------------------------------------------------------

    def propose(self, state: DecodeState) -> Draft:
        t0 = time.perf_counter()
        aux = self.auxiliary if isinstance(self.auxiliary, TokenRecycling) and self.trees else None
        trees = {}
        for b in range(state.batch):
            if state.done[b]:
                continue
            row = state.rows[b]
            self._feed(row, state.tokens[b])
            room = room_for_guesses(state, b, max(self.max_draft, aux.max_depth if aux else 0))
            if not room:
                continue
            chains = self._chains(row, room)
            if not self.trees:
                chains = chains[:1]
            tree = aux.grow(row.recycling, state.tokens[b][-1], room) if aux else DraftTree()
            for kind, chain in chains:
                parent, score = -1, 1.0
                for depth, token in enumerate(chain, 1):
                    score *= row.rates.rate(kind, depth, 0)
                    parent = tree.add(parent, token, score, 0, kind)
            trees[b] = tree
        draft = tree_draft(state, cut_trees(state, trees, self.cost, self.max_nodes, self.chain_cost))
        state.stats.draft_time_s += time.perf_counter() - t0
        return draft

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        aux = self.auxiliary if isinstance(self.auxiliary, TokenRecycling) and self.trees else None
        if aux is not None:
            targets, top = read_scored(logits, aux.k, state.params.greedy)
        else:
            targets, top = (logits.argmax(-1).tolist() if state.params.greedy else None), None
        acc, paths = verify_trees(state, draft, logits, targets)
        for b in range(state.batch):
            tree = draft.meta[b]
            if state.done[b] or not tree.num_pending:
                continue
            row = state.rows[b]
            if aux is not None:
                recycle(row.recycling.adjacency, state.pending(b), tree, paths[b], top[b], draft.logits_from)
            row.rates.update(tree, paths[b], tree.sources)
        return acc

