"""Speculative decoding with a draft model (Leviathan et al. 2023; Chen et al. 2023), including
layer-truncated self-speculation (Draft & Verify, Zhang et al. 2024): `draft="self:N"` drafts
with the target's own first N layers, sharing its embeddings and LM head.

The draft model proposes `num_draft` tokens autoregressively from its own cache, each with the
q it was sampled from; the target scores them in one forward; the speculative rule keeps a
prefix (min(1, p/q)) and resamples the residual. Lossless; greedy equals `ar` token for token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from ...models.adapters import HFCausalLM, as_adapter, layer_truncated_draft
from ...cost import bind_cost, chain_sizes, record, weight_share
from ...loop import Acceptance, DecodeState, Draft, forward_mask
from ...random_streams import DRAFT
from ...sampling import logits_to_probs, sample
from ..base import DecoderBase
from ..options import option
from .base import (ChainMeta, ChainRow, chain_acceptance, chain_draft, chain_probs, padded_draft_q,
                   room_for_guesses, speculative_chain_verdicts)


@dataclass
class SpeculativeRow(ChainRow):
    draft_cached: int = 0        # the row's tokens in the draft model's cache


@dataclass
class SpeculativeShared:
    drafter: Any                 # the draft model's adapter
    cache: Any                   # its KV cache, batched over rows

    def select(self, index: list[int]) -> None:
        """Keep the draft cache's rows `index` (each row's `draft_cached` moves with its SpeculativeRow)."""
        self.cache.select(index)

    def extend(self, other: "SpeculativeShared") -> None:
        """Append `other`'s draft-cache rows (the same draft model: requests of one decoder)."""
        self.cache.extend(other.cache)


@dataclass
class SpeculativeMeta(ChainMeta):
    q: list[list[torch.Tensor]] = field(default_factory=list)   # per row, the (V,) q each draft token came from


