"""The front end of image-text-to-text models: a loaded model (`VLM`: images + prompts in, text out, every
`generate` a request of its scheduler) and its loader (`load_vlm`). The model layer under it (the adapter
bound to a request's batch, the families) is suite.models.vlm.

    vlm = suite.vlm.load_vlm("/models/paligemma")              # offline, local folder
    res = vlm.generate(image, "detect cat", decoder="lookahead", max_new_tokens=64)
    res.texts, res.tokens, res.stats
"""
from __future__ import annotations

import copy
import os
import threading
from dataclasses import dataclass

import torch

from .models.hf_fields import ConfigFields
from .models.vlm.adapter import VLMAdapter
from .models.vlm.families import FAMILIES, known_families
from .models.vlm.rules import GenerationRules
from .params import DEFAULT_MAX_NEW_TOKENS
from .scheduler import Scheduler


@dataclass
class VLMResult:
    texts: list[str]
    tokens: list[list[int]]          # new tokens per row (EOS included when reached)
    stats: object
    settings: dict


class VLM:
    """A loaded image-text-to-text model with its processor: images + prompts in, text out."""

    def __init__(self, model, processor, family: str, folder: str = ""):
        self.model, self.processor, self.family, self.folder = model.eval(), processor, family, folder
        self.spec = FAMILIES[family]                # the family's own parts (suite.models.vlm.family)
        gen = model.generation_config
        cfg = model.config.get_text_config()
        eos = gen.eos_token_id if gen.eos_token_id is not None else cfg.eos_token_id
        self.eos = frozenset([eos] if isinstance(eos, int) else (eos or ()))
        pad = gen.pad_token_id if gen.pad_token_id is not None else cfg.pad_token_id
        self.pad = int(pad if pad is not None else min(self.eos, default=0))
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_length = ConfigFields.read(cfg).max_length
        self.rules = GenerationRules.of(gen, self.eos)
        self._scheduler = None
        self._lock = threading.Lock()

    @property
    def scheduler(self):
        """The model's stepping thread (suite.scheduler), made on first use: every `generate` is a
        request of it, so concurrent callers share forwards."""
        with self._lock:
            if self._scheduler is None:
                self._scheduler = Scheduler(VLMAdapter(self), name=f"parasuite-vlm-{self.family}")
            return self._scheduler

    @property
    def tokenizer(self):
        return self.processor.tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def inputs(self, images, prompts):
        """The processor's batch for images and prompts (one image per prompt)."""
        images = images if isinstance(images, (list, tuple)) else [images]
        prompts = [prompts] * len(images) if isinstance(prompts, str) else list(prompts)
        if len(prompts) != len(images):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts: give one prompt per image")
        kw = {"padding": True} if len(prompts) > 1 else {}
        return self.processor(images=list(images), text=prompts, return_tensors="pt", **kw).to(self.device)

    def prompt_rows(self, batch) -> list[list[int]]:
        ids, keep = batch["input_ids"], batch["attention_mask"].bool()
        return [ids[b][keep[b]].tolist() for b in range(len(ids))]

    @torch.no_grad()
    def adapter(self, batch, max_new_tokens: int, model=None):
        """The suite adapter bound to a processor batch (images encoded once, here)."""
        return self.spec.bind(self, batch, max_new_tokens, model)

    def truncated(self, num_layers: int):
        """The model with the first `num_layers` layers of its text decoder (shared weights): a
        self-speculative draft (Draft & Verify)."""
        path = self.spec.layers
        layers = self.model.get_submodule(".".join(path))
        if not 1 <= num_layers < len(layers):
            raise ValueError(f"draft='self:{num_layers}' needs 1 <= N < {len(layers)} (the text decoder's layer count)")
        return _with_layers(self.model, path, torch.nn.ModuleList(list(layers)[:num_layers]))

    def generate(self, images, prompts, decoder="ar", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0,
                 top_k=None, top_p=None, seed=None, batch=None, **options) -> VLMResult:
        """Decode the answers to `prompts` about `images` with any chain decoder; speculative
        takes draft='self:N' (the first N text layers) or draft_model= (a VLM of the family)."""
        request = self.submit(images, prompts, decoder, max_new_tokens, temperature, top_k, top_p, seed, batch,
                              **options)
        res = request.result()
        texts = self.tokenizer.batch_decode(res.new_tokens, skip_special_tokens=False)
        settings = {"family": self.family, "decoder": request.decoder.name, "max_new_tokens": max_new_tokens,
                    "temperature": temperature, "seed": seed}
        return VLMResult(texts, res.new_tokens, res.stats, settings)

    def submit(self, images, prompts, decoder="ar", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.0,
               top_k=None, top_p=None, seed=None, batch=None, stream: bool = False, **options):
        """`generate`'s request, queued on the model's scheduler (its images encoded here, in the
        caller's thread): a suite.scheduler.Request (steps(), result(), cancel()). Concurrent
        requests share forwards; each gets the tokens it would get alone."""
        batch = batch if batch is not None else self.inputs(images, prompts)
        adapter = self.adapter(batch, max_new_tokens)
        options = self._draft(adapter, batch, max_new_tokens, options)
        rows = self.spec.start_rows(self, batch)
        return self.scheduler.submit(rows, decoder=decoder, max_new_tokens=max_new_tokens, temperature=temperature,
                                     top_k=top_k, top_p=top_p, seed=seed, stream=stream, bound=adapter, **options)

    def _draft(self, adapter, batch, max_new_tokens, options):
        draft = options.get("draft")
        if isinstance(draft, str) and draft.startswith("self:") and draft[5:].isdigit():
            options = {k: v for k, v in options.items() if k != "draft"}
            options["draft_model"] = adapter.with_model(self.truncated(int(draft[5:])))
        elif isinstance(options.get("draft_model"), VLM):
            options["draft_model"] = options["draft_model"].adapter(batch, max_new_tokens)
        return options

    @torch.no_grad()
    def reference(self, images, prompts, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, batch=None) -> list[list[int]]:
        """The family's own greedy `generate` (the oracle the tests hold every decoder to): new
        tokens per row, cut after the first EOS."""
        batch = batch if batch is not None else self.inputs(images, prompts)
        out = self.model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens)
        start = self.spec.reference_start(batch)
        rows = []
        for seq in out[:, start:].tolist():
            cut = next((i + 1 for i, t in enumerate(seq) if t in self.eos), len(seq))
            rows.append(seq[:cut])
        return rows


