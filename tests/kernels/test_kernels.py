"""Kernel references (CPU), the dispatch table, and Triton vs reference (interpreter on CPU; GPU)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from chisq import goodness_of_fit

import kernels
from kernels import reference
from suite import accept_greedy_prefix

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))                      # kernel_cases: inputs shared with the subprocess and GPU runs
from kernel_cases import cases, compare  # noqa: E402


def test_greedy_prefix_matches_the_suite_rule():
    g = torch.Generator().manual_seed(0)
    draft = torch.randint(0, 3, (64, 5), generator=g)
    target = torch.randint(0, 3, (64, 6), generator=g)
    accepted, nxt = reference.greedy_prefix(draft, target)
    for i in range(64):
        v = accept_greedy_prefix(draft[i], target[i])
        assert (int(accepted[i]), int(nxt[i])) == (v.num_accepted, v.next_token)


@pytest.mark.parametrize("point_mass", [False, True])
def test_speculative_accept_preserves_the_target_law(point_mass):
    g = torch.Generator().manual_seed(1)
    rows = 6000
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]).expand(rows, 2, 4)
    q = torch.tensor([[0.7, 0.1, 0.1, 0.1]]).expand(rows, 1, 4)
    draft = torch.zeros(rows, 1, dtype=torch.long) if point_mass else torch.multinomial(q[:, 0], 1, generator=g)
    accepted, nxt = reference.speculative_accept(draft, None if point_mass else q, p,
                                                 torch.rand(rows, 1, generator=g), torch.rand(rows, generator=g))
    first = torch.where(accepted > 0, draft[:, 0], nxt)
    assert goodness_of_fit(first.tolist(), {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}) > 1e-3


@pytest.mark.parametrize("point_mass", [False, True])
def test_a_ragged_batch_decides_each_row_as_its_own_unpadded_call(point_mass):
    for draft, q, p, u, u_next, lengths in cases("cpu"):
        qq = None if point_mass else q
        accepted, nxt = reference.speculative_accept(draft, qq, p, u, u_next, lengths)
        for b, n in enumerate(lengths.tolist()):
            alone = reference.speculative_accept(draft[b:b + 1, :n], None if qq is None else qq[b:b + 1, :n],
                                                 p[b:b + 1, :n + 1], u[b:b + 1, :n], u_next[b:b + 1])
            assert (int(accepted[b]), int(nxt[b])) == (int(alone[0]), int(alone[1]))


def test_sample_logits_follows_the_filtered_law():
    g = torch.Generator().manual_seed(2)
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).expand(6000, 4)
    draws = reference.sample_logits(logits, 1.0, torch.rand(6000, generator=g), top_k=2)
    assert goodness_of_fit(draws.tolist(), {0: 0.5 / 0.8, 1: 0.3 / 0.8}) > 1e-3
    assert torch.equal(reference.sample_logits(logits[:2], 0.0, torch.rand(2)), torch.zeros(2, dtype=torch.long))


def test_masks():
    assert reference.causal_mask(2, past=1).tolist() == [[True, True, False], [True, True, True]]
    assert reference.block_causal_mask([1, 2]).tolist() == [[True, False, False], [True, True, True],
                                                            [True, True, True]]
    assert reference.tree_mask([-1, 0, 0, 1]).tolist() == [[True, False, False, False], [True, True, False, False],
                                                           [True, False, True, False], [True, True, False, True]]


def test_dispatch_picks_the_reference_on_cpu_and_names_bad_choices(monkeypatch):
    assert kernels.op("greedy_prefix") is reference.greedy_prefix
    with pytest.raises(ValueError, match="choose one of"):
        kernels.op("nope")
    monkeypatch.setenv("PARASUITE_KERNELS", "fast")
    with pytest.raises(ValueError, match="PARASUITE_KERNELS"):
        kernels.op("greedy_prefix")


def test_triton_kernels_equal_references_in_the_interpreter():
    """TRITON_INTERPRET=1 runs the Triton kernels on CPU tensors: integer outputs must be equal."""
    code = ("import sys; sys.path.insert(0, %r); from kernel_cases import compare; "
            "from kernels import triton_ops; problems = compare(triton_ops); "
            "print('\\n'.join(problems)); sys.exit(1 if problems else 0)") % str(HERE)
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_triton_kernels_equal_references_on_gpu():
    from kernels import triton_ops
    assert compare(triton_ops) == []
