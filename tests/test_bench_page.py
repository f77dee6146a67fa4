"""BENCHMARKS.md and the quality.json files are written by the benches (`--write`): the page's marked
sections hold tables in the helper's format, each shipped quality.json in the format its bench writes,
and a bench's writer, fed its own result rows, writes both (here into copies)."""
import json
import shutil
from pathlib import Path

import pytest

from suite.runtime import bench_page
from suite.runtime.bench_page import COLUMNS, QUALITY_KEYS, check_quality_entry, section, write_section

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("text", "text-structured", "text-diffusion-gemma", "image", "video", "grounding", "document", "speech",
            "asr")
QUALITY = {"vision": ("image", "grounding", "video"), "document": ("document",), "speech": ("speech", "asr")}


def test_write_section_replaces_only_its_own_table(tmp_path):
    page = tmp_path / "B.md"
    page.write_text("# B\n<!-- bench:a -->\nold a\n<!-- /bench:a -->\nkept\n<!-- bench:b -->\nold b\n<!-- /bench:b -->\n")
    write_section("a", "new a", page)
    assert page.read_text() == "# B\n<!-- bench:a -->\nnew a\n<!-- /bench:a -->\nkept\n<!-- bench:b -->\nold b\n<!-- /bench:b -->\n"
    with pytest.raises(ValueError, match="has no section <!-- bench:c --> ... <!-- /bench:c -->: add those two lines"):
        write_section("c", "x", page)


@pytest.mark.parametrize("key", SECTIONS)
def test_each_section_of_the_page_is_there(key):
    assert section(key, ROOT / "BENCHMARKS.md")


@pytest.mark.parametrize("key", [k for k in SECTIONS if k != "text-diffusion-gemma"])
def test_each_headline_table_has_the_helpers_columns(key):
    lines = section(key, ROOT / "BENCHMARKS.md").splitlines()
    assert lines[0] == "| " + " | ".join(COLUMNS) + " |"
    assert all(line.count(" | ") == len(COLUMNS) - 1 for line in lines[2:]), key


@pytest.mark.parametrize("domain", sorted(QUALITY))
def test_each_shipped_quality_entry_is_in_the_benches_format(domain):
    data = json.loads((ROOT / domain / "quality.json").read_text())
    assert set(data) - {"_about"} == set(QUALITY[domain])
    for modality, entries in data.items():
        if modality != "_about":
            for name, entry in entries.items():
                check_quality_entry(entry, f"{domain}/quality.json {modality}/{name}")
                assert entry["table"].split(", ")[0] == "BENCHMARKS.md" and len(entry["date"]) == 10


def copies(tmp_path, domain):
    page = tmp_path / "BENCHMARKS.md"
    shutil.copy(ROOT / "BENCHMARKS.md", page)
    folder = tmp_path / domain
    folder.mkdir()
    shutil.copy(ROOT / domain / "quality.json", folder / "quality.json")
    return page, folder


def same_format(written: Path, shipped: Path, modality: str, names) -> None:
    new, old = json.loads(written.read_text())[modality], json.loads(shipped.read_text())[modality]
    for name in names:
        assert set(new[name]) == set(old[name]), (modality, name, sorted(new[name]), sorted(old[name]))
        assert new[name]["command"].startswith("python -m ")


def test_the_image_bench_writes_its_table_and_quality_in_the_shipped_format(tmp_path):
    from vision.bench import DEFAULT_DECODERS, write_page
    page, folder = copies(tmp_path, "vision")
    results = [{"decoder": d, "forwards": 256, "forwards_per_image": 256.0 / (i + 1), "forward_ratio": i + 1.0,
                "wall_speedup": 1.0 + i / 10, "class_accuracy": 0.9, "images": 20} for i, d in enumerate(DEFAULT_DECODERS)]
    write_page(results, "python -m vision.bench --seeds 2", page, folder)
    assert section("image", page).count("python -m vision.bench --seeds 2") == len(DEFAULT_DECODERS)
    assert section("video", page) == section("video", ROOT / "BENCHMARKS.md")         # other sections untouched
    same_format(folder / "quality.json", ROOT / "vision" / "quality.json", "image", ("zipar", "zipar_sjd", "lpd"))


def test_the_document_bench_writes_its_table_and_quality_in_the_shipped_format(tmp_path):
    from document.bench import DECODERS, write_page
    page, folder = copies(tmp_path, "document")
    rows = [{"reader": label, "CER %": "1.00", "lines/s": "50.0", "forwards/line": "4.00", "tokens/forward": "4.00",
             "forwards vs ar": "4.00x fewer", "same as ar %": "100.0"} for label, _, _ in DECODERS]
    write_page(rows, rows, "python -m document.bench --lines 20", 20, 20, page, folder)
    assert "python -m document.bench --lines 20" in section("document", page)
    same_format(folder / "quality.json", ROOT / "document" / "quality.json", "document", ("block_diffusion", "ctc_speculative"))


def test_the_speech_bench_writes_its_tables_and_quality_in_the_shipped_format(tmp_path):
    from speech.bench import write_page
    page, folder = copies(tmp_path, "speech")
    tts = [{"decoder": d, "forwards": 100, "frames": 50, "audio_s": 1.0, "forwards_per_audio_s": 100.0,
            "forwards_per_frame": 2.0, "fewer_forwards_than_flat": 2.0, "rtf": 0.5, "cer_ours": 0.2,
            "cer_pocketsphinx": None} for d in ("flat", "delay", "parallel", "local_maskgit", "stack")]
    asr = [{"decoder": d, "cer": 0.3, "decoder_forwards": 10, "rtf": 0.01, "speedup_vs_ar": 2.0,
            "exact_match_with_ar": 1.0} for d in ("ar", "ctc", "ctc_beam", "ctc_speculative")]
    write_page({"tts": tts, "tts_items": 8, "asr": asr, "asr_items": 20}, "python -m speech.bench --tts 8", "seed 0, T=0.7",
               page, folder)
    assert "python -m speech.bench --tts 8" in section("speech", page) and "`ctc_beam` | lossy" in section("asr", page)
    same_format(folder / "quality.json", ROOT / "speech" / "quality.json", "speech", ("parallel", "local_maskgit", "stack"))
    same_format(folder / "quality.json", ROOT / "speech" / "quality.json", "asr", ("ctc", "ctc_beam", "ctc_speculative"))


def test_the_text_bench_headline_is_the_helpers_table():
    from text.bench import headline
    rows = {("g", label): {"tokens": 64.0, "time": t, "forwards": f, "exact": 1.0, "prompts": 1.0}
            for label, t, f in (("ar", 4.0, 64.0), ("ngram", 2.0, 30.0), ("hf generate", 4.0, 64.0))}
    lines = headline(rows, ["ar", "ngram", "hf generate"], "python -m text.bench").splitlines()
    assert lines[0] == "| " + " | ".join(COLUMNS) + " |" and len(lines) == 4        # transformers' rows stay out
    assert "| `ngram` | in distribution | 2.00x | 30 (ar 64) |" in lines[3]


def test_the_page_is_this_modules_default():
    assert bench_page.PAGE == ROOT / "BENCHMARKS.md" and "metric" in QUALITY_KEYS
