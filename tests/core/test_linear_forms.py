"""suite.models.linear_forms: every matmul form computes nn.Linear's product, the swap keeps the model's
parameters, and greedy decoding over a swapped model equals transformers' generate over it."""
import pytest
import torch
from tinymodels import tiny_model
from torch import nn

import suite
from suite.models.linear_forms import (FORMS, FormLinear, describe, measure_forms, pick_forms, swap_linears,
                                unswap_linears)

MIXES = {"transposed": {1: "linear", 2: "wxt", 4: "xwt", 8: "wxt", 16: "xwt", 32: "wxt"},
         "packed": {1: "wxt", 2: "onednn", 4: "linear", 8: "onednn", 16: "wxt", 32: "onednn"}}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("bias", [False, True])
def test_every_form_computes_the_linear_product(form, bias):
    if form == "onednn" and not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch build")
    torch.manual_seed(0)
    plain = nn.Linear(24, 40, bias=bias)
    swapped = FormLinear.from_linear(plain, {w: form for w in (1, 2, 4, 8)})
    with torch.no_grad():
        for shape in [(1, 24), (3, 24), (2, 3, 24), (1, 8, 24), (2, 9, 24)]:   # 9 rows: past the widths
            x = torch.randn(shape)
            torch.testing.assert_close(swapped(x), plain(x), rtol=1e-5, atol=1e-5)
            assert swapped(x).is_contiguous()


def test_swap_keeps_parameters_state_dict_and_tying():
    model = tiny_model("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    info = swap_linears(model, forms=MIXES["transposed"])
    assert sum(n for k, n in info.items() if not k.startswith("attention")) == 2 * 7 + 1
    assert model.config._attn_implementation == "parasuite_sdpa"
    assert isinstance(model.get_output_embeddings(), FormLinear)
    assert before.keys() == model.state_dict().keys()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert suite.HFCausalLM(model).config.extra["linear_forms"] == info
    unswap_linears(model)
    assert describe(model) == {} and model.config._attn_implementation == "sdpa"


def test_a_weight_changed_in_place_rebuilds_the_extra_layout_and_grad_uses_f_linear():
    plain = nn.Linear(8, 8, bias=False)
    swapped = FormLinear.from_linear(plain, {4: "xwt"})
    x = torch.randn(4, 8)
    with torch.no_grad():
        swapped(x)
        plain.weight.mul_(2.0)
        torch.testing.assert_close(swapped(x), x @ plain.weight.T)
    swapped(x).sum().backward()    # with grad: F.linear, so the weight gets its gradient
    assert plain.weight.grad is not None


def test_bad_forms_are_refused():
    with pytest.raises(ValueError, match="forms maps widths"):
        swap_linears(tiny_model("llama"), forms={1: "fast"})
    with pytest.raises(ValueError, match="one extra layout"):
        FormLinear.from_linear(nn.Linear(4, 4), {1: "xwt", 2: "onednn"})


def test_measured_choice_keeps_f_linear_unless_beaten():
    seconds = measure_forms(16, 8, bias=False, widths=(1, 4), repeats=3)
    assert set(seconds) >= {"linear", "wxt", "xwt"} and all(set(r) == {1, 4} for r in seconds.values())
    slow = {"linear": {1: 1.0, 4: 1.0}, "wxt": {1: 0.99, 4: 0.5}, "xwt": {1: 2.0, 4: 0.4}, "onednn": {1: 2.0, 4: 0.45}}
    assert pick_forms(slow) == {1: "linear", 4: "xwt"}


def test_one_row_keeps_f_linear_even_when_a_layer_timing_favours_another_form():
    fast_one_row = {"linear": {1: 1.0, 4: 1.0}, "wxt": {1: 0.2, 4: 0.5}, "xwt": {1: 0.1, 4: 0.4}}
    assert pick_forms(fast_one_row) == {1: "linear", 4: "xwt"}
