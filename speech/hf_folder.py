"""Folders of transformers model families (saved with `save_pretrained`, model and processor side by
side), loaded offline, and the generation settings our adapters of them cannot honour."""
from __future__ import annotations

import json
from pathlib import Path

PROCESSOR_FILES = (("tokenizer_config.json",), ("preprocessor_config.json", "processor_config.json"))
# what transformers' generate uses for a setting a generation config leaves unset (None)
GENERATE_DEFAULTS = {"top_k": 50, "max_length": 20}

# generation-config fields that add logits processors or change the search, with the value under
# which they do nothing (None: unset); any other value is refused by name (never silently dropped)
NEUTRAL_SETTINGS = {
    "num_beams": 1, "num_beam_groups": 1, "penalty_alpha": None, "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None, "sequence_bias": None, "min_length": 0, "min_new_tokens": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "exponential_decay_length_penalty": None,
    "guidance_scale": None, "watermarking_config": None, "return_timestamps": None,
    "no_speech_threshold": None, "logprob_threshold": None, "compression_ratio_threshold": None,
    "prompt_ids": None,
}


def unsupported_settings(gen, honoured: tuple[str, ...] = ()) -> list[str]:
    """`name=value` of each generation setting an adapter cannot honour (those in `honoured` it can)."""
    out = []
    for name, neutral in NEUTRAL_SETTINGS.items():
        value = getattr(gen, name, None)
        if name in honoured or value is None or value == neutral or (name == "return_timestamps" and value is False):
            continue
        out.append(f"{name}={value!r}")
    return out


def refuse_settings(gen, family: str, honoured: tuple[str, ...] = ()) -> None:
    bad = unsupported_settings(gen, honoured)
    if bad:
        raise ValueError(f"the generation config sets {', '.join(bad)}, which parasuite's {family} adapter cannot "
                         "honour exactly; set them to their defaults in generation_config.json")


def model_type(folder) -> str | None:
    """The transformers model_type named by folder/config.json (None: not a transformers folder)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError):
        return None


def load_family(folder, families: dict[str, tuple[str, str]], task: str, with_processor: bool = True):
    """(model, processor) from `folder`, whose model_type must be one of `families` (model_type ->
    (transformers model class, processor class)); processor None without with_processor (a draft
    model). Clear errors name what is missing."""
    import transformers
    folder = Path(folder)
    kind = model_type(folder)
    if kind not in families:
        raise ValueError(f"{folder} holds a {kind!r} model; {task} knows these transformers families: "
                         f"{', '.join(f'{k} ({v[0]})' for k, v in families.items())}")
    model_class, processor_class = families[kind]
    try:
        model = getattr(transformers, model_class).from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder}: not a loadable {model_class} checkpoint ({e})") from None
    if not with_processor:
        return model.eval(), None
    require_files(folder, PROCESSOR_FILES, processor_class)
    try:
        processor = getattr(transformers, processor_class).from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{folder}: its {processor_class} does not load ({e}); save it with "
                         f"{processor_class}.save_pretrained(folder)") from None
    return model.eval(), processor


def require_files(folder: Path, groups, processor_class: str) -> None:
    """A clear error unless `folder` holds one file of each group of names (the processor's files)."""
    missing = [" or ".join(names) for names in groups if not any((folder / n).is_file() for n in names)]
    if missing:
        raise ValueError(f"{folder} has no {' and no '.join(missing)}: save the processor beside the model "
                         f"({processor_class}.from_pretrained(<hub id>).save_pretrained(folder))")
