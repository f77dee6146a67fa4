"""Typeset training lines (document.typeset), growing a trained model's charset for them, and its depth."""
import os
import random

import pytest
import torch

from document import data, typeset
from document.model import OCRModel, default_config
from document.train import grow_charset, grow_depth, training_batch


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


def test_a_deepened_model_computes_what_it_computed_before_training():
    torch.manual_seed(0)
    old = OCRModel(default_config(data.CHARSET, 8, data.HEIGHT, data.WIDTH)).eval()
    grown = grow_depth(old, [1, 2, 2, 2], 4).eval()
    assert grown.cfg["encoder"]["layers"] == [1, 2, 2, 2] and grown.cfg["decoder"]["n_layer"] == 4
    assert sum(p.numel() for p in grown.parameters()) > sum(p.numel() for p in old.parameters())
    px = torch.rand(2, 1, data.HEIGHT, data.WIDTH)
    ids = torch.tensor([old.tokenizer.encode("a, b;")] * 2)
    pos = torch.arange(ids.shape[1]).expand(2, -1)
    mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()[None, None].expand(2, 1, -1, -1)
    with torch.no_grad():
        assert torch.allclose(old.decoder_logits(ids, pos, mask, old.encoder(px)),
                              grown.decoder_logits(ids, pos, mask, grown.encoder(px)), atol=1e-5)
    with pytest.raises(ValueError, match="grows only"):
        grow_depth(grown, [1, 1, 1, 1], None)


def test_typeset_training_batch_mixes_both_generators():
    batch = training_batch(16, "typeset", random.Random(1))
    assert len(batch) == 16
    assert any(any(c in typeset.EXTRA_CHARS for c in s.text) for s in training_batch(64, "typeset", random.Random(2)))


def test_a_line_is_set_word_by_word_on_one_baseline():
    from PIL import Image, ImageDraw

    from document import line_layout
    text = "Parallel decoding reads faster"
    path = next(p for p in typeset.font_paths() if os.path.basename(p) == "lmroman10-regular.otf")   # fonts-lmodern
    faces, spaces = set(), []
    for seed in range(60):
        pieces = line_layout.set_line(text, path, 30, random.Random(seed), typeset.font_paths(), typeset.missing_glyphs,
                                      typeset.LIGATURES)
        drawn = "".join(s for _, _, s, _ in pieces)
        for letters, glyph in typeset.LIGATURES:
            drawn = drawn.replace(glyph, letters)
        assert drawn.upper() == text.replace(" ", "").upper()        # the label's letters, small caps in capitals
        faces |= {f.path for *_, f in pieces}
        spaces.append(max(b[0] - (a[0] + a[3].getlength(a[2])) for a, b in zip(pieces, pieces[1:])))   # a word gap
        canvas = Image.new("L", (int(line_layout.width(pieces)) + 20, 80), 255)
        box = line_layout.draw(ImageDraw.Draw(canvas), pieces, 10, 55, 0)
        assert box[3] <= 55 + 15 and box[1] >= 55 - 40                # all pieces on the baseline at y = 55
    assert len(faces) >= 2                                           # a run in another face of the family
    assert min(spaces) > 0 and max(spaces) > 1.25 * min(spaces)      # justified lines stretch their spaces


def test_font_families_group_the_faces_of_one_typeface():
    from document.line_layout import family_key, variants
    paths = ("/f/lmroman10-regular.otf", "/f/lmroman10-italic.otf", "/f/lmroman10-bold.otf", "/f/lmsans10-regular.otf",
             "/g/FreeSerif.ttf", "/g/FreeSerifBoldItalic.ttf", "/g/DejaVuSans-Bold.ttf")
    assert family_key(paths[1]) == family_key(paths[0]) != family_key(paths[3])
    assert set(variants(paths[0], paths)) == {paths[1], paths[2]}
    assert variants("/g/FreeSerif.ttf", paths) == ["/g/FreeSerifBoldItalic.ttf"]
    assert variants("/g/DejaVuSans-Bold.ttf", paths) == []


def test_man_page_lines_are_never_the_bench_or_development_pages():
    from document import bench_real, calibrate, devset
    held = set(bench_real.MAN_PAGES) | set(calibrate.VALIDATION_MAN_PAGES) | {n for n, _ in devset.DEV_MAN_PAGES}
    assert not held & set(typeset.TRAIN_MAN_PAGES)
    assert all(len(line) <= data.MAX_CHARS for line in typeset.man_lines())
