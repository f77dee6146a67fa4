"""Block diffusion with confidence-threshold unmasking and exact K/V for committed tokens.

Papers: BD3-LM (Arriola et al., ICLR 2025) for the block-causal layout; SDAR and Fast-dLLM
(Wu et al. 2025) for threshold unmasking ("commit every masked position with confidence >= tau,
always at least one"); DODO / MinerU-Diffusion apply the same loop to OCR.

Layout (the one the model was trained with, e.g. document.model.block_train_mask): the committed
text is a clean causal stream whose K/V the cache holds. The current block covers the B targets
after the last committed token t_s: the head t_{s+1} is predicted by t_s's clean causal slot (the
exact AR distribution, so it is always committed: that is the "at least one"), and B-1 noisy slots
at positions s+1 .. s+B-1 (MASK, or a token filled earlier) see the clean past and each other
(bidirectional) and predict t_{s+2} .. t_{s+B}. A filled slot stays filled; filled tokens are
committed as soon as they join the committed prefix, and become clean causal slots (exact K/V) in
the next forward, fused with the next block's scoring: no extra rescoring pass.

Lossy: filled tokens are not verified. Quality cost is reported by the benchmark (CER vs `ar`).
block_size=1, or a threshold above 1, is exactly `ar`. threshold=1.0 fills only slots whose
softmax confidence is exactly 1.0 in float32 (a model that is certain); otherwise it is `ar`.
The mask token id comes from the adapter config (extra["mask_token_id"]) via `bind`.

Canvas models (an adapter with `capabilities.canvas`, e.g. DiffusionGemma: an encoder over the committed
text, a decoder that denoises a canvas and predicts each canvas slot's own token): the block is B
canvas slots at s+1 .. s+B, the first of them the head (committed every forward, like the causal
head, but a denoised prediction, not an exact AR one). `bind` switches this on from the adapter.
`BlockCommit` is this loop with the commit law left to a method (`commit`): `BlockDiffusion` is
the threshold law; the sibling files of this folder (fast_dllm_factor, prophet, credit,
entropy_bounded) are the other laws.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from kernels.reference import block_causal_mask

from ...acceptance import accept_by_confidence
from ...loop import Acceptance, Canvas, DecodeState, Draft
from ...models.adapters import as_adapter
from ...random_streams import SAMPLE
from ...sampling import logits_to_probs, sample
from ..base import DecoderBase


@dataclass
class BlockMeta:
    num_pending: list[int]     # clean causal slots per row (kept)
    num_chain: list[int]       # clean guessed slots after the pending ones (s2d2 verifies them)
    num_noisy: list[int]       # noisy slots after those
    head_pos: list[int]        # position of the first target of the noisy block's row (s + 1)


def block_draft(state: DecodeState, chains: list[list[int]], noisy: list[list[int]], canvas: bool = False) -> Draft:
    """Per row: pending clean tokens ++ chain (clean, causal, verifiable) ++ noisy block slots.

    Clean slots (pending + chain) attend causally; noisy slots attend every clean slot and each
    other (bidirectional), never the other way round. Returns a Draft with BlockMeta; with canvas,
    the noisy slots are a canvas model's canvas (`Draft.canvas`) and logits start at the first."""
    rows, positions, masks, pend, nch, nno, heads = [], [], [], [], [], [], []
    for b in range(state.batch):
        if state.done[b]:
            rows.append([]), positions.append([]), masks.append(None)
            pend.append(0), nch.append(0), nno.append(0), heads.append(0)
            continue
        pending = state.pending(b)
        start = state.num_cached[b]
        clean = pending + chains[b]
        toks = clean + noisy[b]
        rows.append(toks)
        positions.append(list(range(start, start + len(toks))))
        masks.append(block_mask(len(clean), len(noisy[b]), state.device))
        pend.append(len(pending)), nch.append(len(chains[b])), nno.append(len(noisy[b]))
        heads.append(start + len(clean))
    if canvas:
        starts = [p + c for p, c in zip(pend, nch)]
        first = min((n for n, d in zip(starts, state.done) if not d), default=0)
        return Draft.from_rows(rows, positions, masks, meta=BlockMeta(pend, nch, nno, heads), logits_from=first,
                               device=state.device, canvas=Canvas(starts, [n + m for n, m in zip(starts, nno)]))
    active = [n - 1 for n in pend if n > 0]
    return Draft.from_rows(rows, positions, masks, meta=BlockMeta(pend, nch, nno, heads),
                           logits_from=min(active, default=0), device=state.device)


