"""Grounding with transformers families (Florence-2, PaliGemma, Kosmos-2) on tiny random configs
saved with their processors: every decoder equals the family's own greedy generate, boxes are
parsed in each family's convention, bad folders and settings fail clearly."""
import pytest

import tiny_vlm

FAMILIES = ("florence2", "paligemma", "kosmos-2")
QUERIES = ["a cat", "the small red dog"]


@pytest.fixture(scope="session")
def folders(tmp_path_factory, embedded_folder):
    return {f: tiny_vlm.BUILDERS[f](embedded_folder, tmp_path_factory.mktemp(f)) for f in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_decoder_equals_the_family_generate(folders, family):
    import vision
    from vision.hf_grounding import prompt
    grd = vision.load_grounding_pipeline(folders[family])
    assert grd.family == family and "ar" in grd.decoders and "ngram" in grd.decoders
    grd.max_new_tokens = 16
    images = tiny_vlm.images(2)
    want = [grd.vlm.reference([im], [prompt(family, q)], max_new_tokens=grd.max_new_tokens)[0]
            for im, q in zip(images, QUERIES)]
    for decoder in grd.decoders:
        options = {"draft": "self:1"} if decoder == "speculative" else {}
        res = grd(images, QUERIES, decoder=decoder, **options)          # one ragged batch
        assert [r.tokens for r in res] == want, decoder
    assert grd(images[1], QUERIES[1]).tokens == want[1]                 # one image, batch 1
    if family != "kosmos-2":      # the tiny heads favour location tokens: boxes come out
        assert res[0].boxes and all(0 <= v <= 60 for b in res[0].boxes for v in b)


def test_kosmos_refuses_tree_drafts(folders):
    import vision
    grd = vision.load_grounding_pipeline(folders["kosmos-2"])
    assert "lookahead" not in grd.decoders
    with pytest.raises(ValueError, match="lookahead"):
        grd(tiny_vlm.images(1)[0], "a cat", decoder="lookahead")


@pytest.mark.parametrize("decoder", ["parallel_box", "hybrid"])
def test_box_decoders_are_refused_with_the_reason(folders, decoder):
    import vision
    grd = vision.load_grounding_pipeline(folders["paligemma"])
    with pytest.raises(ValueError, match="MASK slots.*ar"):
        grd(tiny_vlm.images(1)[0], "a cat", decoder=decoder)


def test_boxes_parse_in_each_family_convention():
    from vision.hf_grounding import parse_boxes
    boxes, labels = parse_boxes("florence2", "cat<loc_0><loc_499><loc_999><loc_1000>", 200, 100)
    assert labels == ["cat"] and boxes == [(0.1, 49.95, 199.9, 100.05)]
    boxes, labels = parse_boxes("paligemma", "<loc0256><loc0512><loc0768><loc1024> cat ; <loc0000>"
                                "<loc0000><loc0512><loc0512> dog", 100, 200)
    assert labels == ["cat", "dog"] and boxes[0] == (50.0, 50.0, 100.0, 150.0) and boxes[1] == (0.0, 0.0, 50.0, 100.0)
    text = "<phrase> a cat</phrase><object><patch_index_0000><patch_index_0015></object>"
    boxes, labels = parse_boxes("kosmos-2", text, 40, 80, patches=16)
    assert labels == ["a cat"] and boxes == [(5.0, 10.0, 35.0, 70.0)]      # cell centres of a 4x4 grid


def test_generation_settings_are_honoured(folders, tmp_path):
    """Forced BOS, suppressed and begin-suppressed tokens and a minimum length in the folder's
    generation config: every decoder still equals the family's own generate."""
    import shutil
    from transformers import GenerationConfig
    from vision.hf_grounding import load_hf_grounding, prompt
    folder = tmp_path / "florence"
    shutil.copytree(folders["florence2"], folder)
    gen = GenerationConfig.from_pretrained(folder)
    base = load_hf_grounding(folder, max_new_tokens=12)
    first = base.vlm.reference(tiny_vlm.images(1), [prompt("florence2", "a cat")], max_new_tokens=12)[0]
    gen.forced_bos_token_id, gen.suppress_tokens, gen.begin_suppress_tokens = 0, [first[1]], [first[2]]
    gen.min_new_tokens = 20
    gen.save_pretrained(folder)
    grd = load_hf_grounding(folder, max_new_tokens=24)
    want = grd.vlm.reference(tiny_vlm.images(1), [prompt("florence2", "a cat")], max_new_tokens=24)[0]
    assert want[0] == 0 and first[1] not in want
    for decoder in ("ar", "ngram", "lookahead"):
        assert grd(tiny_vlm.images(1)[0], "a cat", decoder=decoder).tokens == want


def test_settings_it_cannot_honour_are_refused_naming_them(folders, tmp_path):
    import shutil
    from transformers import GenerationConfig
    from vision.hf_grounding import load_hf_grounding
    folder = tmp_path / "beams"
    shutil.copytree(folders["paligemma"], folder)
    gen = GenerationConfig.from_pretrained(folder)
    gen.num_beams, gen.no_repeat_ngram_size = 3, 3
    gen.save_pretrained(folder)
    with pytest.raises(ValueError, match="num_beams=3.*no_repeat_ngram_size=3"):
        load_hf_grounding(folder)
    grd = load_hf_grounding(folder, generation={"num_beams": 1, "no_repeat_ngram_size": 0}, max_new_tokens=4)
    assert grd(tiny_vlm.images(1)[0], "a cat").tokens


def test_bad_folders_fail_clearly(folders, tmp_path):
    import shutil
    import vision
    from tinymodels import tiny_model
    bare = tmp_path / "no-processor"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(folders["paligemma"] / name, bare / name)
    with pytest.raises(ValueError, match="processor"):
        vision.load_grounding_pipeline(bare)
    llama = tmp_path / "llama"
    tiny_model("llama").save_pretrained(llama)
    with pytest.raises(ValueError, match="known: .*Florence2ForConditionalGeneration"):
        vision.load_grounding_pipeline(llama)


def test_text_load_takes_a_vision_language_folder(folders):
    """text.load(folder) of an image-text-to-text family chats about an image, exact against its generate."""
    import text
    chat = text.load(folders["paligemma"])
    image = tiny_vlm.images(1)[0]
    want = chat.vlm.reference([image], ["caption en"], max_new_tokens=8)[0]
    for decoder in ("ar", "ngram"):
        assert chat.generate("caption en", image=image, decoder=decoder, max_new_tokens=8).tokens == want
    with pytest.raises(ValueError, match="image="):
        chat.generate("caption en")


def test_cli_ground_and_bench_take_a_model_folder(folders, tmp_path, capsys):
    import json

    from vision.bench import main as bench
    from vision.ground import main as ground
    image = tmp_path / "a.png"
    tiny_vlm.images(1)[0].save(image)
    assert ground([str(image), "a cat", "--model", str(folders["paligemma"]), "--decoder", "ngram",
                   "--out", str(tmp_path / "b.png")]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["decoder"] == "ngram" and record["forwards"] >= 1 and (tmp_path / "b.png").is_file()
    assert bench(["grounding", "--model", str(folders["florence2"]), "--n", "2", "--decoders", "ar", "ngram"]) == 0
    table = capsys.readouterr().out
    assert "| ar |" in table and "| ngram |" in table and "same_as_ar" in table
    assert ground([str(image), "a cat", "--model", str(folders["paligemma"]), "--decoder", "hybrid"]) == 2
    assert "MASK slots" in capsys.readouterr().err


def test_cli_unknown_family_lists_the_known_ones(tmp_path, capsys):
    from vision.ground import main as ground
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "bark"}')
    image = tmp_path / "a.png"
    tiny_vlm.images(1)[0].save(image)
    assert ground([str(image), "a cat", "--model", str(tmp_path / "m")]) == 2
    assert "florence2" in capsys.readouterr().err


@pytest.mark.parametrize("family", FAMILIES)
def test_concurrent_requests_share_forwards_and_get_their_alone_tokens(folders, family):
    from suite.vlm import load_vlm
    from vision.hf_grounding import prompt
    vlm = load_vlm(folders[family])
    queries = QUERIES + ["a bird on a wire"]
    batches = [vlm.inputs([im], [prompt(family, q)]) for im, q in zip(tiny_vlm.images(3), queries)]
    tiny_vlm.requests_share_forwards(vlm, batches, [12, 5, 9])
