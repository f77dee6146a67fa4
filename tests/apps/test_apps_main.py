"""`python -m apps` without a browser: tab discovery, command-line errors, and the helpers every tab
uses (decoder options, sampling settings, errors turned into readable messages)."""
import socket
import subprocess
import sys
import types
from pathlib import Path

import gradio as gr
import pytest

import apps.__main__ as apps_main
from apps.errors import guarded
from apps.inputs import sampling_args
from apps.pipelines import Shared
from apps.summary import Guarantee, guarantee_html, speed_html, summary_html
from suite.runtime.options import parse_options, ui_options
from apps.text import chunk_colours, Chunk, decoder_choices, default_decoder, default_options

ROOT = Path(__file__).resolve().parents[2]


def run_apps(*args):
    return subprocess.run([sys.executable, "-m", "apps", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_apps_unknown_tab_is_a_clear_error():
    out = run_apps("--tabs", "text,audio")          # video is a tab now: audio is not
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: unknown tab audio; choose from text, image, video")


def test_apps_busy_port_is_a_clear_error_before_loading_models():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = run_apps("--port", str(port))
    assert out.returncode == 2
    assert f"error: cannot serve on 127.0.0.1:{port}" in out.stderr and "pass a free --port" in out.stderr


def test_apps_missing_modality_is_left_out_with_one_line(monkeypatch, capsys):
    ok = types.ModuleType("apps_fake_ok")
    ok.load_pipeline = lambda: "pipe"
    broken = types.ModuleType("apps_fake_broken")
    broken.load_pipeline = lambda: (_ for _ in ()).throw(FileNotFoundError("no weights in vision/weights/prior"))
    monkeypatch.setitem(sys.modules, "apps_fake_ok", ok)
    monkeypatch.setitem(sys.modules, "apps_fake_broken", broken)
    buggy = types.ModuleType("apps_fake_buggy")
    buggy.load_pipeline = lambda: {}["slot"]
    monkeypatch.setitem(sys.modules, "apps_fake_buggy", buggy)
    monkeypatch.setattr(apps_main, "TABS", [apps_main.Tab("ok", "Ok", "apps_fake_ok"),
                                            apps_main.Tab("broken", "Broken", "apps_fake_broken"),
                                            apps_main.Tab("gone", "Gone", "apps_fake_not_written_yet"),
                                            apps_main.Tab("buggy", "Buggy", "apps_fake_buggy")])
    loaded = apps_main.load_tabs()
    assert [(tab.key, pipeline) for tab, _, pipeline in loaded] == \
        [("ok", "pipe"), ("buggy", apps_main.Broken("loading it failed: KeyError: 'slot'"))]
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[:2] == ["apps: no Broken tab: FileNotFoundError: no weights in vision/weights/prior",
                         "apps: no Gone tab: ModuleNotFoundError: No module named 'apps_fake_not_written_yet'"]
    assert "apps: Buggy tab failed to load: KeyError: 'slot'" in lines     # a bug keeps its tab, with the error


def test_a_tab_that_fails_to_build_shows_its_error_in_the_tab():
    broken = types.SimpleNamespace(build_demo=lambda pipeline: 1 / 0)
    app, titles = apps_main.build_app([(apps_main.Tab("b", "B", "x"), broken, "pipe")])
    assert titles == ["B"]
    shown = [b.value for b in app.blocks.values() if isinstance(b, gr.HTML)]
    assert any("The B tab is not available: building it failed: ZeroDivisionError" in v for v in shown)


def test_gradio_server_environment_sets_host_and_port(monkeypatch):
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    assert apps_main.parse_args([]).host == "0.0.0.0"
    assert apps_main.parse_args(["--host", "127.0.0.1"]).host == "127.0.0.1"      # a flag still overrides
    out = subprocess.run([sys.executable, "-m", "apps"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "GRADIO_SERVER_PORT": "seventy"})
    assert out.returncode == 2 and "GRADIO_SERVER_PORT must be a port number, got 'seventy'" in out.stderr


def test_apps_registry_lists_one_module_per_tab():
    assert [t.key for t in apps_main.TABS] == ["text", "image", "video", "grounding", "document", "speech"]
    assert all(t.module == f"apps.{t.key}" for t in apps_main.TABS)


def test_text_decoder_choices_come_from_the_registry():
    import suite
    assert decoder_choices() == suite.list_decoders("text")
    assert {"ar", "jacobi", "sjd", "mc_sjd", "lookahead", "ngram", "speculative"} <= set(decoder_choices())
    assert default_decoder() in ("auto", "ngram")           # the fastest lossless one
    assert suite.decoder_entry(default_decoder()).guarantee != "lossy"
    assert default_options("speculative") == "draft=self:8, num_draft=4"   # draft_model (an object) is not typed
    assert default_options("ar") == ""
    assert "draft_model" not in ui_options("speculative")


def test_decoder_options_are_typed_by_their_defaults():
    assert parse_options("ngram", "max_ngram=3, adaptive=false  num_draft=6") == \
        {"max_ngram": 3, "adaptive": False, "num_draft": 6}
    import vision.pipeline  # noqa: F401  (registers zipar)
    assert parse_options("zipar", "adaptive=true max_window=5") == {"adaptive": True, "max_window": 5}
    assert parse_options("speculative", "draft=self:4") == {"draft": "self:4"}
    assert parse_options("jacobi", "") == {}
    with pytest.raises(ValueError, match="option window must be an integer, got 'big'"):
        parse_options("jacobi", "window=big")
    with pytest.raises(ValueError, match="decoder 'jacobi' does not take 'windw'; its options are: window, init"):
        parse_options("jacobi", "windw=4")
    with pytest.raises(ValueError, match="is not key=value"):
        parse_options("jacobi", "window")
    with pytest.raises(ValueError, match="option adaptive must be true or false"):
        parse_options("ngram", "adaptive=maybe")


def test_sampling_settings_from_widgets():
    assert sampling_args(0, 0, 1.0, 0) == {"temperature": 0.0, "top_k": None, "top_p": None, "seed": 0}
    assert sampling_args(0.7, 50, 0.9, None) == {"temperature": 0.7, "top_k": 50, "top_p": 0.9, "seed": None}
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sampling_args(-1, 0, 1.0, 0)


def test_errors_become_readable_gradio_errors():
    def bad_input():
        raise ValueError("empty prompt: pass some text")
        yield

    def bug():
        raise KeyError("slot")
        yield

    with pytest.raises(gr.Error) as e:
        list(guarded("text generation", bad_input)())
    assert e.value.message == "empty prompt: pass some text" and e.value.title == "Bad input"
    with pytest.raises(gr.Error) as e:
        list(guarded("text generation", bug)())
    assert e.value.message == "text generation failed: KeyError: 'slot'"


def test_errors_clear_the_outputs_hide_server_paths_and_keep_parameter_names():
    import inspect

    def read(path, decoder):
        yield ("page", "text")
        raise ValueError(f"cannot read {path}: not an image")

    run = guarded("page reading", read, blank=(None, ""), hide_paths=lambda path, *_: (path,))
    assert list(inspect.signature(run).parameters) == ["path", "decoder"]     # the API's parameter names
    seen = []
    with pytest.raises(gr.Error) as e:
        for view in run("/tmp/gradio/0a1b/notes.txt", "ar"):
            seen.append(view)
    assert seen == [("page", "text"), (None, "")]           # the good view, then the outputs cleared
    assert e.value.message == "cannot read notes.txt: not an image"


def test_every_result_says_what_it_is():
    import vision.pipeline  # noqa: F401
    lossy = guarantee_html("zipar", "image")
    assert "data-guarantee='lossy'" in lossy and "class accuracy 96.1%" in lossy and "BENCHMARKS.md" in lossy
    exact = guarantee_html("ngram", "text")
    assert "data-guarantee='in distribution'" in exact and "ps-quality" not in exact
    assert "data-guarantee='lossy'" in guarantee_html("ctc", "asr", {"ctc": Guarantee("lossy", "CTC head")})
    rows = [{"decoder": "ar", "tokens": 20, "forwards": 20, "tokens_per_forward": 1.0, "wall_time_s": 1.0,
             "tokens_per_second": 20.0, "done": True},
            {"decoder": "ngram", "tokens": 20, "forwards": 10, "tokens_per_forward": 2.0, "wall_time_s": 0.5,
             "tokens_per_second": 40.0, "done": True}]
    html = summary_html(rows, "text", "ngram", (True, "tokens", False))
    assert "data-same='true'" in html and ">same tokens as ar<" in html
    assert "<td data-stat='guarantee' style='padding:4px 10px'>in distribution</td>" in html
    assert "ps-speed" not in html                               # 2.00x: nothing to explain


def test_a_slower_decoder_says_why():
    rows = [{"decoder": "ar", "tokens": 20, "forwards": 20, "wall_time_s": 1.0, "speedup": 1.0},
            {"decoder": "lookahead", "tokens": 20, "forwards": 10, "wall_time_s": 2.0, "speedup": 0.5}]
    line = speed_html(rows, "lookahead")
    # each of its forwards cost 4x an ar forward (0.2 s against 0.05 s) and accepted 2 tokens: 2 / 4 = 0.5x
    assert "drafts cost cost(N) on this machine" in line and "took 4.00x an ar forward" in line
    assert "accepted 2.00 tokens per step (ar 1.00): 2.00 / 4.00 = 0.50x" in line
    assert speed_html(rows, "ar") == "" and speed_html(rows[:1], "lookahead") == ""
    rows[1]["speedup"] = 0.998                                  # the table shows 1.00x: nothing to explain
    assert speed_html(rows, "lookahead") == ""


def test_shared_pipeline_loads_once():
    calls = []
    shared = Shared(None, lambda: calls.append(1) or object())
    assert shared.get() is shared.get() and calls == [1]
    given = object()
    assert Shared(given, lambda: pytest.fail("must not load")).get() is given


def test_longer_accepted_chunks_stand_out():
    ones = {chunk_colours(Chunk("a", 1, 1, i), i)[0] for i in range(4)}
    assert len(ones) == 2                                       # single tokens alternate two greys
    shades = [chunk_colours(Chunk("a", n, 1, 0), 0)[0] for n in (2, 3, 5, 8, 20)]
    assert len(set(shades[:4])) == 4 and shades[4] == shades[3] and not ones & set(shades)


def test_throttled_never_repeats_the_final_view():
    """A repeated final update could leave the browser showing a broken picture (the Image tab)."""
    from apps.timing import throttled
    assert len(list(throttled(iter(range(5)), every_s=3600))) == 1      # only the end
    assert len(list(throttled(iter(range(3)), every_s=0))) == 3         # each step, no extra end
    assert list(throttled(iter([]), every_s=0)) == []


def test_a_stop_at_the_context_limit_says_so():
    from types import SimpleNamespace

    from apps.text import stop_note
    run = SimpleNamespace(done=True, decoder="ar", stream=SimpleNamespace(finish_reason="length", token_ids=[1] * 38))
    assert stop_note(run, 64, 8192) == ("ar stopped after 38 of 64 new tokens: the prompt and the answer filled the "
                                        "model's context (8192 tokens); shorten the prompt for a longer answer.")
    run.stream.finish_reason = "eos"                      # the model ended its answer: nothing to say
    assert stop_note(run, 64, 8192) == ""
    run.stream.finish_reason, run.stream.token_ids = "length", [1] * 64
    assert stop_note(run, 64, 8192) == ""                 # max new tokens reached


def test_a_value_outside_a_dropdowns_choices_is_one_line_not_a_logged_traceback():
    def build_demo(pipeline):
        with gr.Blocks() as demo:
            choice = gr.Dropdown(["ar", "zipar"], value="ar", label="Decoder")
            gr.Button().click(lambda d: d, choice, gr.Textbox())
        return demo
    app, _ = apps_main.build_app([(apps_main.Tab("d", "D", "x"), types.SimpleNamespace(build_demo=build_demo), "p")])
    dropdown = next(b for b in app.blocks.values() if isinstance(b, gr.Dropdown))
    assert dropdown.preprocess("ar") == "ar"
    with pytest.raises(gr.Error) as e:
        dropdown.preprocess("zipar; rm -rf /")
    assert not e.value.print_exception and e.value.message.startswith("Decoder: ")
