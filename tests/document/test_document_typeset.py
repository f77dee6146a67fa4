"""Typeset training lines (document.typeset) and growing a trained model's charset for them."""
import os
import random

import torch

from document import data, typeset
from document.model import OCRModel, default_config
from document.train import grow_charset, training_batch


def test_typeset_lines_are_training_texts_in_the_charset():
    samples = typeset.make_samples(24, seed=3)
    for s in samples:
        assert s.text and len(s.text) <= data.MAX_CHARS
        assert all(c in typeset.CHARSET for c in s.text)
        assert not data.is_held_out(s.text)
        assert min(s.image.size) >= 2 and data.to_model_input(s.image).shape == (data.HEIGHT, data.WIDTH)


def test_typeset_text_uses_the_typographic_characters():
    rng = random.Random(0)
    texts = [typeset.sample_text(rng) for _ in range(400)]
    used = set("".join(texts)) & set(typeset.EXTRA_CHARS)
    assert {"\u2022", "\u2019", "\u201c"} <= used          # bullets and curly quotes occur


def test_heldout_set_renders_in_the_base_fonts_only():
    families = {os.path.basename(os.path.dirname(p)) for p in data.font_paths()}
    assert families <= set(data.BASE_FONT_FAMILIES)
    assert set(typeset.font_paths()) - set(data.font_paths())      # training has fonts the held-out set never sees


def test_grown_charset_keeps_the_old_characters_logits():
    torch.manual_seed(0)
    old = OCRModel(default_config(data.CHARSET, 8, data.HEIGHT, data.WIDTH)).eval()
    grown = grow_charset(old, typeset.CHARSET).eval()
    assert grown.tokenizer.vocab_size == old.tokenizer.vocab_size + len(typeset.EXTRA_CHARS)
    px = torch.rand(2, 1, data.HEIGHT, data.WIDTH)
    ids = torch.tensor([old.tokenizer.encode("a, b;")] * 2)
    pos = torch.arange(ids.shape[1]).expand(2, -1)
    mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()[None, None].expand(2, 1, -1, -1)
    with torch.no_grad():
        a = old.decoder_logits(ids, pos, mask, old.encoder(px))
        b = grown.decoder_logits(ids, pos, mask, grown.encoder(px))
    assert torch.allclose(a, b[..., :a.shape[-1]], atol=1e-5)


def test_typeset_training_batch_mixes_both_generators():
    batch = training_batch(16, "typeset", random.Random(1))
    assert len(batch) == 16
    assert any(any(c in typeset.EXTRA_CHARS for c in s.text) for s in training_batch(64, "typeset", random.Random(2)))
