"""Suffix automata of token sequences and the static corpora SAM-Decoding drafts from
(suite/decoders/chain/sam_decoding.py; Token Recycling's hot start reads them too)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
