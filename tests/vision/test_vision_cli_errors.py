"""The vision CLIs meet a user's mistakes as one line and exit status 2, before any model loads and
without leaving a work folder behind: a decoder of another modality, a prompt or phrase of only spaces."""
import pytest


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: these mistakes must be caught before."""
    import vision
    monkeypatch.setattr(vision, "load_image_pipeline", lambda *a, **k: pytest.fail("loaded the image pipeline"))


@pytest.mark.parametrize("decoder", ["nosuch", "delay", "parallel_box"])
def test_generate_refuses_a_decoder_that_makes_no_images(no_model, tmp_path, capsys, decoder):
    from vision.generate import main
    assert main(["--labels", "star", "--decoder", decoder, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: unknown decoder {decoder!r} for images; choose one of: ar, ")
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []           # no .out.partial left behind


def test_generate_refuses_a_prompt_of_only_spaces(no_model, tmp_path, capsys):
    from vision.generate import main
    assert main(["--hf-model", str(tmp_path), "--prompt", "   ", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == 'error: --prompt is empty: describe the image, e.g. --prompt "a red apple"\n'


def test_process_video_refuses_a_phrase_of_only_spaces(tmp_path, capsys):
    from apps.process_video import main
    assert main([str(tmp_path / "clip.mp4"), "--out", str(tmp_path / "out"), "--phrase", "  "]) == 2
    assert capsys.readouterr().err.startswith("error: --phrase is empty: say what to find in every frame")
    assert not (tmp_path / "out").exists()


def test_generate_refuses_a_bad_option_value_before_the_job_starts(tmp_path, capsys):
    from vision.generate import main
    out = tmp_path / "out"
    assert main(["--labels", "circle", "--decoder", "zipar", "--option", "window=-1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "option window must be an integer in [1, 4096], got -1" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []                                      # no .out.partial left behind
