"""`python -m text --model <vision-language folder> --image PATH`: the CLI answers about the image what
`text.load(folder)` (text.vlm_chat.VLMChat) answers, with the same summary line and --compare; a wrong
pairing of folder and --image, or a missing or corrupt image file, exits 2 with one line naming the fix."""
import pytest

import tiny_vlm
from text.__main__ import main, parse_args


@pytest.fixture(scope="module")
def paligemma_dir(tmp_path_factory, embedded_folder):
    return tiny_vlm.paligemma(embedded_folder, tmp_path_factory.mktemp("paligemma"))


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    path = tmp_path_factory.mktemp("images") / "photo.png"
    tiny_vlm.images(1)[0].save(path)
    return path


def test_cli_answers_about_the_image_like_the_library(paligemma_dir, photo, capsys):
    import text
    from PIL import Image
    want = text.load(paligemma_dir).generate("caption en", image=Image.open(photo).convert("RGB"), decoder="ngram",
                                             max_new_tokens=8)
    argv = ["caption en", "--model", str(paligemma_dir), "--image", str(photo), "--decoder", "ngram",
            "--max-new-tokens", "8", "--compare"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out == want.text + "\n"
    summary, = err.splitlines()
    assert summary.startswith(f"{want.stats.num_new_tokens} tokens in {want.stats.num_forwards} forwards")
    assert "x vs ar (" in summary and summary.endswith("same text as ar")     # ngram is exact when greedy


def test_a_vision_language_folder_defaults_to_a_decoder_it_runs(paligemma_dir, tiny_dir):
    """auto (the causal LMs' default) does not run on a vision-language family; ar does."""
    assert parse_args(["hi", "--model", str(paligemma_dir)]).decoder == "ar"
    assert parse_args(["hi", "--model", str(tiny_dir)]).decoder == parse_args(["hi"]).decoder == "auto"


@pytest.mark.parametrize("case, message", [
    ("image to an LM", r"^error: --image needs a vision-language --model folder \(florence2, .*paligemma.*\); .*tiny-llama"
                       r".* is a causal LM that reads no images: drop --image$"),
    ("image to the embedded model", r"^error: --image needs .*; the embedded SmolLM2 is a causal LM .*: drop --image$"),
    ("no image to a VLM", r"^error: .*paligemma.* holds a vision-language model \(paligemma\): pass --image PATH"),
    ("missing image", r"^error: no image file '.*nowhere\.png': pass an existing image"),
    ("corrupt image", r"^error: cannot read the image '.*broken\.png' \(UnidentifiedImageError\): pass a PNG"),
    ("decoder it cannot run", r"^error: decoder 'auto' does not run on paligemma; use one of: ar, jacobi"),
    ("a batch", r"^error: --image answers one prompt: pass the prompt itself, without --input"),
])
def test_bad_image_or_folder_exits_2_with_one_line(paligemma_dir, tiny_dir, photo, tmp_path, capsys, case, message):
    import re
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hi\n")
    vlm = ["--model", str(paligemma_dir)]
    argv = {"image to an LM": ["hi", "--model", str(tiny_dir), "--image", str(photo)],
            "image to the embedded model": ["hi", "--image", str(photo)],
            "no image to a VLM": ["hi", *vlm],
            "missing image": ["hi", *vlm, "--image", str(tmp_path / "nowhere.png")],
            "corrupt image": ["hi", *vlm, "--image", str(broken)],
            "decoder it cannot run": ["hi", *vlm, "--image", str(photo), "--decoder", "auto"],
            "a batch": ["--input", str(prompts), *vlm, "--image", str(photo)]}[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(message, err.rstrip("\n")), err
    assert err.count("\n") == 1 and "Traceback" not in err
