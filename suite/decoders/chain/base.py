"""Helpers for decoders whose draft is a chain: the row's pending tokens, then guesses."""
from __future__ import annotations

from dataclasses import dataclass

import torch

import kernels

from ...acceptance import Verdict
from ...cost import AcceptanceRates
from ...loop import Acceptance, DecodeState, Draft
from ...sampling import logits_to_probs


@dataclass
class ChainRow:
    """What every chain decoder keeps per row: its acceptance rates by draft depth, which
    suite.cost.chain_sizes makes on first use and `record` updates (None while sizes are fixed)."""
    rates: AcceptanceRates | None = None


@dataclass
class ChainMeta:
    num_pending: list[int]
    guesses: list[list[int]]


def chain_draft(state: DecodeState, guesses: list[list[int]]) -> Draft:
    """Pending tokens ++ guesses per row, at consecutive logical positions; done rows stay empty."""
    rows, positions, pend = [], [], []
    for b in range(state.batch):
        if state.done[b]:
            rows.append([]), positions.append([]), pend.append(0)
            guesses[b] = []
            continue
        pending = state.pending(b)
        start = state.num_cached[b]
        rows.append(pending + guesses[b])
        positions.append(list(range(start, start + len(rows[-1]))))
        pend.append(len(pending))
    active = [n - 1 for n in pend if n > 0]
    return Draft.from_rows(rows, positions, meta=ChainMeta(pend, guesses), logits_from=min(active, default=0),
                           device=state.device)


def _chain_start(draft: Draft, b: int) -> int:
    """Row b's logit slot of its last pending token (the one that predicts guess 0)."""
    return draft.meta.num_pending[b] - 1 - draft.logits_from


def chain_logits(draft: Draft, logits: torch.Tensor, b: int) -> torch.Tensor:
    """(G+1, V) logits of row b: the last pending token predicts guess 0, guess i predicts i+1."""
    start = _chain_start(draft, b)
    return logits[b, start:start + len(draft.meta.guesses[b]) + 1]


