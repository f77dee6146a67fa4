"""`auto`: a per-request bandit over lossless decoders, by measured tokens per second.

The request starts by trying each candidate (eagle, ngram, lookahead, token_recycling,
sam_decoding, ar by default) for `probe` steps in turn; then every step runs the candidate with the best running tokens/s (an
exponential mean of committed tokens over the wall time of propose + forward + accept; in a batch,
the rows times the least any row committed, as suite.cost.best_size counts them), and
every `recheck` steps the runner-up gets one step so its estimate stays fresh. A seeded sampled
request must repeat its tokens, so its rates read no clock: a step's time is the price of its
forward on the target's measured cost curve (suite.cost; 1 a forward where the adapter has none),
and drafting time is not counted. Each step is one
candidate's own propose/accept on the shared cache, so every step is lossless given the history
(greedy: equal to `ar`; sampling: in distribution), and so is the whole request: the choice only
reads the past. Every step also asks for the target's hidden states when eagle is a candidate,
so eagle's head keeps up with the context whichever decoder ran. `stats.events["auto:<name>"]`
counts the steps each candidate ran. Each candidate keeps its own rows and batch-wide state
(`AutoRow.candidates`, `AutoShared.shared`) and sees them as `state.rows` / `state.shared` while
it runs.
"""
from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ...cost import batch_progress, target_curve
from ...loop import Acceptance, DecodeState, Draft
from ..base import DecoderBase

_WARNED: set[str] = set()


@dataclass
class AutoRow:
    candidates: dict[str, Any] = field(default_factory=dict)   # candidate name -> its own Row for this row
                                                                # (None: the candidate keeps no row state)


@dataclass
class AutoShared:
    usable: list                          # the candidates this request can run (bound decoders)
    rate: dict[str, float | None]         # candidate name -> running tokens/s (None: not measured yet)
    shared: dict[str, Any]                # candidate name -> its own batch-wide state (its state.shared)
    step: int = 0                         # measured steps so far
    current: Any = None                   # the candidate running the step in flight
    t0: float = 0.0                       # when that step began
    prefill: bool = False                 # that step is the prefill (not counted)

    def select(self, index: list[int]) -> None:
        """Each candidate's batch-wide state keeps rows `index` (their rows move with AutoRow)."""
        for own in self.shared.values():
            if own is not None:
                own.select(index)

    def extend(self, other: "AutoShared") -> None:
        """Each candidate's batch-wide state appends `other`'s (the same candidates: requests of
        one decoder and sampling). The bandit's rates and step count are this batch's: they
        time this batch's steps, which the newcomers now share (their own measured nothing yet:
        the prefill is not counted)."""
        for name, own in self.shared.items():
            if own is not None:
                own.extend(other.shared[name])


@contextmanager
def as_candidate(state: DecodeState, dec):
    """Within: state.rows / state.shared are candidate `dec`'s own (what its start made); auto's are
    restored after, with whatever the candidate left in them kept as its own."""
    rows, shared = state.rows, state.shared
    state.rows = [row.candidates[dec.name] for row in rows]
    state.shared = shared.shared[dec.name]
    try:
        yield
    finally:
        for row, own in zip(rows, state.rows):
            row.candidates[dec.name] = own
        shared.shared[dec.name] = state.shared
        state.rows, state.shared = rows, shared


