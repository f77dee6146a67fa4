"""`python -m apps.check --smoke`: every registered decoder on a tiny model of its modality on a
device, T = 0 against `ar` and T = 1 within budget. Here a few decoders on the CPU; on a GPU all
of them on CUDA (the same code)."""
import pytest
import torch

import suite
from apps.check import smoke

FEW = ["ar", "jacobi", "lookahead", "zipar", "diagonal", "block_diffusion", "parallel_box", "delay"]


def test_smoke_runs_a_few_decoders_on_the_cpu():
    rows, failures = smoke("cpu", FEW)
    assert failures == 0, "\n".join(rows)
    assert len(rows) == 2 + len(FEW)
    assert "= ar" in rows[2 + FEW.index("jacobi")] and "n/a (greedy only)" in rows[2 + FEW.index("jacobi")]


def test_smoke_reports_a_decoder_that_differs_from_ar(monkeypatch):
    real = suite.decode

    def off_by_one(adapter, dec, state):       # a broken "exact" decoder: its last token is wrong
        out = real(adapter, dec, state)
        if dec.name == "jacobi":
            out.new_tokens[0][-1] += 1
        return out
    monkeypatch.setattr(suite, "decode", off_by_one)
    rows, failures = smoke("cpu", ["jacobi"])
    assert failures == 1 and "DIFFERS FROM ar" in rows[2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_smoke_runs_every_decoder_on_cuda():
    rows, failures = smoke("cuda")
    assert failures == 0, "\n".join(rows)
