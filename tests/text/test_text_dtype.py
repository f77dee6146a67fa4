"""dtype choice: text.load(dtype=...), `python -m text --dtype`, suite.models.dtypes."""
import warnings

import pytest
import torch

import suite.models.dtypes as dtypes
import suite.models.linear_forms as linear_forms
from suite.models.dtypes import resolve_dtype
from text.__main__ import main, parse_args


def test_resolve_names_aliases_and_auto(monkeypatch):
    assert resolve_dtype("float32") == resolve_dtype("fp32") == resolve_dtype(torch.float32) == torch.float32
    assert resolve_dtype("auto", device="cuda") == torch.bfloat16
    monkeypatch.setattr(linear_forms, "native_bf16", lambda: False)
    assert resolve_dtype("auto") == torch.float32
    monkeypatch.setattr(linear_forms, "native_bf16", lambda: True)
    assert resolve_dtype("auto") == torch.bfloat16 == resolve_dtype("bf16")


def test_an_unknown_dtype_names_the_choices():
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        resolve_dtype("half8")
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        resolve_dtype(torch.int8)


def test_bf16_without_native_support_runs_and_says_so_once(monkeypatch):
    monkeypatch.setattr(linear_forms, "native_bf16", lambda: False)
    monkeypatch.setattr(dtypes, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_dtype("bfloat16") == torch.bfloat16
        assert resolve_dtype("bfloat16") == torch.bfloat16
    assert len([w for w in caught if "without native bf16" in str(w.message)]) == 1


def test_cli_dtype_option(capsys):
    assert parse_args(["Hi"]).dtype is None                      # text.load's default
    assert parse_args(["Hi", "--dtype", "auto"]).dtype == "auto"
    with pytest.raises(SystemExit) as e:
        parse_args(["Hi", "--dtype", "half8"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--dtype" in err and "auto" in err and "bfloat16" in err


def test_cli_runs_a_folder_in_bfloat16(tiny_dir, capsys):
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "ar", "--max-new-tokens", "3",
                 "--dtype", "bfloat16"]) == 0
    assert "tokens in" in capsys.readouterr().err


def test_load_a_folder_in_bfloat16(tiny_dir):
    import text
    gen = text.load(str(tiny_dir), dtype="bfloat16")
    assert next(gen.model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        text.load(str(tiny_dir), dtype="float8")


def test_text_runs_at_native_precision_by_default_and_on_a_fixed_step_in_bf16(tiny_dir, monkeypatch):
    """No dtype and no $PARASUITE_DTYPE: bf16 where the CPU runs it natively (on a fixed step, exact
    against bf16 ar), float32 elsewhere (free widths); $PARASUITE_DTYPE and dtype= override."""
    import text
    monkeypatch.delenv(dtypes.DTYPE_ENV, raising=False)
    monkeypatch.delenv("PARASUITE_STEP", raising=False)
    for native, dtype, width in ((True, torch.bfloat16, 8), (False, torch.float32, None)):
        monkeypatch.setattr(linear_forms, "native_bf16", lambda native=native: native)
        gen = text.load(str(tiny_dir))
        assert next(gen.model.parameters()).dtype == dtype
        assert gen.adapter is None if width is None else gen.adapter.capabilities.step_width == width
    monkeypatch.setenv(dtypes.DTYPE_ENV, "float32")
    assert next(text.load(str(tiny_dir)).model.parameters()).dtype == torch.float32
    assert dtypes.default_dtype() == "float32"
