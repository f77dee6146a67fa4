"""suite.models.linear_forms: every matmul form computes nn.Linear's product, the swap keeps the model's
parameters, and greedy decoding over a swapped model equals transformers' generate over it."""
import pytest
import torch
from tinymodels import tiny_model
from torch import nn

import suite
from suite.models.linear_forms import (FORMS, FormLinear, FusedLinear, describe, measure_forms, pick_forms, pick_pinned,
                                       swap_linears, unswap_linears)

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
    # per layer: o_proj and down_proj alone, q/k/v and gate/up fused; the LM head
    assert sum(n for k, n in info.items() if not k.startswith("attention")) == 2 * 4 + 1
    assert sum(n for k, n in info.items() if k.startswith("fused")) == 2 * 2
    assert isinstance(model.model.layers[0].self_attn.k_proj, FusedLinear)
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


def test_the_choice_is_per_width_one_row_included():
    fast_one_row = {"linear": {1: 1.0, 4: 1.0}, "wxt": {1: 0.2, 4: 0.5}, "xwt": {1: 0.1, 4: 0.4}}
    assert pick_forms(fast_one_row) == {1: "xwt", 4: "xwt"}
    mixed = {"linear": {1: 1.0, 2: 1.0, 4: 1.0}, "wxt": {1: 2.0, 2: 0.5, 4: 0.97},
             "xwt": {1: 0.5, 2: 2.0, 4: 2.0}, "onednn": {1: 0.9, 2: 0.6, 4: 0.3}}
    assert pick_forms(mixed) == {1: "onednn", 2: "wxt", 4: "onednn"}   # one extra layout (packed) at most
    assert pick_forms({"linear": {1: 1.0}, "wxt": {1: 0.97}}) == {1: "linear"}   # within the margin: F.linear


def test_measured_forms_keep_fp32_results_allclose():
    """The forms measured on this machine (one row included), in a swapped tiny model: logits
    allclose to the unswapped model's at every width."""
    torch.manual_seed(0)
    plain = tiny_model("llama")
    swapped = tiny_model("llama")
    info = swap_linears(swapped)
    assert info
    with torch.no_grad():
        for n in (1, 2, 3, 4, 8, 16, 40):
            ids = torch.randint(0, plain.config.vocab_size, (1, n))
            torch.testing.assert_close(swapped(ids).logits, plain(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("forms", [{w: f for w in (1, 2, 4, 8)} for f in FORMS])
def test_fused_projections_give_the_unfused_logits(forms):
    if "onednn" in forms.values() and not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch build")
    torch.manual_seed(0)
    plain = tiny_model("llama")
    fused = tiny_model("llama")
    swap_linears(fused, forms=forms, fuse=True)
    assert isinstance(fused.model.layers[1].mlp.up_proj, FusedLinear)
    with torch.no_grad():
        for n in (1, 3, 8, 12):
            ids = torch.randint(0, plain.config.vocab_size, (2, n))
            torch.testing.assert_close(fused(ids).logits, plain(ids).logits, rtol=1e-5, atol=1e-5)


def test_a_fused_member_on_its_own_input_or_with_grad_computes_its_own_product():
    torch.manual_seed(0)
    q, k, v = nn.Linear(8, 6), nn.Linear(8, 4), nn.Linear(8, 4)
    fq, fk, fv = FusedLinear.group([q, k, v], {1: "xwt", 4: "xwt"})
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(fq(x), q(x))
        torch.testing.assert_close(fk(y), k(y))          # another input: its own product
        torch.testing.assert_close(fv(x), v(x))          # the shared product for x
        fq(x)
        x.add_(1.0)                                      # x changed in place: not served stale
        torch.testing.assert_close(fk(x), k(x))
        q.weight.mul_(2.0)                               # a weight changed in place: the stacked layout follows
        torch.testing.assert_close(fq(x), q(x))
    fq(x).sum().backward()
    assert q.weight.grad is not None


def test_the_pinned_form_is_the_fastest_row_independent_one_and_its_layout_is_the_layers():
    seconds = {"linear": {w: 1.0 for w in (1, 8, 16, 32)}, "wxt": {w: 0.9 for w in (1, 8, 16, 32)},
               "xwt": {w: 0.5 for w in (1, 8, 16, 32)}, "onednn": {1: 0.3, 8: 0.6, 16: 0.6, 32: 0.6}}
    assert pick_pinned(seconds, ["wxt", "xwt", "onednn"]) == "xwt"
    assert pick_pinned(seconds, ["wxt", "onednn"]) == "onednn"
    assert pick_pinned(seconds, []) is None                          # none here: a row may round by its batch
    assert pick_forms(seconds) == {1: "xwt", 8: "xwt", 16: "xwt", 32: "xwt"}
    assert pick_forms(seconds, "onednn") == {1: "onednn", 8: "onednn", 16: "onednn", 32: "onednn"}   # the pinned's
    assert pick_forms(seconds, "wxt") == pick_forms(seconds)        # a plain pinned form leaves the layout free
