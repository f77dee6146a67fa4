"""suite.models.numerics.bf16_operands: a linear layer computes bf16 operands with float32 accumulation
and a float32 output; everything else of the model stays float32."""
import pytest
import torch
from torch import nn

from suite.models.numerics import bf16_operands


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


def test_linear_reads_bf16_operands_and_writes_float32():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.LayerNorm(32), nn.Linear(32, 8, bias=False))
    w0, b0, w2, ln = (model[0].weight.clone(), model[0].bias.clone(), model[2].weight.clone(),
                      model[1].weight.clone())
    bf16_operands(model)
    assert torch.equal(model[0].weight, _bf16(w0)) and torch.equal(model[0].bias, _bf16(b0))
    assert torch.equal(model[1].weight, ln)          # a norm keeps its float32 weight
    x = torch.randn(5, 64) * 3
    with torch.no_grad():
        got = model(x)
        # the reference: bf16-rounded operands, exact products and sums (float64), a float32 output
        hidden = model[1](nn.functional.linear(_bf16(x).double(), _bf16(w0).double(), _bf16(b0).double()).float())
        want = nn.functional.linear(_bf16(hidden).double(), _bf16(w2).double()).float()
        plain = nn.functional.linear(model[1](nn.functional.linear(x, w0, b0)), w2)   # float32 throughout
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, plain, atol=1e-5, rtol=1e-5)    # the rounding is there


def test_bf16_operands_refuses_a_bf16_model():
    with pytest.raises(ValueError, match="float32"):
        bf16_operands(nn.Linear(4, 4).to(torch.bfloat16))