@dataclass(frozen=True)
class Speculative(DecoderBase):
    draft_model: Any = None      # a causal LM (or adapter) with the target's tokenizer
    draft: str | None = None     # "self:N" builds a layer-truncated draft of the target
    num_draft: int = option(4, 1)
    cost: Any = "auto"           # the target's cost curve: drafts cut to what pays (suite.cost); None: fixed
    draft_price: Any = None      # a draft forward in target forwards (bind: suite.cost.weight_share)

    name: ClassVar[str] = "speculative"
    requires: ClassVar[frozenset] = frozenset()

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's drafts from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, target) -> "Speculative":
        """Resolve draft='self:N' against the target model, the cost curve and a draft forward's price."""
        bound = self
        if self.draft is not None:
            if self.draft_model is not None:
                raise ValueError("pass either draft_model= or draft='self:N', not both")
            kind, _, n = self.draft.partition(":")
            if kind != "self" or not n.isdigit():
                raise ValueError(f"draft must look like 'self:<n_layers>', got {self.draft!r}")
            hf = target.model if isinstance(target, HFCausalLM) else target
            bound = replace(self, draft_model=as_adapter(layer_truncated_draft(hf, int(n))), draft=None)
        if bound.draft_model is not None:
            bound = replace(bound, draft_price=weight_share(bound.draft_model, target))
        return bind_cost(bound, target)

    def start(self, state: DecodeState) -> None:
        if self.draft_model is None:
            raise ValueError("speculative needs draft_model=<causal LM> or draft='self:<n_layers>'")
        if self.num_draft < 1:
            raise ValueError(f"num_draft must be >= 1, got {self.num_draft}")
        drafter = as_adapter(self.draft_model)
        state.rows = [SpeculativeRow() for _ in range(state.batch)]
        state.shared = SpeculativeShared(drafter, drafter.new_cache(state.batch))

    def propose(self, state: DecodeState) -> Draft:
        want = [0 if state.done[b] else room_for_guesses(state, b, self.num_draft) for b in range(state.batch)]
        if self.cost is not None:   # each draft token costs one draft forward, priced in target forwards
            per_token = self.draft_price * self.cost(1)
            want = chain_sizes(state, self.cost, want, draft_seconds=lambda n: n * per_token)
        t0 = time.perf_counter()
        drafts, qs = self._draft(state, want)
        state.stats.draft_time_s += time.perf_counter() - t0
        draft = chain_draft(state, drafts)
        draft.meta = SpeculativeMeta(draft.meta.num_pending, draft.meta.guesses, qs)
        return draft

    @staticmethod
    def _draft(state: DecodeState, want: list[int]) -> tuple[list[list[int]], list[list[torch.Tensor]]]:
        """want[b] draft tokens of each row, one draft forward per token for all rows at once: each
        token sampled from its q on the device and fed back from there; the tokens are read in one
        host sync at the end (per token only under a grammar, whose masks walk the drafts on the host)."""
        drafter, cache = state.shared.drafter, state.shared.cache
        dev = cache.valid.device
        constraints = state.inputs.constraints
        feed = [state.tokens[b][state.rows[b].draft_cached:] if want[b] else [] for b in range(state.batch)]
        drafts, qs = [[] for _ in range(state.batch)], [[] for _ in range(state.batch)]
        drawn, last = [], None        # (rows, (R,) tokens) per draft step; each row's latest token (B,)
        for step in range(max(want, default=0)):
            rows = [f if step < want[b] else [] for b, f in enumerate(feed)]
            starts = [len(state.tokens[b]) + step - 1 if step else state.rows[b].draft_cached
                      for b in range(state.batch)]
            first = min((len(r) - 1 for r in rows if r), default=0)
            d = Draft.from_rows(rows, [list(range(s, s + len(r))) for s, r in zip(starts, rows)], logits_from=first,
                                device=dev)
            if step:                  # the previous draft tokens, fed from the device
                d.tokens = torch.where(d.valid, last[:, None], d.tokens)
            with torch.no_grad():
                logits = drafter(d.tokens, d.positions, cache, forward_mask(drafter, cache, d), logits_from=first)
            cache.append(d.positions, d.valid, dense=d.causal)
            state.stats.num_draft_forwards += 1
            active = [b for b, r in enumerate(rows) if r]
            index = torch.tensor(active, dtype=torch.long, device=dev)
            row = logits[index, torch.tensor([len(rows[b]) - 1 - first for b in active], dtype=torch.long, device=dev)]
            if constraints is not None:   # q masked as the loop masks p (suite.constraint)
                row = torch.stack([r if constraints[b] is None else constraints[b].masked(r, drafts[b])
                                   for b, r in zip(active, row)])
            q = logits_to_probs(row, state.params)                                    # (R, V)
            tokens = sample(q, state.streams.uniform([len(state.tokens[b]) + step for b in active], DRAFT,
                                                     rows=active))
            last = torch.zeros(state.batch, dtype=torch.long, device=dev).index_put((index,), tokens)
            for i, b in enumerate(active):
                qs[b].append(q[i])
            if constraints is not None:   # the grammar walks the drafts on the host
                for b, t in zip(active, tokens.tolist()):
                    drafts[b].append(t)
            else:
                drawn.append((active, tokens))
            feed = [[0] if r else [] for r in rows]     # a placeholder: `last` is fed
        if drawn:                     # the drafts' one host sync
            values = iter(torch.cat([t for _, t in drawn]).tolist())
            for active, _ in drawn:
                for b in active:
                    drafts[b].append(next(values))
        return drafts, qs

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        guesses = draft.meta.guesses
        p = chain_probs(state, draft, logits)                                    # (B, G+1, V)
        q = padded_draft_q(p, [torch.stack(qb) if qb and guesses[b] else None
                               for b, qb in enumerate(draft.meta.q)])
        verdicts = speculative_chain_verdicts(state, draft, p, q)
        committed = [[] if v is None else g[:v.num_accepted] + [v.next_token] for v, g in zip(verdicts, guesses)]
        accepted = [0 if v is None else v.num_accepted for v in verdicts]
        self._rollback_draft(state, draft, accepted)
        record(state, [len(g) for g in guesses], accepted)
        return chain_acceptance(draft, committed, accepted)

    @staticmethod
    def _rollback_draft(state: DecodeState, draft: Draft, accepted: list[int]) -> None:
        """Keep the draft cache's K/V up to the last accepted draft token; drop the rest."""
        cache = state.shared.cache
        after = [state.num_cached[b] + draft.meta.num_pending[b] + accepted[b] for b in range(state.batch)]
        cache.discard(cache.positions >= torch.tensor(after, device=cache.valid.device)[:, None])
        for row, n in zip(state.rows, cache.lengths().tolist()):
            row.draft_cached = n
        cache.compact()