@dataclass(frozen=True)
class Auto(DecoderBase):
    candidates: tuple[str, ...] = ("eagle", "ngram", "lookahead", "token_recycling", "sam_decoding", "ar")
    draft_head: Any = None    # eagle's head (text.load() passes the embedded model's); None: no eagle
    options: Any = None       # candidate name -> its options (text.load() passes sam_decoding's corpus and tokenizer)
    probe: int = 1            # steps per candidate before exploiting (1 measured 4% faster than 2 on average
                              # over four prompt groups: BENCHMARKS.md "auto's exploration")
    recheck: int = 12         # the runner-up gets one step this often
    decoders: tuple = ()      # the bound candidates (bind fills this)
    curves: tuple = (None, None)   # the target's (causal, masked) cost curves (bind fills them): the
                                   # price of a seeded sampled request's steps

    name: ClassVar[str] = "auto"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, target) -> "Auto":
        from ...models.adapters import as_adapter
        from ...registry import make_decoder
        adapter = as_adapter(target)
        bound = []
        for name in self.candidates:
            if name == "auto":
                raise ValueError("auto cannot be its own candidate")
            options = {"draft_head": self.draft_head} if name == "eagle" else {}
            options.update((self.options or {}).get(name, {}))
            try:
                dec = make_decoder(name, **options)
                missing = [c for c in dec.requires if not adapter.capabilities.has(c)]
                if missing:
                    raise ValueError(f"the model adapter lacks {', '.join(missing)}")
                bound.append(dec.bind(target))
            except ValueError as e:
                _say_once(f"auto runs without {name}: {e}")
        if not bound:
            raise ValueError(f"auto found none of {', '.join(self.candidates)} usable on this model")
        masked = target_curve(adapter, True) if adapter.capabilities.custom_mask else None
        return replace(self, decoders=tuple(bound), curves=(target_curve(adapter), masked))

    def start(self, state: DecodeState) -> None:
        if not self.decoders:
            raise ValueError("auto is not bound to a model: pass it through suite.generate / suite.prepare")
        greedy_only = {"jacobi"}
        usable = [d for d in self.decoders if state.params.greedy or d.name not in greedy_only]
        rows = [AutoRow() for _ in range(state.batch)]
        shared = AutoShared(usable, {d.name: None for d in usable}, {})
        for d in usable:
            state.rows, state.shared = [], None
            d.start(state)
            own = state.rows or [None] * state.batch
            for row, mine in zip(rows, own):
                row.candidates[d.name] = mine
            shared.shared[d.name] = state.shared
        state.rows, state.shared = rows, shared

    def _choose(self, a: AutoShared) -> Any:
        usable, step = a.usable, a.step
        if step < self.probe * len(usable):
            return usable[(step // self.probe) % len(usable)]
        ranked = sorted(usable, key=lambda d: -(a.rate[d.name] or 0.0))
        if len(ranked) > 1 and step % self.recheck == 0:
            return ranked[1]
        return ranked[0]

    def propose(self, state: DecodeState) -> Draft:
        a: AutoShared = state.shared
        a.t0 = time.perf_counter()
        # the prefill (whole prompts pending) is no sample of a decoder's speed: it is not counted
        a.prefill = any(len(state.pending(b)) > 1 for b in range(state.batch) if not state.done[b])
        dec = self._choose(a)
        with as_candidate(state, dec):
            draft = dec.propose(state)
        eagle = self._eagle(a)
        if eagle is not None:
            draft.want_hidden = True
        a.current = dec
        return draft

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        a: AutoShared = state.shared
        dec = a.current
        with as_candidate(state, dec):
            acc = dec.accept(state, draft, logits)
        eagle = self._eagle(a)
        if eagle is not None and dec is not eagle:
            with as_candidate(state, eagle):
                eagle.observe(state, draft, acc.keep)
        state.stats.count(f"auto:{dec.name}")
        if a.prefill:
            return acc
        if state.params.repeatable:
            seconds = self._price(draft)
        else:
            seconds = max(time.perf_counter() - a.t0, 1e-9)
        rate = batch_progress(acc.committed) / seconds    # the slowest row's pace
        old = a.rate[dec.name]
        a.rate[dec.name] = rate if old is None else 0.7 * old + 0.3 * rate
        a.step += 1
        return acc

    def observes(self, state: DecodeState) -> bool:
        """Whether a step no candidate drafted (suite.loop's forced spans) must show eagle its features."""
        return self._eagle(state.shared) is not None

    def observe(self, state: DecodeState, draft: Draft, keep) -> None:
        eagle = self._eagle(state.shared)
        if eagle is not None:
            with as_candidate(state, eagle):
                eagle.observe(state, draft, keep)

    def _price(self, draft: Draft) -> float:
        """The forward's seconds on the target's cost curve (a custom mask on the masked one)."""
        causal, masked = self.curves
        curve = masked if masked is not None and not draft.causal else causal
        return 1.0 if curve is None else curve(draft.tokens.numel())

    @staticmethod
    def _eagle(a: AutoShared):
        return next((d for d in a.usable if d.name == "eagle"), None)


def _say_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)
