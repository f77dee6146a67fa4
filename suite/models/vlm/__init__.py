"""Vision-language models of transformers (image-text-to-text) as suite ModelAdapters, through
their public forward, from a local folder saved with `save_pretrained` (processor included). Their
front end (`VLM`, `load_vlm`: images + prompts in, text out) is suite.vlm, above the scheduler.

The images of a request are encoded once, and what a row reads besides its tokens (its image
features, prompt length, M-RoPE table or encoder states) travels in its cache, so every `generate`
is a request of the model's scheduler (suite.scheduler) and concurrent requests share forwards:
rows leave at their EOS and others join between steps. The folder's generation settings are
honoured where they depend only on the position (`rules`); settings that depend on the history or
on beams are refused, naming them, with the override that lifts them
(`load_vlm(folder, generation={...})`).

    adapter.py       VLMAdapter: the one suite adapter, bound to a request's batch; the family runs the forward
    family.py        Family: what a family supplies (binding, start rows, cache, forward)
    decoder_only.py  GOT-OCR2, PaliGemma, Qwen2-VL, Kosmos-2: image features spliced into the prompt
    florence2.py     Florence-2: an encoder-decoder (BART)
    families.py      FAMILIES: model_type -> family
    rules.py         GenerationRules: the position-wise settings of a generation config
"""
from .families import FAMILIES, known_families
from .rules import GenerationRules

__all__ = ["FAMILIES", "GenerationRules", "known_families"]
