"""Whole-page reading with transformers page-reading VLMs (GOT-OCR2, Qwen2-VL, Florence-2 <OCR>)
on tiny random configs saved with their processors: `document.read(path, model=folder)` with every
exact chain decoder equals the family's own greedy generate."""
import pytest

import tiny_vlm

FAMILIES = ("got_ocr2", "qwen2_vl", "florence2")
TOKENS = 12


@pytest.mark.parametrize("family", FAMILIES)
def test_read_with_a_model_folder_equals_its_generate(vlm_folders, family, tmp_path):
    import document
    from document.hf_reader import load_reader
    pages = tiny_vlm.images(2, size=(60, 80))
    path = tmp_path / "page.png"
    pages[0].save(path)
    reader = load_reader(vlm_folders[family], max_new_tokens=TOKENS)
    want = reader.reference(pages)
    assert {"ar", "ngram", "lookahead", "speculative", "jacobi"} <= set(reader.decoders)
    for decoder in reader.decoders:
        options = {"draft": "self:1"} if decoder == "speculative" else {}
        assert reader(pages, decoder=decoder, **options).tokens == want, decoder      # one ragged batch
    out = document.read(path, model=vlm_folders[family], decoder="ngram", max_new_tokens=TOKENS)
    text = reader.vlm.tokenizer.decode(want[0], skip_special_tokens=True).strip()
    assert len(out) == 1 and out[0].text == "\n".join(line for line in text.splitlines() if line.strip())


def test_a_model_that_reads_no_pages_is_refused(tmp_path):
    import document
    from tinymodels import tiny_model
    tiny_model("llama").save_pretrained(tmp_path / "llama")
    page = tiny_vlm.images(1)[0]
    with pytest.raises(ValueError, match="known: .*GotOcr2ForConditionalGeneration"):
        document.read(page, model=tmp_path / "llama")


def test_cli_and_bench_take_a_model_folder(vlm_folders, tmp_path, capsys):
    import json

    from document.__main__ import main
    from document.bench import main as bench
    page = tmp_path / "in" / "page.png"
    page.parent.mkdir()
    tiny_vlm.images(1, size=(60, 80))[0].save(page)
    folder = vlm_folders["got_ocr2"]
    assert main([str(page.parent), "--out", str(tmp_path / "out"), "--model", str(folder), "--decoder", "ngram",
                 "--max-new-tokens", str(TOKENS)]) == 0
    want = document_text(folder, page)
    assert json.loads((tmp_path / "out" / "page.png.json").read_text())["pages"][0]["lines"] is not None
    assert (tmp_path / "out" / "page.png.txt").read_text().strip() == want
    assert bench(["--model", str(folder), "--lines", "2", "--pages-batch", "2", "--max-new-tokens", str(TOKENS),
                  "--decoders", "ngram"]) == 0
    table = capsys.readouterr().out
    assert "| got_ocr2 ar |" in table and "| got_ocr2 ngram |" in table and "same as ar %" in table
    assert bench(["--model", str(tmp_path / "in")]) == 2             # not a model folder: a clear error
    assert "config.json" in capsys.readouterr().err


def document_text(folder, page):
    """What the family's own generate reads on the page, as document.read writes it."""
    from PIL import Image

    from document.hf_reader import load_reader
    reader = load_reader(folder, max_new_tokens=TOKENS)
    text = reader.vlm.tokenizer.decode(reader.reference([Image.open(page).convert("RGB")])[0], skip_special_tokens=True)
    return "\n".join(line for line in text.strip().splitlines() if line.strip())


@pytest.mark.parametrize("family", ["got_ocr2", "qwen2_vl"])
def test_concurrent_pages_share_forwards_and_get_their_alone_tokens(vlm_folders, family):
    from document.hf_reader import load_reader
    reader = load_reader(vlm_folders[family], max_new_tokens=TOKENS)
    pages = tiny_vlm.images(3, size=(60, 80))
    tiny_vlm.requests_share_forwards(reader.vlm, [reader.batch([page]) for page in pages], [12, 5, 9])
