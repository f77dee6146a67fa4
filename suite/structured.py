"""Structured output in the loop: the rows' grammar constraints (suite.constraint), applied for every
decoder: the scored slots' logits masked to what each row's grammar allows, the committed tokens
followed (and the tokens a grammar forces committed without a forward), and forced spans verified
in one forward when every live row has some. `state` is the request's suite.loop.DecodeState (not
imported: the loop imports this module)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from . import constraint as grammar
from .acceptance import accept_greedy_prefix, accept_speculative
from .draft import Acceptance, Draft
from .sampling import logits_to_probs


FORCED_SPAN_MIN = 2      # a step verifies forced spans (instead of the decoder's draft) when every live row has
                         # at least this many forced tokens
FORCED_SPAN_MAX = 16     # forced tokens verified per row in one forward at most


def mask_logits(state, draft: Draft, logits: torch.Tensor) -> None:
    """Mask, in place, the logits of every scored slot of a constrained row whose draft path continues
    the row's committed text: only the tokens its grammar allows after that path stay finite (EOS
    only where the grammar accepts). Slots whose path leaves the grammar keep their logits: the
    invalid draft token before them has probability 0, so nothing after it is accepted."""
    t0 = time.perf_counter()
    n = logits.shape[1]
    bits = index = tokens = positions = None
    for b, c in enumerate(state.inputs.constraints):
        if c is None or state.done[b] or c.finished:
            continue
        if bits is None:
            bits = torch.full((logits.shape[0] * n, (logits.shape[-1] + 31) // 32), -1,
                              dtype=torch.int32)  # host: xgrammar fills its bitmask on the CPU
            index, tokens, positions = [], draft.tokens.tolist(), draft.positions.tolist()
        p = len(state.pending(b))
        length = draft.lengths[b] if draft.lengths is not None else int(draft.valid[b].sum())
        paths, where = [()], [p - 1]
        if length > p and draft.causal:          # a chain: slot s's path is the draft's tokens p..s
            for s in range(p, length):
                paths.append(tuple(tokens[b][p:s + 1])), where.append(s)
        elif length > p:                         # a tree: slot s's path is the slots it sees, if consecutive
            seen, base = draft.mask[b, :length, :length].tolist(), positions[b][p - 1]
            for s in range(p, length):
                on = sorted((j for j in range(p, s + 1) if seen[s][j]), key=lambda j: positions[b][j])
                if [positions[b][j] for j in on] == list(range(base + 1, base + 1 + len(on))):
                    paths.append(tuple(tokens[b][j] for j in on)), where.append(s)
        keep = [k for k, s in enumerate(where) if s >= draft.logits_from]
        rows = [b * n + where[k] - draft.logits_from for k in keep]
        ok = c.path_masks([paths[k] for k in keep], bits, rows)
        index += [r for r, good in zip(rows, ok) if good]
    if index:
        grammar.apply_masks(logits, bits, index)
    state.stats.mask_time_s += time.perf_counter() - t0


def follow(state, committed: list[list[int]], spans: list[int] | None = None) -> list[int]:
    """Advance each constrained row's matcher by its committed tokens; then, while its grammar allows
    a single token, commit it at once (no forward: its constrained probability is 1), appending it
    to the row's `committed`. Returns the forced tokens per row (`spans`: those of a forced-span step)."""
    t0 = time.perf_counter()
    forced = list(spans) if spans is not None else [0] * state.batch
    for b, c in enumerate(state.inputs.constraints):
        if c is None:
            continue
        c.accept(committed[b])
        while c.forced and not state.done[b]:
            token = c.single()
            if token is None:
                break
            new = state.commit(Acceptance([[token] if r == b else [] for r in range(state.batch)], None,
                                          [0] * state.batch), scored=False)[b]
            if not new:
                break
            c.accept(new)
            committed[b].extend(new)
            forced[b] += len(new)
    state.stats.num_forced_tokens += sum(forced)
    state.stats.mask_time_s += time.perf_counter() - t0
    return forced


@dataclass
class ForcedSpans:
    """A forced-span step's draft: per row its pending tokens, then the tokens its grammar forces."""
    num_pending: list[int]
    spans: list[list[int]]


