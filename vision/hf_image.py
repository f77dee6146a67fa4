"""transformers' own AR image generators (Emu3, Janus, Chameleon) from a local folder, decoded by
`suite` like our own prior: every image decoder (ar, sjd, mc_sjd, zipar, zipar_sjd) applies.

    model = vision.hf_image.load_hf_image_model("/models/Emu3-Gen")      # offline, local folder
    res = model.generate(input_ids, decoder="zipar", grid=(32, 32), seed=0)
    res.images (PIL; None for Chameleon), res.tokens (B, H, W) codes, res.stats

The adapter speaks in image codes: prompt tokens at logical positions < P, then an H x W' raster
of codes (code k). Its logits cover the codes only:
- Emu3: codes are vocabulary tokens `<|visual token k|>`; each row ends with the end-of-line
  token, so the raster is H x (W+1) with the end-of-line token as code K, forced in the last
  column and barred elsewhere (the structure Emu3's own `prefix_allowed_tokens_fn` imposes).
- Chameleon: codes are the image tokens of the vocabulary (32 x 32). transformers ships no
  Chameleon VQ decoder, so only codes come back.
- Janus: codes go through the generation embeddings and aligner, logits through the generation
  head (24 x 24), as `JanusForConditionalGeneration.generate(generation_mode="image")` does.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from suite import AdapterConfig, KVCache
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

FAMILIES = ("emu3", "chameleon", "janus")


class HFImageLM(AdapterBase):
    """A `suite.ModelAdapter` over an Emu3/Chameleon/Janus model, for prompts of P tokens: slots at
    logical positions >= P hold codes. Runs the base language model and a head over the codes only
    (Chameleon's own forward masks image tokens out of its logits)."""

    capabilities = Capabilities(custom_mask=True)

    def __init__(self, model, family: str, grid: tuple[int, int], prompt_length: int):
        if family not in FAMILIES:
            raise ValueError(f"unsupported model family {family!r}; supported: {', '.join(FAMILIES)}")
        self.model, self.family, self.prompt_length = model.eval(), family, prompt_length
        self.eol = family == "emu3"
        if family == "janus":
            self.code_ids, k = None, int(model.config.vq_config.num_embeddings)
        else:
            mapping = model.model.vocabulary_mapping
            self.code_ids = torch.tensor(mapping.image_tokens, dtype=torch.long, device=self.device)   # (K,) vocab ids
            k = len(self.code_ids)
            self.vocab_of_code = torch.cat([self.code_ids, torch.tensor([mapping.eol_token_id], device=self.device)]) \
                if self.eol else self.code_ids
        h, w = grid
        width = w + 1 if self.eol else w
        self.config = AdapterConfig(vocab_size=k + int(self.eol), eos_token_ids=frozenset(), pad_token_id=0,
                                    max_length=prompt_length + h * width,
                                    extra={"grid": (h, width), "image_grid": (h, w), "family": family})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return KVCache(batch, device=self.device)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        image = positions >= self.prompt_length                        # (B, N) code slots
        if attention_mask is None:
            n = tokens.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool, device=cache.valid.device).tril()
            attention_mask = cache.attention_mask(causal.expand(len(tokens), n, n))
        dev = self.device
        kw = dict(position_ids=positions.to(dev), attention_mask=attention_mask.to(dev), cache=cache.backend,
                  use_cache=True)
        m = self.model
        if self.family == "janus":
            text = m.get_input_embeddings()(torch.where(image, 0, tokens).to(dev))
            codes = m.prepare_embeddings_for_image_generation(torch.where(image, tokens, 0).to(dev))
            embeds = torch.where(image[..., None].to(dev), codes, text)               # (B, N, D)
            hidden = m.model.language_model(inputs_embeds=embeds, **kw).last_hidden_state[:, logits_from:]
            return m.model.generation_head(hidden)
        ids = torch.where(image, self.vocab_of_code[tokens.clamp(0, len(self.vocab_of_code) - 1)], tokens)
        base = m.model.text_model if self.family == "emu3" else m.model
        hidden = base(input_ids=ids.to(dev), **kw).last_hidden_state[:, logits_from:]  # (B, N', D)
        logits = hidden @ m.lm_head.weight[self.code_ids.to(dev)].T                   # (B, N', K)
        return self._with_eol(logits, positions[:, logits_from:].to(dev)) if self.eol else logits

    def _with_eol(self, logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(B, N, K) -> (B, N, K+1): the end-of-line code, forced where the predicted cell ends a
        row and barred elsewhere."""
        width = self.config.extra["grid"][1]
        row_end = ((positions + 1 - self.prompt_length) % width == width - 1)[..., None]   # (B, N, 1)
        low = torch.finfo(logits.dtype).min
        eol = torch.zeros_like(logits[..., :1]).masked_fill(~row_end, low)
        return torch.cat([logits.masked_fill(row_end, low), eol], -1)


MODEL_CLASSES = {"emu3": "Emu3ForConditionalGeneration", "janus": "JanusForConditionalGeneration",
                 "chameleon": "ChameleonForConditionalGeneration"}


@dataclass
class HFImageResult:
    images: list | None              # PIL images (None: the family ships no VQ decoder)
    tokens: torch.Tensor             # (B, H, W) codes
    stats: object
    settings: dict


class HFImageModel:
    """A loaded Emu3/Janus/Chameleon checkpoint: prompt ids in, codes and images out."""

    def __init__(self, model, family: str, processor=None):
        self.model, self.family, self.processor = model.eval(), family, processor

    def default_grid(self) -> tuple[int, int] | None:
        """Janus: its fixed token count; Chameleon: 32 x 32; Emu3 takes any size (pass grid=)."""
        if self.family == "janus":
            side = math.isqrt(int(self.model.config.vision_config.num_image_tokens))
            return side, side
        if self.family == "chameleon":
            vq = self.model.config.vq_config
            side = vq.resolution // 2 ** (len(vq.channel_multiplier) - 1)
            return side, side
        return None

    def prompt_ids(self, text: str) -> torch.Tensor:
        """(1, P) ids of a text prompt, through the folder's own processor."""
        if self.processor is None:
            raise ValueError("this model folder has no processor (tokenizer): pass prompt token ids instead")
        if self.family == "emu3":
            return self.processor(text=[text], return_for_image_generation=True, return_tensors="pt")["input_ids"]
        if self.family == "janus":
            return self.processor(text=[text], generation_mode="image", return_tensors="pt")["input_ids"]
        ids = self.processor(text=[text], return_tensors="pt")["input_ids"]
        boi = self.model.config.vocabulary_map.get("<racm3:break>")
        return torch.cat([ids, torch.tensor([[boi]], device=ids.device)], 1) if boi is not None else ids

    def generate(self, input_ids, decoder="ar", grid=None, guidance_scale: float = 1.0, uncond_ids=None,
                 temperature: float = 1.0, top_k=None, top_p=None, seed: int = 0, **options) -> HFImageResult:
        import suite
        from suite.api import prepare
        grid = tuple(grid) if grid is not None else self.default_grid()
        if grid is None:
            raise ValueError("Emu3 generates any size: pass grid=(H, W) in tokens (e.g. (32, 32))")
        ids = torch.as_tensor(input_ids)
        ids = ids[None] if ids.dim() == 1 else ids
        adapter = HFImageLM(self.model, self.family, grid, ids.shape[1])
        model = adapter
        if guidance_scale != 1.0:
            if uncond_ids is None:      # Janus-style: every prompt token but the first and last -> pad
                uncond_ids = ids.clone()
                uncond_ids[:, 1:-1] = self.model.config.get_text_config().pad_token_id or 0
            model = suite.ClassifierFreeGuidance(adapter, guidance_scale, torch.as_tensor(uncond_ids))
        h, width = adapter.config.extra["grid"]
        run, dec, state = prepare(model, ids, decoder=decoder, max_new_tokens=h * width, temperature=temperature,
                                  top_k=top_k, top_p=top_p, seed=seed, **options)
        for _ in suite.decode_steps(run, dec, state):
            pass
        tokens = torch.tensor([state.new_tokens(b) for b in range(state.batch)], device=state.device).reshape(-1, h, width)
        codes = tokens[..., :grid[1]]                               # drop Emu3's end-of-line column
        settings = {"family": self.family, "decoder": dec.name, "grid": list(grid), "guidance_scale": guidance_scale,
                    "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
        return HFImageResult(self.decode_codes(codes), codes, state.stats, settings)

    @torch.no_grad()
    def decode_codes(self, codes: torch.Tensor) -> list | None:
        """(B, H, W) codes -> PIL images through the model's own VQ decoder (pixels in [-1, 1])."""
        from PIL import Image
        from .data import to_uint8
        if self.family == "chameleon":
            return None                  # transformers' ChameleonVQVAE has an encoder only
        dev = next(self.model.parameters()).device
        if self.family == "emu3":
            pixels = self.model.model.vqmodel.decode(codes.to(dev))                     # (B, 3, h, w)
        else:
            pixels = self.model.decode_image_tokens(codes.flatten(1).to(dev)).permute(0, 3, 1, 2)
        return [Image.fromarray(a) for a in to_uint8(pixels.float())]


def load_hf_image_model(folder: str, device: str | None = None) -> HFImageModel:
    """An Emu3, Janus or Chameleon checkpoint from a local folder (never the hub)."""
    import transformers
    if not os.path.isdir(folder):
        raise ValueError(f"{folder} is not a folder: pass a local Emu3/Janus/Chameleon checkpoint folder")
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    except Exception as e:
        from suite.runtime.storage import without_values
        raise ValueError(f"cannot read a transformers config in {folder}: {without_values(str(e))}") from e
    family = config.model_type
    if family not in MODEL_CLASSES:
        raise ValueError(f"{folder} holds a {family!r} model; vision.generate loads {', '.join(FAMILIES)} "
                         "checkpoints (or our own prior with --weights)")
    try:
        model = getattr(transformers, MODEL_CLASSES[family]).from_pretrained(folder, local_files_only=True)
    except Exception as e:
        raise ValueError(f"cannot load the {family} weights from {folder}: {e}") from e
    try:
        processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    except Exception:
        processor = None
    return HFImageModel(model.to(device) if device else model, family, processor)
