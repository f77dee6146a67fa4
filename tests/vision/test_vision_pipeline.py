"""The embedded image pipeline (trained weights in vision/weights/): loads offline, gives the
documented quality, rejects bad input with a clear error, and the batch CLI writes all or nothing."""
import json
import os
import shutil

import pytest
import torch

import vision
from vision.pipeline import DEFAULT_WEIGHTS

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(DEFAULT_WEIGHTS, "prior")),
                                reason="no trained weights (python -m vision.train tokenizer|prior|classifier)")


@pytest.fixture(scope="session")
def pipe():
    torch.set_num_threads(1)
    return vision.load_image_pipeline()


@pytest.fixture(scope="session")
def classifier():
    from vision.metrics import load_classifier
    return load_classifier(os.path.join(DEFAULT_WEIGHTS, "classifier"))


def test_classes_and_grid(pipe):
    assert len(pipe.classes) >= 10 and "circle" in pipe.classes
    assert pipe.grid == (16, 16)


def test_classifier_and_tokenizer_quality(pipe, classifier):
    """The classifier knows the held-out images, and still knows them after a VQ round trip."""
    from vision.data import make_split, to_tensor, to_uint8
    from vision.metrics import class_accuracy
    images, labels = make_split("test", 5)
    assert class_accuracy(classifier, images, labels) >= 0.95
    recon = to_uint8(pipe.tokenizer.decode(pipe.tokenizer.encode(to_tensor(images))))
    assert class_accuracy(classifier, recon, labels) >= 0.75


def test_generated_images_are_of_their_class(pipe, classifier):
    """Near the figure `python -m vision.bench` documents (zipar window 3: 96 % over 100 images,
    100 % on these 20; chance 10 %); guards against regressions."""
    from vision.metrics import class_accuracy
    images, labels = [], []
    for seed in (0, 1):
        res = pipe(list(range(len(pipe.classes))), decoder="zipar", window=3, seed=seed)
        images += res.images
        labels += res.labels
    assert res.tokens.shape == (len(pipe.classes), 16, 16)
    assert res.images[0].size == (64, 64)
    assert class_accuracy(classifier, images, labels) >= ACCURACY_FLOOR


ACCURACY_FLOOR = 0.8


def test_lpd_generates_the_grid_in_20_forwards(pipe, classifier):
    """The shipped prior answers position queries: lpd fills 16x16 in 20 forwards (lossy; its
    class accuracy is measured against ar by `python -m vision.bench`)."""
    from vision.metrics import class_accuracy
    res = pipe(list(range(len(pipe.classes))), decoder="lpd", seed=0)
    assert res.stats.num_forwards == 20 and res.tokens.shape == (len(pipe.classes), 16, 16)
    assert class_accuracy(classifier, res.images, res.labels) >= 0.5      # 70 % measured on these 10
    steps = list(pipe.stream(["star"], decoder="lpd", seed=0))
    assert len(steps) == 20 and steps[0].known.sum() == 1 and steps[-1].known.all()


def test_stream_yields_partial_images(pipe):
    steps = list(pipe.stream(["circle", "star"], decoder="zipar", seed=1))
    assert steps[-1].done and not steps[0].done
    assert steps[0].known.sum() < steps[-1].known.sum() == 2 * 256
    assert steps[-1].stats.num_forwards == len(steps)


def test_a_streamed_step_keeps_its_own_stats(pipe):
    """Each step carries a snapshot: a reader who keeps one sees its figures, not the running totals."""
    steps = pipe.stream(["star"], decoder="lpd", seed=0)
    first = next(steps)
    seen = (first.stats.num_forwards, first.stats.num_new_tokens, len(first.stats.accepted_lengths))
    rest = list(steps)
    assert (first.stats.num_forwards, first.stats.num_new_tokens, len(first.stats.accepted_lengths)) == seen
    assert first.stats is not rest[-1].stats and rest[-1].stats.num_forwards == 20 > seen[0]


def test_a_slow_reader_sees_each_steps_own_figures(pipe):
    """A reader slower than the stepping thread (the apps' throttled views) still sees, at every step, the
    forwards and tokens of that step: ar, one token per forward (prefill included)."""
    import time
    for step in pipe.stream(["star"], decoder="ar", seed=0):
        time.sleep(0.002)
        assert step.stats.num_new_tokens == int(step.known.sum()) == step.stats.num_forwards == step.index


def test_same_seed_same_image(pipe):
    a = pipe(["ring"], decoder="sjd", seed=5)
    b = pipe(["ring"], decoder="sjd", seed=5)
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("kwargs, match", [
    (dict(labels=["unicorn"]), "unknown class"),
    (dict(labels=[99]), "unknown class"),
    (dict(labels=["circle"], guidance_scale=-1.0), "guidance_scale must be >= 0"),
    (dict(labels=["circle"], grid=(32, 32)), "trained for a 16x16"),
    (dict(labels=["circle"], decoder="sjd", init="prompt"), "init='left'"),
    (dict(labels=["circle"], decoder="nope"), "unknown decoder"),
])
def test_bad_input(pipe, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pipe(**kwargs)


def test_corrupt_weights_folder(tmp_path):
    bad = tmp_path / "weights"
    shutil.copytree(DEFAULT_WEIGHTS, bad)
    path = sorted((bad / "prior").glob("model*.safetensors"))[0]     # the weights, or their first shard
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="vision.train prior"):
        vision.load_image_pipeline(str(bad))
    (bad / "tokenizer" / "config.json").unlink()
    with pytest.raises(ValueError, match="vision.train tokenizer"):
        vision.load_image_pipeline(str(bad))
    with pytest.raises(ValueError, match="does not exist"):
        vision.load_image_pipeline(str(tmp_path / "missing"))


def test_generate_cli_writes_images_and_manifest(tmp_path, capsys):
    from vision.generate import main
    out = tmp_path / "out"
    assert main(["--labels", "circle", "digit_7", "--num-per-label", "2", "--decoder", "zipar",
                 "--option", "window=4", "--batch-size", "3", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["num_images"] == 4 and manifest["decoder_options"]["window"] == 4
    assert sorted(os.listdir(out)) == sorted([e["file"] for e in manifest["images"]] + ["manifest.json"])
    assert {e["label"] for e in manifest["images"]} == {"circle", "digit_7"}


def test_generate_cli_bad_input_writes_nothing(tmp_path, capsys):
    from vision.generate import main
    out = tmp_path / "out"
    assert main(["--labels", "unicorn", "--out", str(out)]) == 2
    assert "error: unknown class" in capsys.readouterr().err
    assert not out.exists() and os.listdir(tmp_path) == []


def test_concurrent_calls_share_forwards_and_draw_as_alone(pipe):
    """Two users at once (threads) go through the prior's scheduler: their requests share forwards
    (guided at different scales: each row's null prompt and scale travel with it) and each gets the
    images it gets alone (zipar: rows that fill their canvas out of order; every decoder:
    tests/vision/test_prior_scheduler.py)."""
    from concurrent.futures import ThreadPoolExecutor
    calls = [dict(labels=["circle"], seed=1, guidance_scale=2.0), dict(labels=["star"], seed=2)]
    alone = [pipe(decoder="zipar", **c) for c in calls]
    scheduler = pipe.schedulers._schedulers[True]
    before = scheduler.forwards_run
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda c: pipe(decoder="zipar", **c), calls))
    for a, t in zip(alone, together):
        assert torch.equal(a.tokens, t.tokens)
    assert scheduler.forwards_run - before < sum(t.stats.num_forwards for t in together)
    assert scheduler.live_rows == 0
