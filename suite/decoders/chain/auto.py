"""`auto`: picks, every step, the lossless decoder that makes the live batch progress most, by the cost
model: the tokens a row is expected to commit per step over the price of that step's forward.

Each candidate (eagle, ngram, lookahead, token_recycling, sam_decoding, suffix, ar by default) is judged by
what it did (`Seen`: tokens a live row committed per step, draft tokens a row per forward), first from the
model's prior (what the candidates committed in this process's earlier requests on this model: `prior`) and
then from this batch's own steps. Its expected rate for R live rows is R * committed / cost(R rows of its
width) on the target's measured cost curve (suite.cost: measured once per model and machine; without one
every forward costs 1). On a fixed step (`capabilities.step_width`: suite.models.step) every slot up to W is free, so the choice is by
expected committed tokens alone; on free widths drafting turns down as the batch grows and the forward
widens, and a tree pays the masked curve. No choice reads the clock: the same request on the same model
after the same earlier requests takes the same steps whatever the machine's load. A drafting candidate runs
only where it beats `ar` by `margin`. A candidate the model has never run is tried for `probe` steps; every
`recheck` steps the runner-up or `ar` (in turn) gets one step so its figures stay fresh; `ar` is always a
candidate and is what nothing better has beaten. Each step is one candidate's own propose/accept on the
shared cache, so every step is lossless given the history (greedy: equal to `ar`), and so is the whole
request: the choice only reads the past.

A sampled request runs one fixed candidate (the first whose rows never depend on their batch: a
drafting one with fixed sizes where no cost curve is measured, else `ar`): its tokens then depend on
its own random stream only, never on its batch mates, so seeded requests share batches
(`batch_independent`). Requests with equal hyperparameters compare equal (their options are compared
by value), so concurrent auto requests share one batch (suite.scheduler). Every step also asks for the
target's hidden states when eagle is a candidate of a greedy request, so eagle's head keeps up with
the context whichever decoder ran. `stats.events["auto:<name>"]` counts the steps each candidate ran.
Each candidate keeps its own rows and batch-wide state (`AutoRow.candidates`, `AutoShared.shared`)
and sees them as `state.rows` / `state.shared` while it runs.
"""
from __future__ import annotations

import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ...cost import target_curve
from ...loop import Acceptance, DecodeState, Draft
from ..base import DecoderBase

_WARNED: set[str] = set()
_PRIORS: "weakref.WeakKeyDictionary[Any, dict[str, Seen]]" = weakref.WeakKeyDictionary()   # model -> its prior


@dataclass
class Seen:
    """What a candidate did (exponential means over its steps)."""
    committed: float = 0.0     # tokens a live row committed per step
    width: float = 1.0         # tokens a row the forward scored (the draft's width)
    steps: int = 0

    def update(self, committed: float, width: float, weight: float) -> None:
        w = 1.0 if not self.steps else weight
        self.committed += w * (committed - self.committed)
        self.width += w * (width - self.width)
        self.steps += 1


@dataclass
class AutoRow:
    candidates: dict[str, Any] = field(default_factory=dict)   # candidate name -> its own Row for this row
                                                                # (None: the candidate keeps no row state)


@dataclass
class AutoShared:
    usable: list                          # the candidates this request can run (bound decoders)
    seen: dict[str, Seen]                 # candidate name -> this batch's figures (from the model's prior)
    shared: dict[str, Any]                # candidate name -> its own batch-wide state (its state.shared)
    fixed: Any = None                     # a sampled request's one candidate (None: greedy, chosen each step)
    step: int = 0                         # measured steps so far
    current: Any = None                   # the candidate running the step in flight
    forecast: Any = None                  # what it forecast for the step (None: it does not forecast)
    forecasts: dict = field(default_factory=dict)   # candidate name -> its forecast for the step being chosen
    prefill: bool = False                 # that step is the prefill (not counted)

    def select(self, index: list[int]) -> None:
        """Each candidate's batch-wide state keeps rows `index` (their rows move with AutoRow)."""
        for own in self.shared.values():
            if own is not None:
                own.select(index)

    def extend(self, other: "AutoShared") -> None:
        """Each candidate's batch-wide state appends `other`'s (the same candidates: requests of
        one decoder and sampling). The figures are this batch's, which the newcomers now share."""
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


