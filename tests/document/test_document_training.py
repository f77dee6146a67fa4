"""The block-diffusion training layout: masks and targets."""
import random

import torch

from document import data
from document.model import MASK, OCRModel, block_anchor, block_train_mask, default_config
from document.train import diffusion_batch, encode_batch


def test_block_size_one_is_plain_ar():
    n = 7
    m = block_train_mask(n, 1, 0)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    assert m[:n, :n].equal(causal)
    assert not m[:n, n:].any()
    # every noisy slot is an anchor: it sees the clean past up to itself and nothing noisy but itself
    assert m[n:, :n].equal(causal)
    assert m[n:, n:].equal(torch.eye(n, dtype=torch.bool))


def test_blocks_are_bidirectional_inside_and_causal_across():
    n, bs, off = 10, 4, 2
    m = block_train_mask(n, bs, off)
    a = block_anchor(n, bs, off)
    assert a.tolist() == [0, 0, 2, 2, 2, 2, 6, 6, 6, 6]
    # noisy 4 (block anchored at 2) sees clean 0..2, noisy 3..5, not clean 3 nor noisy 6
    row = m[n + 4]
    assert row[:n].tolist() == [True, True, True] + [False] * 7
    assert row[n:].tolist() == [False, False, False, True, True, True, False, False, False, False]
    assert not m[:n, n:].any()                      # the clean stream never sees noisy slots


def test_diffusion_targets_only_where_unseen():
    model = OCRModel(default_config(data.CHARSET, data.MAX_CHARS, data.HEIGHT, data.WIDTH))
    ids = encode_batch(model, ["hello world, block diffusion", "x = 1"])
    inputs, positions, masks, targets, n = diffusion_batch(ids, random.Random(0))
    assert inputs.shape == (2, 2 * n) and masks.shape == (2, 1, 2 * n, 2 * n)
    noisy, t = inputs[:, n:], targets[:, n:]
    for b in range(2):
        for p in range(n - 1):
            if t[b, p] != -100 and p + 1 < n:
                # the target of noisy slot p is token p+1: masked in the input or in the next block
                assert noisy[b, p + 1] == MASK or masks[b, 0, n + p, n + p + 1] == 0
    assert (targets[:, :n] != -100).sum() == sum(len(s) + 1 for s in ["hello world, block diffusion", "x = 1"])


def test_an_interrupted_run_continues_its_schedule(tmp_path, monkeypatch):
    """--continue-run resumes from the checkpoint and its state: steps and schedule minutes go on
    (no second warm-up), and without a matching state it is a clear error."""
    import torch

    from document import train
    from document.model import OCRModel, default_config
    from document import data
    start = tmp_path / "start"
    OCRModel(default_config(data.CHARSET, data.MAX_CHARS, data.HEIGHT, data.WIDTH)).save(start)
    out, state = tmp_path / "run", tmp_path / "run-state.pt"
    common = ["--batch", "2", "--threads", "1", "--out", str(out), "--state", str(state)]
    assert train.main(["--resume", str(start), "--minutes", "0.05", *common]) == 0
    first = torch.load(state, weights_only=True)
    assert first["run_steps"] > 0 and first["run_minutes"] > 0 and first["run_progress"] == 1.0
    assert train.main(["--resume", str(out), "--continue-run", "--minutes", "0.05", *common]) == 0
    second = torch.load(state, weights_only=True)
    assert second["run_steps"] > first["run_steps"] and second["run_minutes"] > first["run_minutes"]
    assert second["train_steps"] == first["train_steps"] + second["run_steps"] - first["run_steps"]
    assert train.main(["--resume", str(start), "--continue-run", "--minutes", "0.05", *common]) == 2
    # a run stopped a quarter into its cosine, continued for 30 more minutes: 10 minutes count as done
    assert train.schedule_before({"run_progress": 0.25, "run_minutes": 3.0}, 30) == 10.0
    assert train.schedule_before({"run_minutes": 3.0}, 30) == 3.0          # a state written before progress was


def test_batches_rendered_by_workers_train_the_model(tmp_path):
    """--workers renders the batches in worker processes (the GPU recipe's data loader): the run trains and
    checkpoints as without them; a device this machine lacks is a clear error."""
    from document import data, train
    from document.model import OCRModel, default_config
    start, out = tmp_path / "start", tmp_path / "run"
    OCRModel(default_config(data.CHARSET, data.MAX_CHARS, data.HEIGHT, data.WIDTH)).save(start)
    common = ["--batch", "2", "--threads", "1", "--out", str(out), "--state", str(tmp_path / "state.pt")]
    assert train.main(["--resume", str(start), "--minutes", "0.1", "--workers", "1", *common]) == 0
    assert OCRModel.load(out).cfg["train_steps"] > 0
    assert train.main(["--minutes", "0.1", "--device", "no-such-device", *common]) == 2
