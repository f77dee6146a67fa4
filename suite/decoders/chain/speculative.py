"""Speculative decoding with a draft model (Leviathan et al. 2023; Chen et al. 2023), including
layer-truncated self-speculation (Draft & Verify, Zhang et al. 2024): `draft="self:N"` drafts
with the target's own first N layers, sharing its embeddings and LM head.

The draft model proposes `num_draft` tokens autoregressively from its own cache, each with the
q it was sampled from; the target scores them in one forward; the speculative rule keeps a
prefix (min(1, p/q)) and resamples the residual. Lossless; greedy equals `ar` token for token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from ...adapters import HFCausalLM, as_adapter, layer_truncated_draft
from ...cost import bind_cost, chain_sizes, record
from ...loop import Acceptance, DecodeState, Draft
from ...sampling import logits_to_probs, sample
from .base import (chain_acceptance, chain_draft, chain_probs, padded_draft_q, room_for_guesses,
                     speculative_chain_verdicts)


@dataclass(frozen=True)
class Speculative:
    draft_model: Any = None      # a causal LM (or adapter) with the target's tokenizer
    draft: str | None = None     # "self:N" builds a layer-truncated draft of the target
    num_draft: int = 4
    cost: Any = "auto"           # the target's cost curve: drafts cut to what pays (suite.cost); None: fixed

    name: ClassVar[str] = "speculative"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, target) -> "Speculative":
        """Resolve draft='self:N' against the target model, and the cost curve."""
        if self.draft is None:
            return bind_cost(self, target)
        if self.draft_model is not None:
            raise ValueError("pass either draft_model= or draft='self:N', not both")
        kind, _, n = self.draft.partition(":")
        if kind != "self" or not n.isdigit():
            raise ValueError(f"draft must look like 'self:<n_layers>', got {self.draft!r}")
        hf = target.model if isinstance(target, HFCausalLM) else target
        return bind_cost(replace(self, draft_model=as_adapter(layer_truncated_draft(hf, int(n))), draft=None), target)

    def start(self, state: DecodeState) -> None:
        if self.draft_model is None:
            raise ValueError("speculative needs draft_model=<causal LM> or draft='self:<n_layers>'")
        if self.num_draft < 1:
            raise ValueError(f"num_draft must be >= 1, got {self.num_draft}")
        drafter = as_adapter(self.draft_model)
        state.scratch["drafter"] = drafter
        state.scratch["draft_cache"] = drafter.new_cache(state.batch)
        state.scratch["draft_cached"] = [0] * state.batch

    def propose(self, state: DecodeState) -> Draft:
        drafter, cache = state.scratch["drafter"], state.scratch["draft_cache"]
        cached = state.scratch["draft_cached"]
        want = [0 if state.done[b] else room_for_guesses(state, b, self.num_draft) for b in range(state.batch)]
        if self.cost is not None:   # each draft token costs one draft forward (measured as we go)
            per_token = state.scratch.setdefault("draft_s", 0.5 * self.cost(1))
            want = chain_sizes(state, self.cost, want, draft_seconds=lambda n: n * per_token)
        t0 = time.perf_counter()
        feed = [state.tokens[b][cached[b]:] if want[b] else [] for b in range(state.batch)]
        drafts, qs = [[] for _ in range(state.batch)], [[] for _ in range(state.batch)]
        for step in range(max(want, default=0)):
            rows = [f if step < want[b] else [] for b, f in enumerate(feed)]
            starts = [len(state.tokens[b]) + step - 1 if step else cached[b] for b in range(state.batch)]
            first = min((len(r) - 1 for r in rows if r), default=0)
            d = Draft.from_rows(rows, [list(range(s, s + len(r))) for s, r in zip(starts, rows)], logits_from=first,
                                device=cache.valid.device)
            with torch.no_grad():
                logits = drafter(d.tokens, d.positions, cache, cache.attention_mask(d.mask), logits_from=first)
            cache.append(d.positions, d.valid)
            state.stats.num_draft_forwards += 1
            for b, r in enumerate(rows):
                if r:
                    q = logits_to_probs(logits[b, len(r) - 1 - first], state.params)
                    drafts[b].append(int(sample(q, state.generator)))
                    qs[b].append(q)
            feed = [[x[-1]] if x else [] for x in drafts]
        if max(want, default=0):
            spent = time.perf_counter() - t0
            state.stats.draft_time_s += spent
            state.scratch["draft_s"] = 0.8 * state.scratch.get("draft_s", spent) + 0.2 * spent / max(want)
        state.scratch["q"] = qs
        return chain_draft(state, drafts)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        guesses = draft.meta.guesses
        p = chain_probs(state, draft, logits)                                    # (B, G+1, V)
        q = padded_draft_q(p, [torch.stack(qb) if qb and guesses[b] else None
                               for b, qb in enumerate(state.scratch["q"])])
        verdicts = speculative_chain_verdicts(state, draft, p, q)
        committed = [[] if v is None else g[:v.num_accepted] + [v.next_token] for v, g in zip(verdicts, guesses)]
        accepted = [0 if v is None else v.num_accepted for v in verdicts]
        self._rollback_draft(state, draft, accepted)
        record(state, [len(g) for g in guesses], accepted)
        return chain_acceptance(draft, committed, accepted)

    @staticmethod
    def _rollback_draft(state: DecodeState, draft: Draft, accepted: list[int]) -> None:
        """Keep the draft cache's K/V up to the last accepted draft token; drop the rest."""
        cache, cached = state.scratch["draft_cache"], state.scratch["draft_cached"]
        after = [state.num_cached[b] + draft.meta.num_pending[b] + accepted[b] for b in range(state.batch)]
        cache.discard(cache.positions >= torch.tensor(after, device=cache.valid.device)[:, None])
        cached[:] = cache.lengths().tolist()
        cache.compact()