def _with_layers(module, path, layers):
    """A shallow copy of `module` whose submodule at `path` is `layers` (the rest shared)."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    twin._modules[path[0]] = layers if len(path) == 1 else _with_layers(module.get_submodule(path[0]), path[1:], layers)
    return twin


def load_vlm(folder, device: str | None = None, generation: dict | None = None) -> VLM:
    """An image-text-to-text checkpoint (Florence-2, Kosmos-2, PaliGemma, GOT-OCR2, Qwen2-VL) and its
    processor from a local folder (never the hub); `generation` overrides generation-config fields."""
    import transformers
    folder = str(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"{folder} is not a folder: pass a local model folder saved with save_pretrained")
    family = vlm_family(folder)
    if family not in FAMILIES:
        raise ValueError(f"{folder} holds a {family!r} model, not a vision-language family suite knows; "
                         f"known: {known_families()}")
    try:
        processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    except Exception as e:
        raise ValueError(f"{folder} has no usable processor ({type(e).__name__}: {e}); save the model's "
                         "processor (tokenizer + image processor) beside it: processor.save_pretrained(folder)") from None
    if not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
        raise ValueError(f"{folder} has a {type(processor).__name__}, not a processor with a tokenizer and an image "
                         "processor; save the model's processor beside it: processor.save_pretrained(folder)")
    model = getattr(transformers, FAMILIES[family].model_class).from_pretrained(folder, local_files_only=True)
    for key, value in (generation or {}).items():
        setattr(model.generation_config, key, value)
    return VLM(model.to(device) if device else model, processor, family, folder)


def vlm_family(folder) -> str | None:
    """The model_type of a folder's config.json, or None when it has none."""
    from .runtime.storage import read_json
    path = os.path.join(str(folder), "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{folder} has no config.json: pass a model folder saved with save_pretrained")
    return read_json(path).get("model_type")
