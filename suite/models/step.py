"""The step's shape: every decode step of a model scores a fixed number of token slots a row, W,
one of a few widths: at most the rows' own, set by how many rows the step runs (`width_at`:
STEP_WIDTH for a lone row, fewer for many), and the narrowest of them that holds what the rows fill
(`fitted_width`: a step without drafts pays for one slot).

A decoder never picks a width: under a step of W slots it fills its row's slots (the committed token
plus up to W-1 drafted ones) because sizing over `suite.cost.FixedStepCurve` finds every slot up to W
free and none past it, and `DecodeState.draft_slots` cuts a draft to the step's W; suite.loop.advance
pads every draft to the width `fitted_width` picks (`ar`: the narrowest), and prefills prompts in chunks of
PREFILL_WIDTH first. A token scored at slot k runs the same kernels as at slot 0, whatever W (a GEMM's
path depends on its row count: each layer runs one matmul form at every row count, suite.models.linear_forms
`one_form_per_layer`), and attention reads the cache's filled slots rounded up to a bucket
(suite.models.static_cache.attention_window: the masked tail adds exact zeros), so lossless decoders give
`ar`'s tokens bitwise in bf16 as in fp32; drafts are chains (suite.loop.DecodeState.fixed_step: a tree's
node would read its ancestors' keys past masked sibling slots, another summation order than `ar`'s, so
tree decoders draft their best path); a row's logits do not depend on its batch mates nor on the W their
number and drafts set (each row's slots right after its own, suite.models.static_cache `StaticKVCache.row_slots`);
and a compiled step compiles one graph a width. Changing W, or how it is chosen, is a change in this file.
"""
from __future__ import annotations

import sys
from dataclasses import replace

import torch

STEP_WIDTH = 8         # token slots of a lone row's decode step (its cost against free widths: BENCHMARKS.md,
                       # "The fixed step"; other widths: python -m text.bench --step --widths 4 8 16)
PREFILL_WIDTH = 64     # token slots of a prefill chunk
CACHE_SLOTS = 2048     # a row's static cache: prompt + new tokens fit in it
ANY_ROWS = sys.maxsize  # a row_widths entry for every row count


def row_widths(width: int, device) -> tuple[tuple[int, int], ...]:
    """((at most rows, slots a row), ...) of a model on `device` whose lone row scores `width`. On a CPU a
    draft's slots pay in a step of few rows, where the forward costs little more for them, and not in a
    step of many, where each slot is another row of every matmul (BENCHMARKS.md, "The step by rows"):
    `width` up to 2 rows, 4 up to 4, 1 past that. Elsewhere (not measured yet) `width` at every row count."""
    return on_cpu(((2, width), (4, min(width, 4)), (ANY_ROWS, 1)), device) or ((ANY_ROWS, width),)


def on_cpu(widths: tuple[tuple[int, int], ...], device) -> tuple[tuple[int, int], ...] | None:
    """`widths` (a `Capabilities.row_widths` measured on a CPU) for a model on `device`: themselves on a CPU,
    None elsewhere (not measured there: as many slots as a draft takes)."""
    return widths if torch.device(device).type == "cpu" else None


def width_at(widths: tuple[tuple[int, int], ...], rows: int) -> int:
    """The slots a row scores in a step of `rows` rows under `widths` (`Capabilities.row_widths`: its last
    entry covers any row count). On the
    fixed step a row's logits do not depend on the width (each layer pinned to one matmul form, the
    masked slots exact zeros: tests/core/test_fixed_step.py)."""
    return next(w for most, w in widths if rows <= most)


def fitted_width(widths: tuple[tuple[int, int], ...], rows: int, slots: int) -> int:
    """The step width a forward of `rows` rows whose widest row fills `slots` slots runs at: the narrowest
    width of `widths` (their buckets) that holds them, up to the rows' own (`width_at`), so a step whose
    rows draft nothing (`ar`, a drafter without a match) pays for one slot, not eight. Wider (a prefill
    chunk): the rows' own width, run in multiples (suite.loop.fixed_width)."""
    most = width_at(widths, rows)
    return min((w for _, w in widths if slots <= w <= most), default=most)


def fixed_step(model, width: int = STEP_WIDTH, prefill_width: int = PREFILL_WIDTH, max_cache_len: int = CACHE_SLOTS,
               setting: str | None = None):
    """A StaticHFCausalLM over `model` whose decode steps are `width` slots and prefill chunks
    `prefill_width`; with an inductor `setting` (suite.models.compiled) the decode step is compiled
    (`warm` it), else eager."""
    from .static_cache import StaticHFCausalLM
    if not 1 <= width <= prefill_width:
        raise ValueError(f"a step has 1 to prefill_width ({prefill_width}) slots, got width={width}")
    widths = row_widths(width, next(model.parameters()).device)
    compiled = sorted({w for _, w in widths}) if setting else ()
    adapter = StaticHFCausalLM(model, max_cache_len, compiled_widths=compiled, setting=setting)
    if adapter.static:                      # a model without a static cache keeps free widths
        adapter.capabilities = replace(adapter.capabilities, step_width=width, prefill_width=prefill_width,
                                       row_widths=widths)
    return adapter
