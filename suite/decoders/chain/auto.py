"""`auto`: a per-request bandit over lossless decoders, by measured tokens per second.

The request starts by trying each candidate (eagle, ngram, lookahead, ar by default) for
`probe` steps in turn; then every step runs the candidate with the best running tokens/s (an
exponential mean of committed tokens over the wall time of propose + forward + accept; in a batch,
the rows times the least any row committed, as suite.cost.best_size counts them), and
every `recheck` steps the runner-up gets one step so its estimate stays fresh. Each step is one
candidate's own propose/accept on the shared cache, so every step is lossless given the history
(greedy: equal to `ar`; sampling: in distribution), and so is the whole request: the choice only
reads the past. Every step also asks for the target's hidden states when eagle is a candidate,
so eagle's head keeps up with the context whichever decoder ran. `stats.events["auto:<name>"]`
counts the steps each candidate ran.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...cost import batch_progress
from ...loop import Acceptance, DecodeState, Draft

_WARNED: set[str] = set()


@dataclass(frozen=True)
class Auto:
    candidates: tuple[str, ...] = ("eagle", "ngram", "lookahead", "ar")
    draft_head: Any = None    # eagle's head (text.load() passes the embedded model's); None: no eagle
    probe: int = 2            # steps per candidate before exploiting
    recheck: int = 12         # the runner-up gets one step this often
    decoders: tuple = ()      # the bound candidates (bind fills this)

    name: ClassVar[str] = "auto"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, target) -> "Auto":
        from ...adapters import as_adapter
        from ...registry import make_decoder
        adapter = as_adapter(target)
        bound = []
        for name in self.candidates:
            if name == "auto":
                raise ValueError("auto cannot be its own candidate")
            options = {"draft_head": self.draft_head} if name == "eagle" else {}
            try:
                dec = make_decoder(name, **options)
                missing = [c for c in dec.requires if not getattr(adapter, f"supports_{c}", False)]
                if missing:
                    raise ValueError(f"the model adapter lacks {', '.join(missing)}")
                bound.append(dec.bind(target) if hasattr(dec, "bind") else dec)
            except ValueError as e:
                _say_once(f"auto runs without {name}: {e}")
        if not bound:
            raise ValueError(f"auto found none of {', '.join(self.candidates)} usable on this model")
        return replace(self, decoders=tuple(bound))

    def start(self, state: DecodeState) -> None:
        if not self.decoders:
            raise ValueError("auto is not bound to a model: pass it through suite.generate / suite.prepare")
        greedy_only = {"jacobi"}
        usable = [d for d in self.decoders if state.params.greedy or d.name not in greedy_only]
        for d in usable:
            d.start(state)
        state.scratch["auto"] = {"usable": usable, "rate": {d.name: None for d in usable}, "step": 0,
                                 "current": None, "t0": 0.0}

    def _choose(self, a) -> Any:
        usable, step = a["usable"], a["step"]
        if step < self.probe * len(usable):
            return usable[(step // self.probe) % len(usable)]
        ranked = sorted(usable, key=lambda d: -(a["rate"][d.name] or 0.0))
        if len(ranked) > 1 and step % self.recheck == 0:
            return ranked[1]
        return ranked[0]

    def propose(self, state: DecodeState) -> Draft:
        a = state.scratch["auto"]
        a["t0"] = time.perf_counter()
        # the prefill (whole prompts pending) is no sample of a decoder's speed: it is not counted
        a["prefill"] = any(len(state.pending(b)) > 1 for b in range(state.batch) if not state.done[b])
        dec = self._choose(a)
        draft = dec.propose(state)
        eagle = self._eagle(a)
        if eagle is not None:
            draft.want_hidden = True
        a["current"] = dec
        return draft

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        a = state.scratch["auto"]
        dec = a["current"]
        acc = dec.accept(state, draft, logits)
        eagle = self._eagle(a)
        if eagle is not None and dec is not eagle:
            eagle.observe(state, draft, acc.keep)
        state.stats.count(f"auto:{dec.name}")
        if a["prefill"]:
            return acc
        rate = batch_progress(acc.committed) / max(time.perf_counter() - a["t0"], 1e-9)   # the slowest row's pace
        old = a["rate"][dec.name]
        a["rate"][dec.name] = rate if old is None else 0.7 * old + 0.3 * rate
        a["step"] += 1
        return acc

    @staticmethod
    def _eagle(a):
        return next((d for d in a["usable"] if d.name == "eagle"), None)


def _say_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)
