"""Issue 40, finding 1: the tabs' "Model folder" loads folders only under the server's models root
(`python -m apps --models-dir DIR` / $PARASUITE_MODELS_DIR; none: the field is hidden), checked after
symlinks; a refusal names the folder as the user typed it, never a server path, a file's contents or
a config's model_type; the process keeps a capped number of folders loaded, each of capped size."""
import json
import os

import gradio as gr
import pytest

import apps.__main__ as apps_main
from apps.folders import MAX_FOLDER_GB_ENV, MAX_FOLDERS_ENV, MODELS_DIR_ENV, models_root
from apps.pipelines import FolderPipelines, Shared, _Loaded

SECRET = "ssh-rsa AAAA-not-for-users"


class Untouchable:
    def __getattr__(self, name):
        raise AttributeError(name)


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A models root holding one good folder ('good', a config.json), beside server files outside it."""
    models = tmp_path / "srv-models"
    (models / "good").mkdir(parents=True)
    (models / "good" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "id_rsa").write_text(SECRET)
    (outside / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (models / "link-out").symlink_to(outside)                         # a folder that is a link out
    (models / "sneaky").mkdir()                                        # a folder whose config is a link out
    (models / "sneaky" / "config.json").symlink_to(outside / "id_rsa")
    (models / "notjson").mkdir()
    (models / "notjson" / "config.json").write_text(SECRET)
    (models / "oddtype").mkdir()
    (models / "oddtype" / "config.json").write_text(json.dumps({"model_type": SECRET}))
    monkeypatch.setenv(MODELS_DIR_ENV, str(models))
    monkeypatch.delenv(MAX_FOLDERS_ENV, raising=False)
    monkeypatch.delenv(MAX_FOLDER_GB_ENV, raising=False)
    _Loaded.entries.clear()
    yield models
    _Loaded.entries.clear()


def pipelines(load=None):
    return FolderPipelines(Shared("embedded", lambda: None), load or (lambda folder: ("loaded", folder)),
                           lambda: "llama, gpt2")


def refusal(folder: str, load=None) -> str:
    with pytest.raises(ValueError) as e:
        pipelines(load).get(folder)
    return str(e.value)


def assert_reveals_nothing(message: str, root, typed: str):
    assert typed.strip() in message or typed.strip()[:77] in message, message
    for secret in (str(root), str(root.parent), "/tmp", SECRET, "private", "id_rsa"):
        assert secret not in message.replace(typed.strip(), ""), (secret, message)


@pytest.mark.parametrize("typed", ["../private", "/etc", "~", "../../../../etc/passwd", "link-out", "sneaky",
                                   "nowhere", "good/config.json", ".", "notjson", "oddtype"])
def test_a_folder_outside_the_root_or_not_a_model_is_refused_revealing_nothing(root, typed):
    message = refusal(typed)
    assert_reveals_nothing(message, root, typed)
    if typed in ("notjson", "oddtype"):
        assert "save_pretrained" in message                          # names the fix
    if typed in ("../private", "/etc", "../../../../etc/passwd", "link-out"):
        assert "outside this server's models folder" in message and "folders there: good" in message


def test_a_folder_inside_the_root_loads_through_the_tabs_loader(root):
    assert pipelines().get(" good ") == ("loaded", str(root / "good"))
    assert pipelines().get("") == "embedded"


def test_a_loaders_error_shows_no_server_path(root):
    def load(folder):
        raise ValueError(f"no weights in {folder}/model.safetensors (cache: /home/someone/.cache/hf/x)")
    message = refusal("good", load)
    assert message.startswith("no weights in good/model.safetensors") and "/home" not in message, message
    assert str(root) not in message


def test_without_a_root_the_field_is_hidden_and_folders_are_refused(monkeypatch):
    import apps.text
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    assert models_root().path is None
    demo = apps.text.build_demo(Untouchable())
    field = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "text-model-folder")
    assert field.visible is False
    generate = next(f.fn for f in demo.fns.values() if f.api_name == "generate")
    with pytest.raises(gr.Error, match=r"this server loads no model folders .*--models-dir DIR"):
        list(generate("hi", False, "ar", "", 4, 0.0, 0, 1.0, 0, False, "/home", None))


def test_the_process_keeps_a_capped_number_of_folders_each_of_capped_size(root, monkeypatch):
    for name in ("a", "b", "c"):
        (root / name).mkdir()
        (root / name / "weights.bin").write_bytes(b"\0" * 4096)
    calls = []
    text_tab, speech_tab = (pipelines(lambda f: calls.append(f) or object()) for _ in range(2))
    monkeypatch.setenv(MAX_FOLDERS_ENV, "2")
    first = text_tab.get("a")
    speech_tab.get("b")
    assert text_tab.get("a") is first and len(calls) == 2
    speech_tab.get("c")                                   # a third folder, in any tab: the oldest goes
    assert len(_Loaded.entries) == 2
    speech_tab.get("b")
    assert text_tab.get("a") is not first and len(calls) == 5
    monkeypatch.setenv(MAX_FOLDER_GB_ENV, str(2048 / 2**30))
    message = refusal("c")
    assert "holds 0.0 GB of files, more than this server loads per folder" in message and "--max-folder-gb" in message


def test_apps_models_dir_sets_the_root_and_a_missing_one_exits_2(tmp_path, monkeypatch, capsys):
    for name in (MODELS_DIR_ENV, MAX_FOLDERS_ENV, MAX_FOLDER_GB_ENV):   # restored after the test, whatever it sets
        monkeypatch.delenv(name, raising=False)
    assert apps_main.main(["--models-dir", str(tmp_path / "missing"), "--tabs", "text"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    args = apps_main.parse_args(["--models-dir", str(tmp_path), "--max-model-folders", "3"])
    assert apps_main.set_models_root(args) is None
    assert models_root().path == tmp_path.resolve() and models_root().max_folders == 3
    assert apps_main.set_models_root(apps_main.parse_args(["--max-model-folders", "0"])).startswith("--max-model")


# -- in a browser, against `python -m apps --models-dir DIR` (tests/apps/conftest.py) -------------------

@pytest.mark.parametrize("typed", ["../../../etc"])      # absolute paths: the unit test above
def test_browser_model_folder_outside_the_root_is_refused_naming_no_server_path(app_server, open_app, checks, typed):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    url, log, models = app_server
    page = checks.open_tab(open_app, "Text")
    page.get_by_text("Your own model").click()
    folder = page.locator("#text-model-folder textarea")
    folder.wait_for(state="visible")                     # the accordion opens, then renders its fields
    message = f"model folder '{typed}' is outside this server's models folder"
    for _ in range(3):     # a late re-render (another tab's example load) can empty the field or eat the click
        folder.fill(typed)
        page.locator("#text-run").click()
        try:
            page.get_by_text(message, exact=False).locator("visible=true").first.wait_for(timeout=60_000)
            break
        except PlaywrightTimeout:
            continue
    checks.readable_error(page, message)
    body = page.locator("body").inner_text()
    assert "folders there: empty-model" in body
    for server_path in (str(models), str(models.parent), "/tmp", os.path.expanduser("~") + "/"):
        assert server_path not in body.replace(typed, ""), server_path


def test_a_config_value_of_the_wrong_type_is_named_not_quoted(root):
    from vision.hf_image import load_hf_image_model
    (root / "badvalue").mkdir()
    (root / "badvalue" / "config.json").write_text(json.dumps({"model_type": "chameleon", "vocab_size": SECRET}))
    message = refusal("badvalue", load=load_hf_image_model)
    assert "vocab_size" in message                                   # the field is named
    assert_reveals_nothing(message, root, "badvalue")
