"""README.md as a user reads it: every Python block runs verbatim (its placeholders defined in the block
itself; a block marked `<!-- readme-test: gpu ... -->` runs where CUDA is, one marked
`<!-- readme-test: server -->` beside `python -m apps.serve`'s app, its default address swapped for a free port
that the test's own server holds), and what it says of the tabs' starting decoders holds."""
import contextlib
import re
import threading
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SERVED = "127.0.0.1:8000"          # `python -m apps.serve`'s default address, as the server blocks name it
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.S)


def blocks() -> list[tuple[int, str, str]]:
    """(line, marker, code) of each ```python block."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start("code")), m.group("mark") or "", m.group("code"))
            for m in BLOCK.finditer(text)]


@pytest.mark.parametrize("line, mark, code", blocks(), ids=lambda v: f"line{v}" if isinstance(v, int) else "")
def test_a_readme_block_runs_verbatim(line, mark, code, tmp_path, monkeypatch):
    if mark.startswith("gpu"):
        import torch
        if not torch.cuda.is_available():
            pytest.skip(f"README.md line {line}: needs a GPU ({mark})")
    monkeypatch.chdir(tmp_path)                       # what a block writes lands here
    with served() if mark.startswith("server") else contextlib.nullcontext() as address:
        if address is not None:                       # port 8000 may be another process's (a second test run)
            assert SERVED in code, f"README.md line {line}: a server block that does not name {SERVED}"
            code = code.replace(SERVED, address)
        exec(compile(code, f"README.md, block at line {line}", "exec"), {"__name__": "__readme__"})


@contextlib.contextmanager
def served():
    """The embedded model's OpenAI-compatible app, as `python -m apps.serve` serves it, on a free port of
    127.0.0.1: yields its address."""
    import uvicorn

    import text
    from apps.serve import build_app
    server = uvicorn.Server(uvicorn.Config(build_app(text.load(progress=False)), host="127.0.0.1", port=0,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    assert server.started, "the app did not start"
    try:
        yield f"127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_readme_finds_every_python_block():
    assert len(blocks()) == README.read_text(encoding="utf-8").count("```python")


def test_each_tab_starts_lossless_or_the_readme_names_the_exception():
    import suite
    from document.reader import DEFAULT_DECODER as DOCUMENT
    from speech.asr import DEFAULT_DECODER as ASR
    from speech.tts import DEFAULT_DECODER as TTS
    from text.generator import DEFAULT_DECODER as TEXT
    from vision.grounding.pipeline import DEFAULT_DECODER as GROUNDING
    from vision.pipeline import DEFAULT_DECODER as IMAGE
    from vision.video.pipeline import DEFAULT_DECODER as VIDEO
    text = " ".join(README.read_text(encoding="utf-8").split())
    claim = text[text.index("Each tab starts on its fastest lossless decoder"):]
    claim = claim[:claim.index(". An")]                # the sentence and its exceptions
    for name in (TEXT, IMAGE, VIDEO, GROUNDING, DOCUMENT, TTS, ASR):
        if suite.decoder_entry(name).guarantee == "lossy":
            assert f"lossy `{name}`" in claim, (name, claim)