def last_chain_logits(draft: Draft, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """(R, V) logits of the last chain slot of each row in `rows` (what follows its last guess)."""
    slots = [_chain_start(draft, b) + len(draft.meta.guesses[b]) for b in rows]
    if len(rows) == logits.shape[0] and min(slots) == max(slots):   # every row, one slot: a view
        return logits[:, slots[0]]
    return logits[torch.tensor(rows, device=logits.device), torch.tensor(slots, device=logits.device)]


def _uniform(draft: Draft) -> tuple[int, int] | None:
    """(pending, guesses) when every row has the same (an unpadded draft): the chain is then a slice
    of the draft's tokens and of the logits, the same for every row, with no index to build."""
    meta: ChainMeta = draft.meta
    sizes = {(p, len(g)) for p, g in zip(meta.num_pending, meta.guesses)}
    return sizes.pop() if draft.causal and len(sizes) == 1 else None


def _chain_slots(draft: Draft, width: int, length: int):
    """The logit slots of each row's chain: a slice when the draft is uniform, else a (B, width+1) index."""
    uniform = _uniform(draft)
    if uniform is not None and uniform[1] == width:
        start = uniform[0] - 1 - draft.logits_from
        return slice(start, start + width + 1)
    return _chain_index(draft, width, length)


def _chain_index(draft: Draft, width: int, length: int) -> torch.Tensor:
    """(B, width+1) logit slots of each row's chain (a shorter row repeats slots past its own), on the draft's device."""
    starts = torch.tensor([max(_chain_start(draft, b), 0) for b in range(len(draft.meta.guesses))],
                          dtype=torch.long, device=draft.tokens.device)
    return (starts[:, None] + torch.arange(width + 1, device=starts.device)).clamp(max=length - 1)


def padded_guesses(draft: Draft) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's guesses as one (B, G) tensor, padded with -1 (never matches), and their lengths (B,)."""
    meta: ChainMeta = draft.meta
    width = max((len(g) for g in meta.guesses), default=0)
    device = draft.tokens.device
    uniform = _uniform(draft)
    if uniform is not None:     # the guesses are the draft's tokens after the pending ones
        lengths = torch.full((len(meta.guesses),), width, dtype=torch.long, device=device)
        return draft.tokens[:, uniform[0]:uniform[0] + width], lengths
    guesses = torch.tensor([g + [-1] * (width - len(g)) for g in meta.guesses], dtype=torch.long, device=device)
    return guesses.reshape(len(meta.guesses), width), torch.tensor([len(g) for g in meta.guesses], dtype=torch.long,
                                                                   device=device)


def greedy_chain_verdicts(state: DecodeState, draft: Draft, logits: torch.Tensor
                          ) -> tuple[list[Verdict | None], list[list[int]]]:
    """Every row's guesses against the target's argmax chain in one batched `greedy_prefix`
    (one host sync for the whole batch). Returns the verdicts (None for done rows) and each
    row's argmax chain (G+1 tokens: what the target predicts after each draft slot)."""
    guesses, _ = padded_guesses(draft)
    slots = _chain_slots(draft, guesses.shape[1], logits.shape[1])
    targets = logits[:, slots].argmax(-1) if isinstance(slots, slice) else logits.argmax(-1).gather(1, slots)  # (B, G+1)
    accepted, following = kernels.op("greedy_prefix", logits.device.type)(guesses.to(logits.device), targets)
    read = torch.cat([accepted[:, None], following[:, None], targets], 1).tolist()   # the step's one host sync
    accepted, following, targets = [r[0] for r in read], [r[1] for r in read], [r[2:] for r in read]
    verdicts = [None if state.done[b] else Verdict(accepted[b], following[b]) for b in range(state.batch)]
    return verdicts, [t[:len(g) + 1] for t, g in zip(targets, draft.meta.guesses)]


def chain_probs(state: DecodeState, draft: Draft, logits: torch.Tensor) -> torch.Tensor:
    """(B, G+1, V) target probabilities along every row's chain, G the widest row's guesses."""
    width = max((len(g) for g in draft.meta.guesses), default=0)
    slots = _chain_slots(draft, width, logits.shape[1])
    chain = logits[:, slots] if isinstance(slots, slice) else logits.gather(1, slots[..., None].expand(-1, -1, logits.shape[-1]))
    return logits_to_probs(chain, state.params)


def padded_draft_q(p: torch.Tensor, rows: list[torch.Tensor | None]) -> torch.Tensor:
    """(B, G, V) draft distributions for `speculative_chain_verdicts`, G = p's chain width - 1:
    row b's (G_b, V) distributions first, zeros after (and for None rows)."""
    q = torch.zeros(p.shape[0], p.shape[1] - 1, p.shape[2], device=p.device)
    for b, row in enumerate(rows):
        if row is not None and len(row):
            q[b, :len(row)] = row
    return q


def speculative_chain_verdicts(state: DecodeState, draft: Draft, p: torch.Tensor,
                               q: torch.Tensor | None = None, padded=None) -> list[Verdict | None]:
    """Every row's guesses verified by the speculative rule in one batched `speculative_accept`
    (one host sync for the whole batch). p (B, G+1, V) from `chain_probs`; q (B, G, V) the
    distributions the guesses were drawn from, None for point masses; padded: `padded_guesses(draft)`
    when the caller has it. None for done rows."""
    guesses, lengths = padded if padded is not None else padded_guesses(draft)
    device = p.device
    u, u_next = state.streams.chain(state.positions(), guesses.shape[1])     # keyed by row and position
    accepted, following = kernels.op("speculative_accept", device.type)(
        guesses.clamp(min=0).to(device), q, p, u, u_next, lengths.to(device))
    accepted, following = torch.stack([accepted, following.to(accepted.dtype)]).tolist()   # the step's one host sync
    return [None if state.done[b] else Verdict(accepted[b], following[b]) for b in range(state.batch)]


def chain_acceptance(draft: Draft, committed: list[list[int]], accepted: list[int]) -> Acceptance:
    """Keep the K/V of each row's pending tokens and of its first accepted[b] guesses."""
    kept = [p + a if p > 0 else 0 for p, a in zip(draft.meta.num_pending, accepted)]
    if kept == draft.lengths:          # every real slot (ar, a fully accepted chain): the draft's validity
        return Acceptance(committed, draft.valid, kept)
    device = draft.valid.device
    keep = torch.arange(draft.valid.shape[1], device=device)[None] < torch.tensor(kept, device=device)[:, None]
    return Acceptance(committed, keep, kept)


def room_for_guesses(state: DecodeState, b: int, want: int) -> int:
    """Guesses worth scoring: at most `want`, one less than the row's room (the bonus token), and
    what a fixed step's slots leave."""
    free = state.draft_slots(b)
    return max(0, min(want, state.room(b) - 1, want if free is None else free))


def accept_point_masses(state: DecodeState, draft: Draft, logits: torch.Tensor
                        ) -> tuple[Acceptance, list[Verdict | None]]:
    """Verify every active row's point-mass guesses (greedy: the argmax prefix, what the speculative
    rule gives on one-hot targets); also returns each row's verdict (None if done)."""
    if state.params.greedy:
        verdicts = greedy_chain_verdicts(state, draft, logits)[0]
    else:
        verdicts = speculative_chain_verdicts(state, draft, chain_probs(state, draft, logits))
    committed = [[] if v is None else g[:v.num_accepted] + [v.next_token] for v, g in zip(verdicts, draft.meta.guesses)]
    accepted = [0 if v is None else v.num_accepted for v in verdicts]
    return chain_acceptance(draft, committed, accepted), verdicts