def block_mask(num_clean: int, num_noisy: int, device: torch.device) -> torch.Tensor:
    """(N, N) bool, N = num_clean + num_noisy: causal among clean slots, noisy slots see all clean
    slots and all noisy slots, clean slots never see noisy ones."""
    return block_causal_mask([1] * num_clean + [num_noisy], device=device)


def row_logits(draft: Draft, logits: torch.Tensor, b: int) -> torch.Tensor:
    """(1 + chain + noisy, V) logits of row b from its last pending slot on (a canvas model's:
    (noisy, V) from its first canvas slot, each predicting its own position)."""
    m: BlockMeta = draft.meta
    if draft.canvas is not None:
        start = draft.canvas.starts[b] - draft.logits_from
        return logits[b, start:start + m.num_noisy[b]]
    start = m.num_pending[b] - 1 - draft.logits_from
    return logits[b, start:start + 1 + m.num_chain[b] + m.num_noisy[b]]


def choose(logits: torch.Tensor, state: DecodeState, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, V) logits -> tokens (K,) and their confidence (K,): the softmax probability of the
    chosen token (raw softmax under greedy decoding, the processed distribution when sampling);
    u (K,) the row's uniforms (`slot_uniforms`)."""
    probs = logits_to_probs(logits, state.params)
    tokens = sample(probs, u).reshape(-1)
    conf_probs = torch.softmax(logits.float(), -1) if state.params.greedy else probs
    return tokens, conf_probs.gather(-1, tokens[:, None]).squeeze(-1)


def slot_uniforms(state: DecodeState, b: int, first: int, count: int, purpose: int = SAMPLE, draw: int = 0) -> torch.Tensor:
    """(count,) uniforms of row b's slots predicting positions first.. (`purpose`, `draw`)."""
    positions = torch.arange(first, first + count, device=state.device)[None]
    return state.streams.uniform(positions, purpose, draw, rows=[b])[0]


def clean_acceptance(draft: Draft, committed: list[list[int]], accepted_chain: list[int]) -> Acceptance:
    """Commit `committed`, keeping the K/V of each row's pending slots and of its first accepted
    chain slots (known on the host: no read of the mask)."""
    m: BlockMeta = draft.meta
    kept = [n + a if n > 0 else 0 for n, a in zip(m.num_pending, accepted_chain)]
    dev = draft.valid.device
    keep = torch.arange(draft.valid.shape[1], device=dev)[None] < torch.tensor(kept, device=dev)[:, None]
    return Acceptance(committed, keep, kept)


def mask_token_of(adapter) -> int | None:
    return (adapter.config.extra or {}).get("mask_token_id")


def with_mask_token(decoder, model):
    """The decoder with its mask_token_id taken from the adapter config, unless it has one; on a
    canvas model (`capabilities.canvas`), in canvas mode (`canvas`: set here, not an option)."""
    adapter = as_adapter(model)
    if decoder.mask_token_id is None:
        decoder = dataclasses.replace(decoder, mask_token_id=mask_token_of(adapter))
    if adapter.capabilities.canvas:
        decoder = dataclasses.replace(decoder)
        object.__setattr__(decoder, "canvas", True)     # bound to this adapter, like the mask token
    return decoder


def check_blocks(decoder) -> None:
    """A block decoder needs block_size >= 1, and a mask token once blocks are wider than 1."""
    if decoder.block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {decoder.block_size}; 1 is plain AR")
    if decoder.mask_token_id is None and decoder.block_size > 1:
        raise ValueError(f"{decoder.name} needs a mask token: pass mask_token_id= or use a model adapter "
                         "whose config.extra has 'mask_token_id' (a model trained for block diffusion)")


