"""`suite.generate`: the transformers-shaped entry point over the one decode loop."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .models.adapters import as_adapter
from .inputs import RequestInputs
from .loop import DecodeState, decode, decode_steps, step_width
from .params import RequestParams
from .registry import make_decoder
from .stats import DecodeStats


@dataclass
class GenerateOutput:
    sequences: torch.Tensor        # (B, P + new): the input as given, then new tokens, pad after EOS
    new_tokens: list[list[int]]
    stats: DecodeStats


def prepare(model, input_ids, attention_mask=None, params: RequestParams | None = None, **kwargs):
    """The one way into the loop: resolve the adapter, the decoder (a registered name with its
    options, or a decoder object) and the request's state. input_ids: (B, P) ids (left-padded with
    attention_mask), or a list of rows (lists of ids, or of frames for multi-codebook models);
    params: the request's `RequestParams` (or its fields as keywords, decoder options included).
    Every pipeline's request is checked here (max_new_tokens, the decoder and its options, empty
    prompts, the model's context); a pipeline checks only what is its own (prompt text, chat templates)."""
    params = RequestParams.of(params, **kwargs)
    adapter = as_adapter(model)
    caps = adapter.capabilities
    decoder = params.decoder
    if isinstance(decoder, str):
        decoder = make_decoder(decoder, **params.decoder_options)
    if caps.only_decoders is not None and decoder.name not in caps.only_decoders:
        raise ValueError(f"decoder {decoder.name!r} does not run on {type(adapter).__name__}; "
                         f"use one of: {', '.join(caps.only_decoders)}")
    decoder = decoder.bind(model)
    missing = sorted(c for c in decoder.requires if not caps.has(c))
    if missing:
        raise ValueError(f"decoder {decoder.name!r} needs a model adapter with {', '.join(missing)}; "
                         f"{type(adapter).__name__} lacks it, use decoder='ar', 'jacobi', 'sjd' or 'ngram'")
    rows = _rows(input_ids, attention_mask)
    limit = adapter.config.max_length
    for i, r in enumerate(rows):
        where = "the prompt" if len(rows) == 1 else f"prompt {i}"
        if not r:
            raise ValueError(f"empty prompt: {where} has no tokens; give at least one (e.g. a BOS token)")
        if limit is not None and len(r) >= limit:
            raise ValueError(f"{where} is {len(r)} tokens, the model's context is {limit}: shorten it "
                             f"to at most {limit - 1} tokens")
    inputs = params.inputs or RequestInputs()
    constraints = inputs.constraints
    if constraints is not None and caps.canvas:
        raise ValueError(f"structured output (json_schema=, regex=) constrains next-token predictions; "
                         f"{type(adapter).__name__} denoises a canvas: decode without a schema or regex")
    if constraints is not None and len(constraints) != len(rows):
        raise ValueError(f"inputs.constraints has {len(constraints)} rows for {len(rows)} prompts: give one "
                         "suite.constraint.RowConstraint (or None) per prompt")
    adapter.check_request(rows, params.max_new_tokens)     # an adapter with a fixed size (a static cache)
    eos = params.eos_token_id
    eos = adapter.config.eos_token_ids if eos is None else frozenset([eos] if isinstance(eos, int) else eos)
    state = DecodeState(tokens=rows, cache=adapter.new_cache(len(rows)), params=params.sampling,
                        max_new_tokens=params.max_new_tokens, eos_token_ids=eos, max_length=limit, inputs=inputs,
                        slots=step_width(adapter, len(rows)))
    return adapter, decoder, state


def generate(model, input_ids, attention_mask=None, params: RequestParams | None = None, **kwargs) -> GenerateOutput:
    """Generate with any registered decoder. input_ids (B, P), left-padded with attention_mask
    for ragged prompts (as tokenizers give them for transformers' generate); the request's
    `RequestParams`, or its fields as keywords: decoder="ar", max_new_tokens=DEFAULT_MAX_NEW_TOKENS (128),
    temperature=0.0, top_k, top_p, seed, eos_token_id, inputs, and the decoder's options."""
    adapter, dec, state = prepare(model, input_ids, attention_mask, params, **kwargs)
    result = decode(adapter, dec, state)
    return GenerateOutput(_sequences(input_ids, result.new_tokens, adapter.config.pad_token_id),
                          result.new_tokens, result.stats)


def stream(model, input_ids, attention_mask=None, params: RequestParams | None = None, **kwargs):
    """Yield a `Step` per forward (committed tokens per row) as decoding runs (arguments as `generate`)."""
    adapter, dec, state = prepare(model, input_ids, attention_mask, params, **kwargs)
    yield from decode_steps(adapter, dec, state)


def _rows(input_ids, attention_mask) -> list[list]:
    """The prompt rows as host lists (the request's committed tokens): ids and mask given on any
    device are read once here; every tensor of the request is then built on the adapter's device."""
    if isinstance(input_ids, (list, tuple)) and attention_mask is None and all(
            isinstance(r, (list, tuple)) for r in input_ids):
        return [list(r) for r in input_ids]
    ids = torch.as_tensor(input_ids, device="cpu")
    if ids.dim() == 1:
        ids = ids[None]
    if attention_mask is None:
        return ids.tolist()
    mask = torch.as_tensor(attention_mask, device="cpu").bool().reshape(ids.shape)
    return [r[m].tolist() for r, m in zip(ids, mask)]


def _sequences(input_ids, new_tokens: list[list], pad: int) -> torch.Tensor:
    """(B, P + new) on the input's device, as transformers' generate returns it (ragged rows given
    as lists are left-padded with `pad`, as a tokenizer pads them for it); rows of frames (tuples
    of Q codebook ids) give (B, P + new, Q), padded with frames of `pad`."""
    given = input_ids if isinstance(input_ids, torch.Tensor) else None
    rows = (given[None] if given.dim() == 1 else given).tolist() if given is not None else _rows(input_ids, None)
    frame = isinstance(rows[0][0], (list, tuple)) if rows and rows[0] else False
    blank = [pad] * len(rows[0][0]) if frame else pad
    plain = (lambda t: list(t)) if frame else (lambda t: t)
    prompt = max(len(r) for r in rows)
    width = max((len(n) for n in new_tokens), default=0)
    out = [[blank] * (prompt - len(r)) + [plain(t) for t in r] + [plain(t) for t in n] + [blank] * (width - len(n))
           for r, n in zip(rows, new_tokens)]
    return torch.tensor(out, dtype=given.dtype if given is not None else torch.long,
                        device=given.device if given is not None else None)
