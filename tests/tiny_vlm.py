"""Tiny random vision-language models of real transformers families, saved with their processor
into a folder as a user's would be: the tokenizer is the embedded SmolLM2 one (offline) with the
family's special tokens added, the image processor is built from its class."""
from __future__ import annotations

import numpy as np
import torch

HIDDEN = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512)
SPECIALS = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|im_start|>"}   # ids 0, 2, 1


def images(n: int = 2, size=(40, 52)):
    from PIL import Image
    return [Image.fromarray((np.random.RandomState(i).rand(*size, 3) * 255).astype("uint8")) for i in range(n)]


def _tokenizer(embedded_folder, tmp, tokens=(), specials=(), image_token: str | None = None):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(embedded_folder), local_files_only=True)
    tok.add_special_tokens(SPECIALS)
    tok.add_tokens(list(tokens))
    if specials:
        tok.add_special_tokens({"additional_special_tokens": list(specials)})
    tok.padding_side = "left"
    if image_token is None:
        return tok
    tok.save_pretrained(str(tmp))          # v5 names an image token only through extra_special_tokens
    return AutoTokenizer.from_pretrained(str(tmp), extra_special_tokens={"image_token": image_token})


def _finish(model, processor, tokenizer, folder, boost=()):
    """Random head (untied, so greedy paths are not one repeated token), `boost` rows sharpened so
    the tiny model emits the family's location tokens; eos/pad from the tokenizer; save."""
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id, gen.bos_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id, 0
    torch.manual_seed(1)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.copy_(torch.randn_like(head) * 0.6)
        if boost:
            head[list(boost)] *= 2.5
    model.save_pretrained(str(folder))
    processor.save_pretrained(str(folder))
    return folder


def florence2(embedded_folder, folder):
    import transformers as tf
    tok = _tokenizer(embedded_folder, folder, [f"<loc_{i}>" for i in range(1000)], ["<image>"], "<image>")
    ip = tf.CLIPImageProcessor(size={"height": 64, "width": 64}, crop_size={"height": 64, "width": 64},
                               do_center_crop=False, image_seq_length=5)
    proc = tf.Florence2Processor(image_processor=ip, tokenizer=tok)
    text = tf.BartConfig(vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                         decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=256,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=None)
    vision = dict(depths=(1, 1, 1, 1), embed_dim=(16, 16, 16, 32), num_heads=(1, 1, 1, 2), num_groups=(1, 1, 1, 2),
                  window_size=2, projection_dim=32, drop_path_rate=0.0)
    cfg = tf.Florence2Config(vision_config=vision, text_config=text.to_dict(), image_token_id=tok.image_token_id,
                             tie_word_embeddings=False)
    torch.manual_seed(0)
    model = tf.Florence2ForConditionalGeneration(cfg).eval()
    return _finish(model, proc, tok, folder, tok.convert_tokens_to_ids([f"<loc_{i}>" for i in range(1000)]))


