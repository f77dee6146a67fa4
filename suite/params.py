"""`RequestParams`: one request's parameters, built once at its front end (a CLI, a tab, the
server, a pipeline) and passed unchanged to the loop: `suite.generate`, `suite.prepare` and the
scheduler all take it (or its fields as keywords, which build it)."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .inputs import RequestInputs
from .sampling import SamplingParams

DEFAULT_MAX_NEW_TOKENS = 128     # the one default of every front end: server, Python API, CLIs and tabs


@dataclass(frozen=True)
class RequestParams:
    """decoder: a registered name (its options in `decoder_options`) or a decoder object; eos_token_id: an
    id or ids that end a row (None: the model's own); inputs: typed inputs of decoders that read them."""

    decoder: Any = "ar"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    eos_token_id: Any = None
    inputs: RequestInputs | None = None
    decoder_options: dict = field(default_factory=dict)

    def __post_init__(self):
        n = self.max_new_tokens
        if not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {n!r}")
        if self.decoder_options and not isinstance(self.decoder, str):
            raise ValueError("decoder options go into the decoder object when you pass one; drop "
                             + ", ".join(self.decoder_options))

    @classmethod
    def of(cls, params: "RequestParams | None" = None, **kwargs) -> "RequestParams":
        """`params` itself, or the parameters from keywords: this class's fields, and any other
        keyword is a decoder option (`generate(model, ids, decoder="ngram", max_new_tokens=32, n=3)`).
        A decoder (a name or an object) in params' place is the decoder, as `generate(model, ids, mask,
        "ngram", max_new_tokens=32)` has always read."""
        if params is not None and not isinstance(params, RequestParams):
            return cls.of(decoder=params, **kwargs)
        if params is not None:
            if kwargs:
                raise ValueError("give the request's parameters once: params= or keywords, not both "
                                 f"({', '.join(kwargs)})")
            return params
        names = {f.name for f in fields(cls)} - {"decoder_options"}
        options = {**kwargs.pop("decoder_options", {}), **{k: v for k, v in kwargs.items() if k not in names}}
        return cls(**{k: v for k, v in kwargs.items() if k in names}, decoder_options=options)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.seed)

    def but(self, **changes) -> "RequestParams":
        """A copy with `changes` (a replay's smaller budget, a resolved decoder)."""
        return replace(self, **changes)