@dataclass
class OpenSlots:
    """The slots of one row's block a commit rule chooses among: index 0 is the head (the clean
    causal slot: the exact AR prediction, always committed), then the noisy slots not yet filled."""
    logits: torch.Tensor       # (K, V) raw logits
    tokens: torch.Tensor       # (K,) the chosen values
    conf: torch.Tensor         # (K,) their confidence (`choose`)
    positions: list[int]       # the target position each slot predicts


def repeats(last: int, s: int, filled: dict[int, int], positions: list[int], tokens: list[int],
            keep: list[bool]) -> list[bool]:
    """On the host: the kept noisy slots (never the head) whose token equals the one at the position
    before theirs: `last` at s, a value filled earlier, or a kept slot of this forward not itself
    held. Slots in position order."""
    known, held = {**filled, s: last}, [False] * len(keep)
    for k, (q, t) in enumerate(zip(positions, tokens)):
        if not keep[k]:
            continue
        if k > 0 and known.get(q - 1) == t:
            held[k] = True
        else:
            known[q] = t
    return held


@dataclass
class BlockRow:
    """What the block-diffusion loop keeps per row."""
    filled: dict[int, int] = field(default_factory=dict)   # position -> token filled ahead of the committed prefix


class BlockCommit(DecoderBase):
    """The block-diffusion loop shared by every commit rule: propose the B-1 noisy slots after the
    last committed token (MASK, or a value filled earlier), fill the open slots the rule picks
    (`commit`, the head always), commit the filled run that joins the committed prefix.
    Subclasses are frozen dataclasses with block_size, mask_token_id, prefix_only and hold_repeats
    fields. `hold_repeats` holds back every noisy slot whose token equals the token right before it
    (committed, filled earlier or filled in this forward): the repetition of non-autoregressive
    decoding (Gu et al. 2018, "Non-Autoregressive Neural Machine Translation": slots that predict
    independently see the same glyph and both write it). Such a slot is predicted again in a later
    forward, after the slots before it are committed, and a doubled character that is right comes
    as the head (exact). Trades: a forward per held slot, against most of the errors on the OCR lines."""

    requires: ClassVar[frozenset] = frozenset({"custom_mask"})
    batch_independent: ClassVar[bool] = True    # rows draw from their own streams, size from their own state
    row_type: ClassVar[type] = BlockRow     # the per-row state `start` makes (a rule that keeps more extends it)
    canvas: ClassVar[bool] = False          # on a canvas model (set by `bind`): the block is the canvas

    def bind(self, adapter):
        return with_mask_token(self, adapter)

    def start(self, state: DecodeState) -> None:
        check_blocks(self)
        self.setup(state)
        state.rows = [self.row_type() for _ in range(state.batch)]

    def setup(self, state: DecodeState) -> None:
        """Validate the rule's options (a rule's own per-row state goes in its `row_type`)."""

    def commit(self, state: DecodeState, b: int, slots: OpenSlots) -> torch.Tensor:
        """(K,) bool: which open slots to fill. Slot 0 (the head) is filled whatever this says.
        Tensor ops only: the loop reads every row's choice in the step's one host sync."""
        raise NotImplementedError

    def propose(self, state: DecodeState) -> Draft:
        noisy = []
        for b in range(state.batch):
            if state.done[b]:
                noisy.append([])
                continue
            s = len(state.tokens[b]) - 1
            n = max(0, min(self.block_size - 1, state.room(b) - 1)) + self.canvas   # a canvas holds the head too
            filled = state.rows[b].filled
            noisy.append([filled.get(s + j, self.mask_token_id) for j in range(1, n + 1)])
        return block_draft(state, [[] for _ in range(state.batch)], noisy, self.canvas)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        """Each live row's rule picks its open slots (tensor ops); the picks of every row are read in
        one host sync, then filled and the runs that join the committed prefixes committed."""
        live = [b for b in range(state.batch) if not state.done[b]]
        picks = [self._pick(state, b, row_logits(draft, logits, b)) for b in live]
        parts = [slots.tokens for slots, _ in picks] + [keep.long() for _, keep in picks]
        read = torch.cat(parts).tolist() if parts else []        # every row's tokens, then every row's choices
        committed, at, total = [[] for _ in range(state.batch)], 0, len(read) // 2
        for b, (slots, _) in zip(live, picks):
            n = len(slots.positions)
            committed[b] = self._fill(state, b, slots.positions, read[at:at + n], read[total + at:total + at + n])
            at += n
        return clean_acceptance(draft, committed, [0] * state.batch)

    def _pick(self, state: DecodeState, b: int, logits: torch.Tensor) -> tuple[OpenSlots, torch.Tensor]:
        """Row b's open slots and the rule's (K,) choice among them, on the device."""
        s = len(state.tokens[b]) - 1
        filled = state.rows[b].filled
        # slot i predicts position s + 1 + i; a slot left open is sampled again next step: the committed
        # length (it grows every step) keys its draws too; the head, always committed, draws as ar does
        u = slot_uniforms(state, b, s + 1, logits.shape[0], draw=s + 1)
        u[:1] = slot_uniforms(state, b, s + 1, 1)
        tokens, conf = choose(logits, state, u)          # slot i predicts position s + 1 + i
        open_ = [i for i in range(tokens.shape[0]) if i == 0 or s + 1 + i not in filled]
        slots = OpenSlots(logits[open_], tokens[open_], conf[open_], [s + 1 + i for i in open_])
        return slots, self.commit(state, b, slots)

    def _fill(self, state: DecodeState, b: int, positions: list[int], tokens: list[int], keep: list[int]) -> list[int]:
        """On the host: fill row b's kept slots (the head always), holding repeats and keeping only
        the first run when asked; the filled run that joins the committed prefix."""
        s = len(state.tokens[b]) - 1
        filled = state.rows[b].filled
        keep = [True] + [bool(k) for k in keep[1:]]   # the head: exact AR prediction
        if self.hold_repeats:
            held = repeats(state.tokens[b][-1], s, filled, positions, tokens, keep)
            keep = [k and not h for k, h in zip(keep, held)]
        if self.prefix_only:
            keep = [all(keep[:k + 1]) for k in range(len(keep))]
        for k, q in enumerate(positions):
            if keep[k]:
                filled[q] = tokens[k]
        out, q = [], s + 1
        while q in filled:
            out.append(filled.pop(q))
            q += 1
        return out