@dataclass(frozen=True, eq=False)
class Auto(DecoderBase):
    candidates: tuple[str, ...] = ("eagle", "ngram", "lookahead", "token_recycling", "sam_decoding", "suffix", "ar")
    draft_head: Any = None    # eagle's head (text.load() passes the embedded model's); None: no eagle
    options: Any = None       # candidate name -> its options (text.load() passes sam_decoding's corpus and tokenizer)
    probe: int = 1            # steps a candidate never run on this model gets before it is judged
    recheck: int = 12         # the runner-up gets one step this often
    weight: float = 0.3       # of a new step in this batch's means (the model's prior takes a tenth of it)
    margin: float = 1.1       # a drafting candidate runs only where its expected rate beats ar's by this factor
    decoders: tuple = ()      # the bound candidates (bind fills this)
    curves: tuple = (None, None)   # the target's (causal, masked) cost curves (bind fills them)
    prior: Any = None         # the model's prior, candidate name -> Seen (bind fills it; shared by its requests)

    name: ClassVar[str] = "auto"
    requires: ClassVar[frozenset] = frozenset()

    def _identity(self) -> tuple:
        """What makes two autos drive rows alike: hyperparameters (options by value) and the model's prior."""
        return (self.candidates, _frozen(self.draft_head), _frozen(self.options), self.probe, self.recheck, self.weight,
                self.margin, id(self.prior))

    def __eq__(self, other) -> bool:
        return isinstance(other, Auto) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def batch_independent(self) -> bool:
        """A sampled request runs one fixed candidate: seeded ones share batches when it is `ar`-like."""
        fixed = self._fixed()
        return fixed is not None and fixed.batch_independent

    def bind(self, target) -> "Auto":
        from ...models.adapters import as_adapter
        from ...registry import make_decoder
        adapter = as_adapter(target)
        bound = []
        for name in self.candidates:
            if name == "auto":
                raise ValueError("auto cannot be its own candidate")
            if name == "eagle" and self.draft_head is None:
                continue        # a model without a draft head: eagle is no candidate (nothing to warn about)
            options = {"draft_head": self.draft_head} if name == "eagle" else {}
            options.update((self.options or {}).get(name, {}))
            try:
                dec = make_decoder(name, **options)
                if any(not adapter.capabilities.has(c) for c in dec.requires):
                    continue    # this adapter declares it cannot run it (e.g. trees on llama.cpp): no candidate
                bound.append(dec.bind(target))
            except ValueError as e:
                _say_once(f"auto runs without {name}: {e}")
        if not bound:
            raise ValueError(f"auto found none of {', '.join(self.candidates)} usable on this model")
        masked = target_curve(adapter, True) if adapter.capabilities.custom_mask else None
        return replace(self, decoders=tuple(bound), curves=(target_curve(adapter), masked), prior=_prior(adapter))

    def start(self, state: DecodeState) -> None:
        if not self.decoders:
            raise ValueError("auto is not bound to a model: pass it through suite.generate / suite.prepare")
        greedy_only = {"jacobi"}
        usable = [d for d in self.decoders if state.params.greedy or d.name not in greedy_only]
        fixed = None if state.params.greedy else self._fixed()
        if fixed is not None:
            usable = [fixed]
        rows = [AutoRow() for _ in range(state.batch)]
        prior = self.prior if self.prior is not None else {}
        seen = {d.name: replace(prior[d.name]) if d.name in prior else Seen() for d in usable}
        shared = AutoShared(usable, seen, {}, fixed)
        for d in usable:
            state.rows, state.shared = [], None
            d.start(state)
            own = state.rows or [None] * state.batch
            for row, mine in zip(rows, own):
                row.candidates[d.name] = mine
            shared.shared[d.name] = state.shared
        state.rows, state.shared = rows, shared

    def _fixed(self):
        """A sampled request's candidate: the first batch-independent drafting one (fixed draft sizes: no cost
        curve), else `ar`, else the first."""
        independent = [d for d in self.decoders if d.batch_independent]
        return next((d for d in independent if d.name != "ar"), None) or next(
            (d for d in self.decoders if d.name == "ar"), self.decoders[0] if self.decoders else None)

    def estimate(self, dec, seen: Seen, rows: int, forecast: tuple | None = None) -> float:
        """Expected tokens per unit of forward cost of `rows` live rows under `dec`: its committed tokens over
        its forward's price on the cost curve (1 where none is measured; on a fixed step the same for every
        width up to W, so the committed tokens decide). A candidate that forecasts its step (suffix: the
        expected accepted length of the draft it would make now, from the committed text only, its node rates
        learned on every step whichever candidate ran) is judged by that forecast, and at the width and
        attention path (a tree's mask or the causal one) it would draft, instead of by its mean over earlier
        steps."""
        committed, width, tree = seen.committed, seen.width, None
        if forecast is not None:
            committed, width, tree = forecast
        return rows * committed / max(self._price(dec, rows, width, tree), 1e-12)

    def _price(self, dec, rows: int, width: float, tree: bool | None = None) -> float:
        """A forward of `rows` rows of `width` tokens on the target's cost curve: the masked one for a tree
        (tree=None: for a candidate that requires custom masks), else the causal one."""
        causal, masked = self.curves
        if tree is None:
            tree = "custom_mask" in dec.requires
        curve = masked if masked is not None and tree else causal
        return float(rows) if curve is None else curve.step(rows, width)

    def _choose(self, state: DecodeState, a: AutoShared) -> Any:
        if a.fixed is not None:
            return a.fixed
        forecasts = {}
        for d in a.usable:                  # what the forecasting candidates' drafts would promise this step
            if d.forecasts:
                with as_candidate(state, d):
                    forecasts[d.name] = d.forecast(state)
        a.forecasts = forecasts
        fresh = next((d for d in a.usable if a.seen[d.name].steps < self.probe), None)
        if fresh is not None:               # (almost) never run on this model: a step tells its figures
            return fresh
        rows = max(sum(not d for d in state.done), 1)
        rate = {d.name: self.estimate(d, a.seen[d.name], rows, forecasts.get(d.name)) for d in a.usable}
        ranked = sorted(a.usable, key=lambda d: -rate[d.name])
        plain = next((d for d in a.usable if d.name == "ar"), None)
        if len(ranked) > 1 and a.step % self.recheck == self.recheck - 1:      # keep the figures fresh: in
            turn = a.step // self.recheck % 2                                   # turn ar's and the runner-up's
            return plain if turn and plain is not None and plain is not ranked[0] else ranked[1]
        if plain is not None and rate[ranked[0].name] < self.margin * rate["ar"]:
            return plain                    # a draft must beat one token a forward clearly: never the slow choice
        return ranked[0]

    def propose(self, state: DecodeState) -> Draft:
        a: AutoShared = state.shared
        # the prefill (whole prompts pending) is no sample of a decoder's speed: it is not counted
        a.prefill = any(len(state.pending(b)) > 1 for b in range(state.batch) if not state.done[b])
        dec = self._choose(state, a)
        with as_candidate(state, dec):
            draft = dec.propose(state)
        eagle = self._eagle(a)
        if eagle is not None:
            draft.want_hidden = True
        a.current = dec
        a.forecast = a.forecasts.get(dec.name)
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
        for other in a.usable:              # candidates that learn from every committed token (suffix's trees)
            if other is not dec and other.forecasts:
                with as_candidate(state, other):
                    other.follow(state, acc.committed)
        state.stats.count(f"auto:{dec.name}")
        if a.prefill or a.fixed is not None:
            return acc
        live = [c for c, done in zip(acc.committed, state.done) if not done] or acc.committed
        committed = sum(len(c) for c in live) / max(len(live), 1)
        width = float(draft.tokens.shape[1])
        a.seen[dec.name].update(committed, width, self.weight)
        if self.prior is not None:
            self.prior.setdefault(dec.name, Seen()).update(committed, width, self.weight / 10)
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

    @staticmethod
    def _eagle(a: AutoShared):
        return next((d for d in a.usable if d.name == "eagle"), None)


def _prior(adapter) -> dict[str, Seen]:
    """The model's prior: what the candidates committed in this process's earlier requests on this model (one per
    loaded model, kept while it lives; never on disk, so a new process starts from the same empty prior)."""
    model = getattr(adapter, "model", adapter)
    try:
        return _PRIORS.setdefault(model, {})
    except TypeError:                       # not weakly referable: a prior of this adapter object only
        return {}


def _frozen(value) -> Any:
    """A hashable stand-in compared by value for dicts, lists and sets of hashable things (else by identity)."""
    if isinstance(value, dict):
        return tuple(sorted(((str(k), _frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_frozen(v) for v in value)
    try:
        hash(value)
        return value if isinstance(value, (str, int, float, bool, type(None), bytes)) or hasattr(value, "__fspath__") \
            else ("id", id(value))
    except TypeError:
        return ("id", id(value))


def _say_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)
