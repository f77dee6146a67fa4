"""Region-parallel page reading with page-reading VLM folders (tiny random Florence-2, GOT-OCR2,
Qwen2-VL): `document.read(path, model=folder, regions=True)` reads the detected line crops of a page
as one batch; batching changes no token, and every exact decoder equals `ar` on every region. The
tiny Florence-2 and GOT-OCR2 answer nearly the same whatever the image (random weights); the tiny
Qwen2-VL answers each crop differently, so a row mixed up in the batch would show there."""
import pytest

FAMILIES = ("florence2", "got_ocr2", "qwen2_vl")
TOKENS = 8
LINES = ("Invoice 2024-117", "Total due: 48.20 EUR", "Thank you!")


def page(lines=LINES):
    """A white page with `lines` of printed text, one under the other."""
    from PIL import Image, ImageDraw, ImageFont

    from document import data
    img = Image.new("RGB", (260, 40 + 36 * len(lines)), "white")
    draw, font = ImageDraw.Draw(img), ImageFont.truetype(data.font_paths()[0], 20)
    for i, text in enumerate(lines):
        draw.text((14, 20 + 36 * i), text, font=font, fill="black")
    return img


@pytest.mark.parametrize("family", FAMILIES)
def test_regions_read_as_one_batch_equal_each_crop_alone(vlm_folders, family):
    import document
    from document.hf_reader import load_reader
    from document.reader import page_regions
    img = page()
    crops = [crop for _, crop in page_regions(img, "projection")]
    assert len(crops) == 3
    reader = load_reader(vlm_folders[family], max_new_tokens=TOKENS)
    alone = [reader([crop], decoder="ar").tokens[0] for crop in crops]
    assert alone == reader.reference(crops)                     # ar is the family's own generate
    assert family != "qwen2_vl" or len({tuple(t) for t in alone}) == 3
    for decoder in reader.decoders:
        options = {"draft": "self:1"} if decoder == "speculative" else {}
        res = reader.regions(crops, decoder=decoder, **options)
        assert res.tokens == alone, decoder                     # one ragged batch changes no token
    capped = reader.regions(crops, decoder="ngram", batch=2)    # a long page: batches of at most 2 crops
    assert capped.tokens == alone and len(capped.stats.steps_per_row()) == 3
    texts = [t.strip() for t in reader.vlm.tokenizer.batch_decode(alone, skip_special_tokens=True)]
    out = document.read(img, model=reader, regions=True, decoder="lookahead")
    boxes = [box for box, _ in page_regions(img, "projection")]
    assert [(ln.box, ln.text) for ln in out[0].lines] == [(b, t) for b, t in zip(boxes, texts) if t]
    assert out[0].text == "\n".join(t for t in texts if t)


def test_a_blank_page_reads_as_an_empty_page_and_the_cli_needs_a_model(vlm_folders, tmp_path, capsys):
    from PIL import Image

    import document
    from document.__main__ import main
    blank = Image.new("RGB", (200, 80), "white")
    out = document.read(blank, model=vlm_folders["florence2"], regions=True, max_new_tokens=TOKENS)
    assert len(out) == 1 and out[0].lines == [] and out[0].stats.num_forwards == 0
    path = tmp_path / "page.png"
    page().save(path)
    capsys.readouterr()
    assert main([str(path), "--out", str(tmp_path / "out"), "--regions"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model DIR" in err and "line by line" in err
    with pytest.raises(ValueError, match="model=FOLDER"):
        document.read(path, regions=True)
    assert not (tmp_path / "out").exists()


def test_cli_and_bench_read_regions(vlm_folders, tmp_path, capsys):
    import json

    from document.__main__ import main
    from document.bench import main as bench
    from document.hf_reader import load_reader
    from document.reader import read
    path = tmp_path / "in" / "page.png"
    path.parent.mkdir()
    page().save(path)
    folder = vlm_folders["got_ocr2"]
    assert main([str(path), "--out", str(tmp_path / "out"), "--model", str(folder), "--regions", "--decoder", "ngram",
                 "--max-new-tokens", str(TOKENS)]) == 0
    want = read(path, model=load_reader(folder, TOKENS), regions=True)[0]
    got = json.loads((tmp_path / "out" / "page.png.json").read_text())["pages"][0]["lines"]
    assert [(tuple(ln["box"]), ln["text"]) for ln in got] == [(ln.box, ln.text) for ln in want.lines]
    assert bench(["--model", str(folder), "--lines", "3", "--max-new-tokens", str(TOKENS), "--decoders", "ngram",
                  "--regions"]) == 0
    table = capsys.readouterr().out
    assert "| got_ocr2 ar whole page |" in table and "| got_ocr2 ngram regions |" in table
    assert bench(["--lines", "3", "--regions"]) == 2 and "--model DIR" in capsys.readouterr().err
