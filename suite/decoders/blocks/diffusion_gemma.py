"""DiffusionGemma's own sampler (transformers 5.24, `DiffusionGemmaGenerationMixin.generate`), as a
decoder: the same tokens as the family's `generate` for the same settings and seed (one prompt per
request; see "Batches" below).

Per canvas of L = canvas_length slots after the committed text (EB-Sampler, Ben-Hamu et al. 2025,
over a uniform-noise canvas):
  x_T ~ U(V)^L; for n = N .. 1 (N = max_denoising_steps), one forward each:
    logits / T(n), T(n) = t_min + (t_max - t_min) * n / N        (linear temperature schedule)
    x_D ~ softmax(.)                                              (the denoiser's sample)
    accept the k lowest-entropy slots with sum(H) - max(H) <= entropy_bound: x = where(acc, x_D, x)
    renoise the rest: x = where(acc, x, U(V))
    stop early when the argmax canvas has not changed for `stability_threshold` steps and the mean
    entropy is below `confidence_threshold`
    the next forward is conditioned on these logits (self-conditioning)
  commit the last argmax canvas (all L tokens at once, cut at EOS and the budget).
The committed canvas is encoded (its K/V cached) in the first forward of the next canvas, as the
family's encoder does. RNG draws follow the family's order (randint at each canvas start, then per
step a multinomial and a randint) from the request's generator (the family uses the global one:
seed both the same).

Options left None take the folder's generation_config.json, then the family's defaults. Refused
(they would be silently ignored otherwise): temperature, top_k and top_p (the schedule t_min/t_max is
this sampler's temperature). Batches: each row runs this sampler on its own canvas, its draws taken
in row order from the request's stream, so a batch of B prompts is not equal to the family's batched
`generate` (which steps every row until all rows stop); one prompt per request is.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import Acceptance, Canvas, DecodeState, Draft
from .block_diffusion import block_mask
from ...models.adapters import as_adapter
from ..base import DecoderBase

# transformers 5.24's DiffusionGemmaGenerationConfig._get_default_generation_params (besides max_new_tokens)
FAMILY_DEFAULTS = {"max_denoising_steps": 48, "entropy_bound": 0.1, "t_min": 0.4, "t_max": 0.8,
                   "stability_threshold": 1, "confidence_threshold": 0.005}


@dataclass
class CanvasRow:
    """One row's canvas being denoised (None between canvases)."""
    canvas: torch.Tensor | None = None      # (L,) current canvas x_t
    logits: torch.Tensor | None = None      # (L, V) the previous step's processed logits (self-conditioning)
    step: int = 0                           # n: denoising steps left, counting down
    history: torch.Tensor | None = None     # (stability_threshold, L) the last argmax canvases


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) -> (...,) entropy, computed as the family computes it."""
    return torch.distributions.Categorical(logits=logits).entropy()


def eb_accept(logits: torch.Tensor, bound: float) -> torch.Tensor:
    """(L, V) processed logits -> (L,) bool: the lowest-entropy slots with sum(H) - max(H) <= bound."""
    h = entropy(logits)
    sorted_h, order = torch.sort(h, dim=-1, descending=False)
    chosen = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.scatter(torch.zeros_like(chosen), -1, order, chosen)


@dataclass
class FamilyStream:
    """The request's torch.Generator: the family draws from one stream in a fixed order across its
    rows, so the sampler keeps one per request (no select/extend: its requests run as fixed batches)."""
    generator: torch.Generator


@dataclass(frozen=True)
class DiffusionGemmaSampler(DecoderBase):
    max_denoising_steps: int | None = None
    entropy_bound: float | None = None
    t_min: float | None = None
    t_max: float | None = None
    stability_threshold: int | None = None     # 0: never wait for a stable canvas
    confidence_threshold: float | None = None
    canvas_length: int | None = None           # default: the folder's config (the block size it was trained with)

    name: ClassVar[str] = "diffusion_gemma"
    vocab_size: ClassVar[int | None] = None    # set by `bind` from the adapter
    always_samples: ClassVar[bool] = True      # draws from the request's generator whatever the temperature (scheduler)
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})

    def bind(self, adapter) -> "DiffusionGemmaSampler":
        """Fill unset options from the folder (adapter.config.extra) and then the family's defaults."""
        adapter = as_adapter(adapter)
        if not adapter.capabilities.canvas:
            raise ValueError("diffusion_gemma is DiffusionGemma's own sampler: load a DiffusionGemma folder "
                             "with text.load(folder)")
        extra = adapter.config.extra
        folder = {**extra.get("generation", {}), "canvas_length": extra.get("canvas_length")}
        unset = {f.name: folder.get(f.name) if folder.get(f.name) is not None else FAMILY_DEFAULTS.get(f.name)
                 for f in dataclasses.fields(self) if getattr(self, f.name) is None}
        bound = dataclasses.replace(self, **unset)
        object.__setattr__(bound, "vocab_size", adapter.config.vocab_size)   # the noise's range: bound, not an option
        return bound

    def start(self, state: DecodeState) -> None:
        if self.vocab_size is None:
            raise ValueError("diffusion_gemma runs bound to a DiffusionGemma adapter: decode through suite.prepare")
        p = state.params
        given = [n for n, v in (("temperature", p.temperature), ("top_k", p.top_k), ("top_p", p.top_p)) if v]
        if given:
            raise ValueError(f"diffusion_gemma cannot honour {', '.join(given)}: its temperature follows the schedule "
                             "t_min..t_max (decoder options); drop them")
        if not self.max_denoising_steps or self.max_denoising_steps < 1:
            raise ValueError(f"max_denoising_steps must be a positive integer, got {self.max_denoising_steps}")
        if not self.canvas_length or self.canvas_length < 1:
            raise ValueError(f"canvas_length must be a positive integer, got {self.canvas_length}")
        if self.entropy_bound is None or self.entropy_bound <= 0:
            raise ValueError(f"entropy_bound must be > 0, got {self.entropy_bound}")
        if self.t_min is not None and self.t_max is not None and not 0 <= self.t_min < self.t_max:
            raise ValueError(f"need 0 <= t_min < t_max, got t_min={self.t_min}, t_max={self.t_max}")
        state.rows = [CanvasRow() for _ in range(state.batch)]
        generator = torch.Generator(device=state.device)
        if p.seed is None:
            generator.seed()
        else:
            generator.manual_seed(p.seed)
        state.shared = FamilyStream(generator)

    @property
    def adaptive(self) -> bool:
        return self.stability_threshold is not None and self.confidence_threshold is not None

    def propose(self, state: DecodeState) -> Draft:
        rows, positions, masks, starts, ends, logits = [], [], [], [], [], []
        length = self.canvas_length
        for b in range(state.batch):
            row = state.rows[b]
            if state.done[b]:
                rows.append([]), positions.append([]), masks.append(None), starts.append(0), ends.append(0)
                logits.append(None)
                continue
            if row.canvas is None:                       # a new canvas: x_T ~ U(V)
                row.canvas = torch.randint(0, self.vocab_size, (1, length), device=state.device,
                                           generator=state.shared.generator)[0]
                row.logits, row.step, row.history = None, self.max_denoising_steps, None
            pending = state.pending(b)
            start = state.num_cached[b]
            rows.append(pending + row.canvas.tolist())
            positions.append(list(range(start, start + len(pending) + length)))
            masks.append(block_mask(len(pending), length, state.device))
            starts.append(len(pending)), ends.append(len(pending) + length)
            logits.append(row.logits)
        return Draft.from_rows(rows, positions, masks, logits_from=min(
            (s for s, d in zip(starts, state.done) if not d), default=0), device=state.device,
            canvas=self._canvas(starts, ends, logits))

    def _canvas(self, starts, ends, logits) -> Canvas:
        """The layout, with each row's self-conditioning logits (zero and unmarked where a row has none)."""
        have = [x for x in logits if x is not None]
        if not have:
            return Canvas(starts, ends)
        if len(have) == len(logits):
            return Canvas(starts, ends, torch.stack(have))
        filler = torch.zeros_like(have[0])
        cond = torch.tensor([x is not None for x in logits], device=filler.device)
        return Canvas(starts, ends, torch.stack([filler if x is None else x for x in logits]), cond)

    def accept(self, state: DecodeState, draft: Draft, logits: torch.Tensor) -> Acceptance:
        committed, kept = [], []
        for b in range(state.batch):
            if state.done[b]:
                committed.append([]), kept.append(0)
                continue
            start = draft.canvas.starts[b]
            raw = logits[b, start - draft.logits_from:start - draft.logits_from + self.canvas_length]   # (L, V)
            committed.append(self._denoise(state, state.rows[b], raw[None])), kept.append(start)
        keep = torch.arange(draft.valid.shape[1], device=draft.valid.device)[None] < torch.tensor(
            kept, device=draft.valid.device)[:, None]
        return Acceptance(committed, keep, kept, refining=True)

    def _denoise(self, state: DecodeState, row: CanvasRow, raw: torch.Tensor) -> list[int]:
        """One denoising step of one row, as the family's `_denoising_step` (raw (1, L, V)); returns the
        committed canvas when it stops (adaptively or at the last step), else []."""
        n = torch.tensor(row.step, device=raw.device, dtype=torch.int32)
        processed = raw
        if self.t_min is not None and self.t_max is not None:
            processed = raw / (self.t_min + ((self.t_max - self.t_min) * (n / self.max_denoising_steps)))
        probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
        vocab = probs.shape[-1]
        sampled = torch.multinomial(probs.view(-1, vocab), num_samples=1, generator=state.shared.generator).view(1, -1)
        argmax = torch.argmax(processed, dim=-1)                               # (1, L)
        accepted = eb_accept(processed, self.entropy_bound)
        current = torch.where(accepted, sampled, row.canvas[None])
        noise = torch.randint(0, vocab, current.shape, device=current.device, generator=state.shared.generator)
        row.canvas = torch.where(~accepted, noise, current)[0]
        stop = self.adaptive and self._stable_and_confident(row, argmax, processed)
        row.logits = processed[0]
        row.step -= 1
        if not stop and row.step > 0:
            return []
        row.canvas = None
        return argmax[0].tolist()

    def _stable_and_confident(self, row: CanvasRow, argmax: torch.Tensor, processed: torch.Tensor) -> bool:
        """The family's StableAndConfidentStoppingCriteria for one row."""
        if self.stability_threshold == 0:
            stable = True
        else:
            if row.history is None:
                row.history = torch.full((self.stability_threshold, 1, argmax.shape[1]), -1, dtype=argmax.dtype,
                                         device=argmax.device)
            stable = bool((row.history == argmax[None]).all())
            row.history = torch.roll(row.history, shifts=-1, dims=0)
            row.history[-1] = argmax
        return stable and bool(torch.mean(entropy(processed), dim=-1)[0] < self.confidence_threshold)