def paligemma(embedded_folder, folder):
    import transformers as tf
    locs = [f"<loc{i:04d}>" for i in range(1024)]
    tok = _tokenizer(embedded_folder, folder, locs, ["<image>"])
    ip = tf.SiglipImageProcessor(size={"height": 28, "width": 28}, image_seq_length=4)
    proc = tf.PaliGemmaProcessor(image_processor=ip, tokenizer=tok)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    text = dict(vocab_size=len(tok), head_dim=8, tie_word_embeddings=False, **HIDDEN)
    cfg = tf.PaliGemmaConfig(vision_config=vision, text_config=text, image_token_id=tok.convert_tokens_to_ids("<image>"),
                             projection_dim=32, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = tf.PaliGemmaForConditionalGeneration(cfg).eval()
    return _finish(model, proc, tok, folder, tok.convert_tokens_to_ids(locs))


def kosmos2(embedded_folder, folder, patches: int = 16):
    import transformers as tf
    tok = _tokenizer(embedded_folder, folder)
    ip = tf.CLIPImageProcessor(size={"height": 28, "width": 28}, crop_size={"height": 28, "width": 28},
                               do_center_crop=False)
    proc = tf.Kosmos2Processor(image_processor=ip, tokenizer=tok, num_patch_index_tokens=patches)
    tok = proc.tokenizer
    text = dict(vocab_size=len(tok), embed_dim=32, layers=2, attention_heads=2, ffn_dim=64, max_position_embeddings=512,
                pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    cfg = tf.Kosmos2Config(text_config=text, vision_config=vision, latent_query_num=64)
    torch.manual_seed(0)
    model = tf.Kosmos2ForConditionalGeneration(cfg).eval()
    boost = tok.convert_tokens_to_ids(["<object>", "</object>", "<phrase>", "</phrase>"] +
                                      [f"<patch_index_{i:04d}>" for i in range(patches)])
    return _finish(model, proc, tok, folder, boost)


BUILDERS = {"florence2": florence2, "paligemma": paligemma, "kosmos-2": kosmos2}


def got_ocr2(embedded_folder, folder):
    """GOT-OCR2: its processor always asks for 256 image tokens, so the tiny SAM encoder sees a
    256 x 256 page in 4 x 4 patches (64 x 64), windowed, and the projector's two stride-2 convs
    leave 16 x 16 = 256 features."""
    import transformers as tf
    tok = _tokenizer(embedded_folder, folder, [], ["<img>", "</img>", "<imgpad>"])
    ip = tf.GotOcr2ImageProcessor(size={"height": 256, "width": 256})
    proc = tf.GotOcr2Processor(image_processor=ip, tokenizer=tok)
    vision = dict(hidden_size=16, output_channels=16, num_hidden_layers=1, num_attention_heads=2, image_size=256,
                  patch_size=4, window_size=8, global_attn_indexes=(), mlp_dim=32)
    text = dict(vocab_size=len(tok), tie_word_embeddings=False, **HIDDEN)
    cfg = tf.GotOcr2Config(vision_config=vision, text_config=text, image_token_index=tok.convert_tokens_to_ids("<imgpad>"),
                           image_seq_length=256, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = tf.GotOcr2ForConditionalGeneration(cfg).eval()
    return _finish(model, proc, tok, folder)


QWEN2_VL_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
                     "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}"
                     "{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                     "{% endif %}")


def qwen2_vl(embedded_folder, folder):
    """Qwen2-VL: 56 x 56 pixel pages (4 x 4 patches of 14, merged 2 x 2: 4 image tokens with
    M-RoPE positions over their grid)."""
    import transformers as tf
    tok = _tokenizer(embedded_folder, folder, [], ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    ip = tf.Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=56 * 56)
    proc = tf.Qwen2VLProcessor(image_processor=ip, tokenizer=tok, video_processor=tf.Qwen2VLVideoProcessor(),
                               chat_template=QWEN2_VL_TEMPLATE)
    ids = tok.convert_tokens_to_ids
    vision = dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2)
    text = dict(vocab_size=len(tok), tie_word_embeddings=False, rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
                **HIDDEN)
    cfg = tf.Qwen2VLConfig(vision_config=vision, text_config=text, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False)
    torch.manual_seed(0)
    model = tf.Qwen2VLForConditionalGeneration(cfg).eval()
    return _finish(model, proc, tok, folder)


BUILDERS.update({"got_ocr2": got_ocr2, "qwen2_vl": qwen2_vl})


def requests_share_forwards(vlm, batches, budgets):
    """Requests of one processor batch each (`batches`: one image each) sent to the VLM's scheduler,
    the last once the first has taken a step (it joins mid-flight): each gets its alone tokens, and
    they share forwards."""
    alone = [vlm.generate(None, None, max_new_tokens=n, batch=b).tokens[0] for b, n in zip(batches, budgets)]
    first = vlm.submit(None, None, max_new_tokens=budgets[0], batch=batches[0], stream=True)
    rest = [vlm.submit(None, None, max_new_tokens=n, batch=b) for b, n in zip(batches[1:-1], budgets[1:-1])]
    next(first.steps())
    late = vlm.submit(None, None, max_new_tokens=budgets[-1], batch=batches[-1])
    requests = [first] + rest + [late]
    assert [r.result().new_tokens[0] for r in requests] == alone
    assert set(first.forward_ids) & set(rest[0].forward_ids)
    assert set(first.forward_ids) & set(late.forward_ids)          # the late one joined the running batch
