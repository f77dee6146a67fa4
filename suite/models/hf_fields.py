"""A transformers config (or generation config) read once into a typed record: the one room that
knows which attribute names a field goes by across families (GPT-2's `n_positions` is Llama's
`max_position_embeddings`; the rope base sits in `rope_parameters` or `rope_theta`; `head_dim` is
given or derived). The adapters, the cost model, the EAGLE head and the VLM rules read fields."""
from __future__ import annotations

from dataclasses import dataclass, fields

# record field -> the attribute names that hold it, first set (not None) wins
CONFIG_NAMES = {
    "model_type": ("model_type",),
    "max_length": ("max_position_embeddings", "n_positions"),
    "num_layers": ("num_hidden_layers", "n_layer"),
    "num_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "hidden_size": ("hidden_size", "n_embd"),
    "intermediate_size": ("intermediate_size",),
    "vocab_size": ("vocab_size",),
    "rope_parameters": ("rope_parameters",),
    "rope_theta": ("rope_theta",),
    "rms_norm_eps": ("rms_norm_eps",),
    "eos_token_id": ("eos_token_id",),
    "pad_token_id": ("pad_token_id",),
    "layer_types": ("layer_types",),
    "attn_implementation": ("_attn_implementation",),
}


def first_set(obj, names: tuple[str, ...], default=None):
    """The first of `obj`'s attributes `names` that is set (not None), else `default` (obj may be None)."""
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return default


def read_fields(obj, names) -> dict:
    """{name: obj's attribute `name` or None} for each name (a config's optional settings)."""
    return {name: first_set(obj, (name,)) for name in names}


@dataclass(frozen=True)
class ConfigFields:
    """The fields of a transformers model config that suite reads (None where the family has none)."""
    model_type: str | None = None
    max_length: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    rope_parameters: dict | None = None
    rope_theta: float | None = None
    rms_norm_eps: float | None = None
    eos_token_id: int | list | None = None
    pad_token_id: int | None = None
    layer_types: list | None = None
    attn_implementation: str | None = None

    @staticmethod
    def read(config) -> "ConfigFields":
        """The record of `config` (None, or any object: the fields it lacks stay None)."""
        return ConfigFields(**{name: first_set(config, names) for name, names in CONFIG_NAMES.items()})

    @staticmethod
    def of(model) -> "ConfigFields":
        """The record of a model's `config` (any object: one without a config has every field None)."""
        return ConfigFields.read(first_set(model, ("config",)))

    @property
    def kv_heads(self) -> int | None:
        """Key/value heads: num_kv_heads, or one per attention head."""
        return self.num_kv_heads or self.num_heads

    @property
    def head_size(self) -> int | None:
        """Per-head width: head_dim, or hidden_size / heads."""
        if self.head_dim:
            return self.head_dim
        return self.hidden_size // self.num_heads if self.hidden_size and self.num_heads else None

    @property
    def rope_base(self) -> float:
        """The rotary base: rope_parameters' rope_theta, else rope_theta, else 10000."""
        theta = (self.rope_parameters or {}).get("rope_theta", self.rope_theta)
        return float(10000.0 if theta is None else theta)


@dataclass(frozen=True)
class GenerationFields:
    """The fields of a transformers generation config that suite reads (None where unset)."""
    eos_token_id: int | list | None = None
    pad_token_id: int | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None
    suppress_tokens: list | None = None
    begin_suppress_tokens: list | None = None
    bad_words_ids: list | None = None
    min_length: int | None = None
    min_new_tokens: int | None = None

    @staticmethod
    def read(gen) -> "GenerationFields":
        """The record of a generation config (None: every field None)."""
        return GenerationFields(**read_fields(gen, [f.name for f in fields(GenerationFields)]))

    @staticmethod
    def of(model) -> "GenerationFields":
        """The record of a model's `generation_config` (every field None without one)."""
        return GenerationFields.read(first_set(model, ("generation_config",)))
