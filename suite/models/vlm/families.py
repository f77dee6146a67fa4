"""The VLM families suite knows, by config.json's model_type."""
from __future__ import annotations

from .decoder_only import GotOcr2, Kosmos2, PaliGemma, Qwen2VL
from .family import Family
from .florence2 import Florence2

FAMILIES: dict[str, Family] = {f.model_type: f for f in (Florence2(), Kosmos2(), PaliGemma(), GotOcr2(), Qwen2VL())}


def known_families() -> str:
    return ", ".join(f"{f.model_class} ({t})" for t, f in FAMILIES.items())