def forced_spans(state) -> Draft | None:
    """The draft of a forced-span step: when every live row is constrained (with forced spans on)
    and its grammar forces at least FORCED_SPAN_MIN tokens, each row's pending tokens then its
    forced tokens, a chain verified in one forward; else None (the decoder drafts this step)."""
    t0 = time.perf_counter()
    spans, live = [], []
    try:
        for b, c in enumerate(state.inputs.constraints):
            if state.done[b]:
                spans.append([])
                continue
            if c is None or not c.forced or c.finished:
                return None
            slots = state.draft_slots(b)            # a fixed step: the span fits the row's slots
            spans.append(c.span(min(FORCED_SPAN_MAX, state.room(b) - 1, FORCED_SPAN_MAX if slots is None else slots)))
            live.append(len(spans[-1]))
    finally:
        state.stats.mask_time_s += time.perf_counter() - t0
    if not live or min(live) < FORCED_SPAN_MIN:
        return None
    rows, positions, pending = [], [], []
    for b in range(state.batch):
        own = [] if state.done[b] else state.pending(b)
        start = state.num_cached[b]
        rows.append(own + spans[b]), positions.append(list(range(start, start + len(own) + len(spans[b]))))
        pending.append(len(own))
    first = min(n - 1 for n in pending if n > 0)
    return Draft.from_rows(rows, positions, meta=ForcedSpans(pending, spans), logits_from=first, device=state.device)


def accept_spans(state, draft: Draft, logits: torch.Tensor) -> Acceptance:
    """Verify each row's forced span as point-mass drafts against its (masked) logits: greedy keeps the
    prefix equal to the argmax, sampling applies the speculative rule (lossless); then the next token."""
    meta: ForcedSpans = draft.meta
    committed, kept = [], []
    for b in range(state.batch):
        p, span = meta.num_pending[b], meta.spans[b]
        if state.done[b] or not p:
            committed.append([]), kept.append(0)
            continue
        start = p - 1 - draft.logits_from
        chain = logits[b, start:start + len(span) + 1]                                   # (G+1, V)
        guess = torch.tensor(span, dtype=torch.long, device=logits.device)
        if state.params.greedy:
            verdict = accept_greedy_prefix(guess, chain.argmax(-1))
        else:
            u = state.streams.row_chain(b, len(state.tokens[b]), len(span))    # keyed by the positions they decide
            verdict = accept_speculative(guess, None, logits_to_probs(chain, state.params), u)
        committed.append(span[:verdict.num_accepted] + [verdict.next_token])
        kept.append(p + verdict.num_accepted)
    keep = torch.arange(draft.valid.shape[1], device=draft.valid.device)[None] < torch.tensor(
        kept, device=draft.valid.device)[:, None]
    return Acceptance(committed, keep, kept)


class Free:
    """An unconstrained request's step: the decoder's own draft and acceptance, nothing masked."""

    def __init__(self, state):
        self.state = state

    def propose(self, decoder) -> Draft:
        return decoder.propose(self.state)

    def mask(self, draft: Draft, logits: torch.Tensor) -> None:
        pass

    def accept(self, decoder, draft: Draft, logits: torch.Tensor) -> Acceptance:
        return decoder.accept(self.state, draft, logits)

    def follow(self, draft: Draft, acc: Acceptance, committed: list[list[int]]) -> list[int] | None:
        return None


class Constrained(Free):
    """A constrained request's step (its rows' grammars): forced spans verified in one forward when
    every live row has some, else the decoder's draft; logits masked to what each grammar allows;
    the committed tokens followed, and the tokens a grammar then forces committed without a forward."""

    spans = False        # this step verifies forced spans instead of the decoder's draft

    def propose(self, decoder) -> Draft:
        draft = forced_spans(self.state)
        if draft is None:
            return decoder.propose(self.state)
        self.spans = True
        draft.want_hidden = decoder.observes(self.state)
        return draft

    def mask(self, draft: Draft, logits: torch.Tensor) -> None:
        mask_logits(self.state, draft, logits)

    def accept(self, decoder, draft: Draft, logits: torch.Tensor) -> Acceptance:
        if not self.spans:
            return decoder.accept(self.state, draft, logits)
        acc = accept_spans(self.state, draft, logits)
        if draft.want_hidden:           # the decoder keeps the target's features of every kept slot (eagle)
            decoder.observe(self.state, draft, acc.keep)
        return acc

    def follow(self, draft: Draft, acc: Acceptance, committed: list[list[int]]) -> list[int]:
        spans = None
        if self.spans:
            spans = [min(k - p, len(c)) for k, p, c in zip(acc.kept, draft.meta.num_pending, committed)]
        return follow(self.state, committed, spans)


def hook(state) -> Free:
    """Structured output's part of the next step of `state` (suite.loop.advance)."""
    return Free(state) if state.inputs.constraints is None else Constrained(state)
