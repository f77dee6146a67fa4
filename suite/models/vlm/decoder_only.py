"""The decoder-only VLM families (GOT-OCR2, PaliGemma, Qwen2-VL, Kosmos-2). The image runs through
the model's own `get_image_features` once per request; its features take the place of the image
placeholder slots of the prompt (as the model's forward splices them) on the prefill, and every
later forward is text over the cache. Bound to a batch, each row's cache carries its image features
at its prompt's image slots ("image_embeds" (B, P, D), "image_mask" (B, P)) and, for Qwen2-VL, its
M-RoPE positions ("rope_table" (B, P, 3), "rope_delta" (B, 1)). The forward takes `inputs_embeds`,
logical `position_ids` (PaliGemma counts from 1, Kosmos-2 from its padding index + 1, Qwen2-VL's
M-RoPE is the model's own `get_rope_index` over the prompt, then text positions shifted by its delta)
and suite's 4-D mask (PaliGemma: the prompt attends to itself both ways, as its token_type_ids make
it; Kosmos-2 takes a padding mask only, so tree drafts are refused)."""
from __future__ import annotations

import torch

from .adapter import VLMAdapter
from .family import Family


class DecoderOnly(Family):
    """A decoder-only family: the image features at the prompt's image-token slots, positions and
    mask as suite gives them; a family changes what differs."""
    layers = ("model", "language_model", "layers")

    # -- binding: the images, once per request

    def image_features(self, model, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The images' features (M, D), in the order of the prompts' image slots, and those slots (B, P) bool."""
        extra = {"image_grid_thw": batch["image_grid_thw"]} if "image_grid_thw" in batch else {}
        out = model.get_image_features(batch["pixel_values"], **extra).pooler_output
        feats = torch.cat(list(out)) if isinstance(out, (list, tuple)) else out
        return feats, batch["input_ids"] == model.config.image_token_id

    def rope(self, vlm, batch, rows) -> dict:
        """Row inputs of the family's own positions (none by default)."""
        return {}

    def bind(self, vlm, batch, max_new_tokens: int, model=None) -> VLMAdapter:
        rows = vlm.prompt_rows(batch)
        keep = batch["attention_mask"].bool()
        feats, placed = self.image_features(vlm.model, batch)
        feats = feats.reshape(-1, feats.shape[-1])
        slots = [placed[b][keep[b]].nonzero().flatten().tolist() for b in range(len(rows))]
        adapter = VLMAdapter(vlm, model)
        return adapter.bound({**self.placed(rows, slots, feats, adapter.device), **self.rope(vlm, batch, rows)},
                             [len(r) for r in rows], max_new_tokens)

    @staticmethod
    def placed(rows, image_slots, features, dev) -> dict:
        """Image features (M, D) at the rows' image slots (`image_slots`: per row, the prompt
        positions that take a feature): "image_embeds" (B, P, D) and "image_mask" (B, P)."""
        if sum(len(pos) for pos in image_slots) != len(features):
            raise ValueError(f"the prompts hold {sum(len(pos) for pos in image_slots)} image placeholders but the "
                             f"images gave {len(features)} features: build the prompts with the folder's processor")
        p = max(len(r) for r in rows)
        embeds = torch.zeros(len(rows), p, features.shape[-1], dtype=features.dtype, device=dev)
        placed = torch.zeros(len(rows), p, dtype=torch.bool, device=dev)
        start = 0
        for b, pos in enumerate(image_slots):
            where = torch.tensor(pos, dtype=torch.long, device=dev)
            embeds[b, where] = features[start:start + len(pos)].to(dev)
            placed[b, where] = True
            start += len(pos)
        return {"image_embeds": embeds, "image_mask": placed}

    # -- a forward

    def positions(self, model, positions, rows):
        return positions

    def mask(self, mask, positions, rows):
        return mask

    def text_model(self, model):
        """The module whose forward takes the embeddings (the whole model, by default)."""
        return model

    def logits(self, model, tokens, positions, mask, cache, rows, logits_from):
        keep = tokens.shape[1] - logits_from
        out = self.text_model(model)(inputs_embeds=self.embeds(model, tokens, positions, rows),
                                     position_ids=self.positions(model, positions, rows),
                                     attention_mask=self.mask(mask, positions, rows), cache=cache.backend,
                                     use_cache=True, logits_to_keep=keep)
        return out.logits

    @staticmethod
    def embeds(model, tokens, positions, rows):
        """Token embeddings, a prompt's image slots replaced by its image features (no host sync)."""
        embed = model.get_input_embeddings()
        embeds = embed(torch.where(tokens < embed.num_embeddings, tokens, 0))
        at = positions.clamp(max=rows["image_mask"].shape[1] - 1)
        image = rows["image_mask"].gather(1, at) & (positions < rows["prompt_len"])          # (B, N)
        feats = rows["image_embeds"].gather(1, at[..., None].expand(-1, -1, embeds.shape[-1]))
        return torch.where(image[..., None], feats.to(embeds.dtype), embeds)


class GotOcr2(DecoderOnly):
    model_type, model_class = "got_ocr2", "GotOcr2ForConditionalGeneration"


class PaliGemma(DecoderOnly):
    """Positions count from 1; on the prefill the prompt (image + text prefix) attends both ways."""
    model_type, model_class = "paligemma", "PaliGemmaForConditionalGeneration"

    def positions(self, model, positions, rows):
        return positions + 1

    def mask(self, mask, positions, rows):
        if not bool((positions[:, 0] == 0).any()):
            return mask
        n, t = mask.shape[-2:]
        slot = torch.arange(n, device=mask.device)
        prefix = (slot[None] < rows["prompt_len"]) & (positions[:, :1] == 0)          # (B, N)
        both = prefix[:, :, None] & prefix[:, None, :]
        mask = mask.clone()
        mask[:, 0, :, t - n:] |= both
        return mask


class Qwen2VL(DecoderOnly):
    """M-RoPE: the model's own 3-D positions over the prompt, then text positions shifted by its delta."""
    model_type, model_class = "qwen2_vl", "Qwen2VLForConditionalGeneration"
    chat_template = True

    def rope(self, vlm, batch, rows) -> dict:
        """Each unpadded prompt's M-RoPE positions "rope_table" (B, P, 3) and text shift "rope_delta" (B, 1)."""
        dev = vlm.device
        table = torch.zeros(3, len(rows), max(len(r) for r in rows), dtype=torch.long, device=dev)
        delta = torch.zeros(len(rows), dtype=torch.long, device=dev)
        grids = batch["image_grid_thw"]
        per_row = (batch["input_ids"] == vlm.model.config.vision_start_token_id).sum(1).tolist()
        start = 0
        for b, r in enumerate(rows):
            ids = torch.tensor([r], device=dev)
            types = batch["mm_token_type_ids"][b][batch["attention_mask"][b].bool()][None]
            pos, d = vlm.model.model.get_rope_index(ids, mm_token_type_ids=types,
                                                    image_grid_thw=grids[start:start + per_row[b]])
            start += per_row[b]
            table[:, b, :len(r)], delta[b] = pos[:, 0].to(table.device), int(d.flatten()[0])
        return {"rope_table": table.permute(1, 2, 0), "rope_delta": delta[:, None]}

    def positions(self, model, positions, rows):
        table = rows["rope_table"]                                                     # (B, P, 3)
        looked = table.gather(1, positions.clamp(max=table.shape[1] - 1)[..., None].expand(-1, -1, 3))
        inside = (positions < rows["prompt_len"])[..., None]
        return torch.where(inside, looked, (positions + rows["rope_delta"])[..., None]).permute(2, 0, 1)


class Kosmos2(DecoderOnly):
    """Its text model takes the embeddings and a padding mask only (chain drafts, no trees);
    positions count from its padding index + 1; the image slots come with the processor's batch."""
    model_type, model_class = "kosmos-2", "Kosmos2ForConditionalGeneration"
    layers = ("text_model", "model", "layers")
    custom_mask = False

    def image_features(self, model, batch):
        return model.get_image_features(batch["pixel_values"]).pooler_output, batch["image_embeds_position_mask"].bool()

    def positions(self, model, positions, rows):
        return positions + model.text_model.model.embed_positions.padding_idx + 1

    def mask(self, mask, positions, rows):
        return padding_mask(mask)

    def text_model(self, model):
        return model.text_model


def padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """(B, 1, N, T) bool -> (B, T) long, for a model that takes only a padding mask (Kosmos-2).
    Valid for chain drafts: every real slot sees the live past and the draft before it, padding
    slots see themselves only; tree drafts are refused."""
    n, t = mask.shape[-2:]
    past, draft = mask[:, 0, :, :t - n], mask[:, 0, :, t - n:]
    causal = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    alone = (draft == torch.eye(n, dtype=torch.bool, device=mask.device)).all(-1)           # (B, N) padding
    live = past.any(1)                                                                       # (B, S)
    chain = (draft == causal).all(-1) & (past == live[:, None]).all(-1)
    if not bool((chain | alone).all()):
        raise ValueError("Kosmos-2's text model takes a padding mask only: tree-shaped drafts (lookahead) cannot "
                         "run on it; use decoder='ar', 'ngram', 'jacobi' or 'speculative'")
    return torch.cat([live, torch.ones_like(draft[:, 0])], 1).long()
