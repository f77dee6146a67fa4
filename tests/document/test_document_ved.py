"""TrOCR-class checkpoints: a tiny random transformers VisionEncoderDecoderModel (ViT or DeiT
encoder, TrOCR or GPT-2 decoder, hidden 32) saved with its tokenizer and image processor to a
folder, loaded offline by `document.load_ocr(folder)`, read with `ar` (equal to transformers'
own `generate`) and with the lossless decoders (equal to `ar` token for token, fewer forwards)."""
import numpy as np
import pytest
import torch
from PIL import Image

import document

CHARS = " abcdefghijklmnopqrstuvwxyz0123456789.,:"


def char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {t: i for i, t in enumerate(specials + list(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="<mask>")


def tiny_checkpoint(folder, encoder: str, decoder: str) -> None:
    import transformers as tf
    tok = char_tokenizer()
    enc_kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  image_size=(32, 128), patch_size=8, num_channels=3, initializer_range=0.2)
    enc_cfg = tf.ViTConfig(**enc_kw) if encoder == "vit" else tf.DeiTConfig(**enc_kw)
    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    if decoder == "trocr":
        dec_cfg = tf.TrOCRConfig(d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
                                 max_position_embeddings=64, use_learned_position_embeddings=True, init_std=0.2,
                                 decoder_start_token_id=tok.eos_token_id, **ids)
    else:
        dec_cfg = tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True,
                                initializer_range=0.2, **ids)
    cfg = tf.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc_cfg, dec_cfg)
    cfg.decoder_start_token_id = tok.eos_token_id if decoder == "trocr" else tok.bos_token_id
    cfg.pad_token_id, cfg.eos_token_id = tok.pad_token_id, tok.eos_token_id
    torch.manual_seed(0)
    model = tf.VisionEncoderDecoderModel(config=cfg).eval()
    model.generation_config.max_length = 40
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    tf.ViTImageProcessor(size={"height": 32, "width": 128}, image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(folder)


def lines(n: int = 6):
    """Noise images of several widths: a random encoder tells them apart better than drawn text."""
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (24, 60 + 30 * i, 3), dtype=np.uint8)) for i in range(n)]


@pytest.fixture(scope="module", params=[("vit", "trocr"), ("deit", "gpt2")], ids=lambda p: "+".join(p))
def ved_ocr(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ved")
    tiny_checkpoint(folder, *request.param)
    return document.load_ocr(folder)


def test_ar_equals_transformers_generate(ved_ocr):
    images = lines()
    res = ved_ocr(images, decoder="ar", batch_size=3)
    a = ved_ocr.adapter
    gen = a.model.generate(pixel_values=ved_ocr.pixels(images), do_sample=False, num_beams=1,
                           max_length=a.config.max_length)
    want = [a.decode_text([t for t in row[1:].tolist() if t not in (a.config.pad_token_id, *a.config.eos_token_ids)])
            for row in gen]
    assert res.texts == want
    assert len(set(res.texts)) > 1                          # the lines are read differently


def test_lossless_decoders_equal_ar_with_fewer_forwards(ved_ocr):
    images = lines()
    ar = ved_ocr(images, decoder="ar", batch_size=3)
    # s2d2 accepts different draft lengths per row: holes in the cache, ragged positions
    s2d2 = ved_ocr(images, decoder="s2d2", block_size=4, route_threshold=0.0, batch_size=3)
    assert s2d2.tokens == ar.tokens
    assert s2d2.stats.forwards_per_line < ar.stats.forwards_per_line
    prior = ved_ocr(images, decoder="ngram_prior", prior_texts=ar.texts, batch_size=3)
    assert prior.tokens == ar.tokens
    assert prior.stats.forwards_per_line < ar.stats.forwards_per_line / 2
    jacobi = ved_ocr(images, decoder="jacobi", batch_size=3)
    assert jacobi.tokens == ar.tokens
    bd1 = ved_ocr(images, decoder="block_diffusion", block_size=1)
    assert bd1.tokens == ar.tokens


def test_ctc_drafting_without_a_ctc_head_is_a_clear_error(ved_ocr):
    with pytest.raises(ValueError, match="has none; choose ar"):
        ved_ocr(lines(1), decoder="ctc_speculative")


def test_block_diffusion_runs_and_commits_blocks(ved_ocr):
    images = lines(3)
    ar = ved_ocr(images, decoder="ar")
    bd = ved_ocr(images, decoder="block_diffusion", block_size=4, threshold=0.0)   # lossy: fills every slot
    assert bd.stats.forwards_per_line < ar.stats.forwards_per_line / 2


def test_not_a_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "vision-encoder-decoder"}')
    with pytest.raises(ValueError, match="VisionEncoderDecoder"):
        document.load_ocr(tmp_path)


def test_auto_equals_ar(ved_ocr, monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_COST", "1")           # as users run it: the cost curve measured (in a temporary cache)
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    images = lines()
    assert ved_ocr(images, decoder="auto", batch_size=3).tokens == ved_ocr(images, decoder="ar", batch_size=3).tokens