@dataclass(frozen=True)
class BlockDiffusion(BlockCommit):
    """Fast-dLLM's confidence-threshold rule: fill every open slot whose confidence is at least
    `threshold`. Trades: a higher threshold costs forwards, a lower one fills slots that disagree
    with each other (each is confident alone; their joint is not checked)."""
    block_size: int = 8
    threshold: float = 0.9
    mask_token_id: int | None = None   # default: the adapter config's extra["mask_token_id"]
    prefix_only: bool = False          # fill only the confident run right after the head (left to
                                       # right); later slots are re-predicted with that context
    hold_repeats: bool = False         # never fill a slot with the token right before it (BlockCommit)

    name: ClassVar[str] = "block_diffusion"

    def setup(self, state: DecodeState) -> None:
        if self.threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {self.threshold}")

    def commit(self, state: DecodeState, b: int, slots: OpenSlots) -> torch.Tensor:
        dev = slots.conf.device
        probs = torch.zeros(len(slots.positions), 2, device=dev)  # accept_by_confidence reads probs[i, token]
        probs[:, 0] = slots.conf
        probs[0, 0] = 1.0                             # the head ranks first: "at least one" is the head
        return accept_by_confidence(probs, torch.zeros(len(slots.positions), dtype=torch.long, device=dev),
                                    threshold=self.threshold)
