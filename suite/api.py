"""`suite.generate`: the transformers-shaped entry point over the one decode loop."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .models.adapters import as_adapter
from .inputs import RequestInputs
from .loop import DecodeState, decode, decode_steps
from .registry import make_decoder
from .sampling import SamplingParams
from .stats import DecodeStats


@dataclass
class GenerateOutput:
    sequences: torch.Tensor        # (B, P + new): the input as given, then new tokens, pad after EOS
    new_tokens: list[list[int]]
    stats: DecodeStats


def prepare(model, input_ids, attention_mask=None, decoder="ar", max_new_tokens: int = 64,
            temperature: float = 0.0, top_k=None, top_p=None, seed=None, eos_token_id=None,
            inputs: RequestInputs | None = None, **options):
    """The one way into the loop: resolve the adapter, the decoder (a registered name with its
    options, or a decoder object) and the request's state. input_ids: (B, P) ids (left-padded with
    attention_mask), or a list of rows (lists of ids, or of frames for multi-codebook models);
    inputs: the request's typed inputs for decoders that read them. Every pipeline's request is
    checked here (max_new_tokens, the decoder and its options, empty prompts, the model's
    context); a pipeline checks only what is its own (prompt text, chat templates)."""
    if not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    adapter = as_adapter(model)
    if isinstance(decoder, str):
        decoder = make_decoder(decoder, **options)
    elif options:
        raise ValueError("decoder options go into the decoder object when you pass one; drop " + ", ".join(options))
    only = getattr(adapter, "only_decoders", None)     # a model that only some decoders drive (a canvas model)
    if only is not None and decoder.name not in only:
        raise ValueError(f"decoder {decoder.name!r} does not run on {type(adapter).__name__}; use one of: {', '.join(only)}")
    if hasattr(decoder, "bind"):
        decoder = decoder.bind(model)
    missing = {c for c in decoder.requires if not getattr(adapter, f"supports_{c}", False)}
    if missing:
        raise ValueError(f"decoder {decoder.name!r} needs a model adapter with {', '.join(sorted(missing))}; "
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
    constraints = inputs.constraints if inputs is not None else None
    if constraints is not None and getattr(adapter, "canvas_model", False):
        raise ValueError(f"structured output (json_schema=, regex=) constrains next-token predictions; "
                         f"{type(adapter).__name__} denoises a canvas: decode without a schema or regex")
    if constraints is not None and len(constraints) != len(rows):
        raise ValueError(f"inputs.constraints has {len(constraints)} rows for {len(rows)} prompts: give one "
                         "suite.constraint.RowConstraint (or None) per prompt")
    if hasattr(adapter, "check_request"):        # an adapter with a fixed size (a static cache) checks its own
        adapter.check_request(rows, max_new_tokens)
    eos = adapter.config.eos_token_ids if eos_token_id is None else frozenset(
        [eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)
    state = DecodeState(tokens=rows, cache=adapter.new_cache(len(rows)),
                        params=SamplingParams(temperature, top_k, top_p, seed),
                        max_new_tokens=max_new_tokens, eos_token_ids=eos, max_length=limit,
                        inputs=inputs or RequestInputs())
    return adapter, decoder, state


def generate(model, input_ids, attention_mask=None, decoder="ar", max_new_tokens: int = 64,
             temperature: float = 0.0, top_k=None, top_p=None, seed=None, eos_token_id=None,
             inputs: RequestInputs | None = None, **options) -> GenerateOutput:
    """Generate with any registered decoder. input_ids (B, P), left-padded with attention_mask
    for ragged prompts (as tokenizers give them for transformers' generate)."""
    adapter, dec, state = prepare(model, input_ids, attention_mask, decoder, max_new_tokens,
                                  temperature, top_k, top_p, seed, eos_token_id, inputs, **options)
    result = decode(adapter, dec, state)
    return GenerateOutput(_sequences(input_ids, result.new_tokens, adapter.config.pad_token_id),
                          result.new_tokens, result.stats)


def stream(model, input_ids, attention_mask=None, decoder="ar", **kwargs):
    """Yield a `Step` per forward (committed tokens per row) as decoding runs."""
    adapter, dec, state = prepare(model, input_ids, attention_mask, decoder, **kwargs)
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
