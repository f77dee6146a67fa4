"""The trained grounding model through the pipeline: held-out quality, the decoders' forward
savings, oriented angles vs their envelopes, pixel mapping, bad input, the CLI."""
import json
import math

import numpy as np
import pytest
from PIL import Image

from vision.grounding import data
from vision.grounding.metrics import envelope, iou, match, query_correct, rotated_iou


@pytest.fixture(scope="module")
def grd():
    import vision
    return vision.load_grounding_pipeline(threads=1)


@pytest.fixture(scope="module")
def heldout_runs(grd):
    items = data.heldout(48, "aabb")
    images, queries = [s.image for s, _ in items], [q.text for _, q in items]
    return items, {d: grd(images, queries, decoder=d, score=False) for d in ("ar", "parallel_box", "hybrid")}


def accuracy(items, results):
    return np.mean([query_correct(r.boxes, [o.box for o in q.targets], iou) for (_, q), r in zip(items, results)])


def test_heldout_accuracy_and_forward_savings(heldout_runs):
    items, runs = heldout_runs
    acc = {d: accuracy(items, rs) for d, rs in runs.items()}
    fpb = {d: rs[0].stats.forwards_per_box for d, rs in runs.items()}
    # documented (300 held-out queries, vision/weights/grounding/README.md): ar 77 %, parallel_box
    # 73 %, hybrid = ar; here 48 of them (measured: ar 77 %, parallel_box 67 %, hybrid 77 %), with some slack
    assert acc["ar"] >= 0.7, acc
    assert acc["hybrid"] >= acc["ar"] - 0.05, acc
    assert acc["parallel_box"] >= acc["ar"] - 0.15, acc
    assert fpb["parallel_box"] * 2.5 <= fpb["ar"], fpb
    assert fpb["hybrid"] < fpb["ar"], fpb
    assert any(r.no_match for r in runs["ar"])         # some held-out queries name nothing


def test_oriented_angles_beat_their_envelopes(grd):
    items = data.heldout(24, "obb")
    res = grd([s.image for s, _ in items], [q.text for _, q in items], decoder="hybrid", task="obb", score=False)
    learned, env = [], []
    for (_, q), r in zip(items, res):
        gt = [o.rbox for o in q.targets]
        pred = [(*b, a) for b, a in zip(r.boxes, r.angles)]
        assert all(0 <= a < math.pi for a in r.angles)
        learned += match(pred, gt, rotated_iou)
        env += match([envelope(p) for p in pred], gt, rotated_iou)
    assert np.mean(learned) > np.mean(env) + 0.1, (np.mean(learned), np.mean(env))


def test_boxes_come_back_in_the_images_own_pixels(grd):
    scene, query = data.heldout(6, "aabb")[5]
    assert query.targets
    small = grd(scene.image, query.text, decoder="ar")
    big = grd(Image.fromarray(scene.image).resize((384, 384), Image.BICUBIC), query.text, decoder="ar")
    assert len(small.boxes) == len(big.boxes) > 0
    for a, b in zip(small.boxes, big.boxes):
        assert np.allclose(np.array(a) * 3, b, atol=6), (a, b)
    assert all(0 < s <= 1 for s in small.scores)


def test_real_photo_gives_well_formed_boxes(grd):
    """A real photo is far from the generated scenes: the grammar filter still keeps every block
    well formed (without it the model drifts out of the layout here)."""
    from skimage import data as skdata
    from vision.grounding.model import parse_blocks
    for d in ("ar", "parallel_box", "hybrid"):
        r = grd(skdata.astronaut(), "the face", decoder=d)
        blocks = parse_blocks(r.tokens, "aabb")
        assert blocks and all(ok for _, ok in blocks), (d, r.tokens)
        # the filter is token-level: a well-formed block can still be empty (x1 <= x0 or y1 <= y0;
        # `ar` gives one on this photo), and the pipeline drops those; every other block comes back
        nonempty = [v for v, _ in blocks if v[2] > v[0] and v[3] > v[1]]
        assert len(r.boxes) == len(nonempty), (d, r.tokens)
        for x0, y0, x1, y1 in r.boxes:
            assert 0 <= x0 < x1 <= 512 and 0 <= y0 < y1 <= 512


def test_letterbox_geometry():
    from vision.grounding.pipeline import letterbox
    img = Image.new("RGB", (200, 100), (255, 255, 255))
    arr, scale, px, py = letterbox(img, 128)
    assert arr.shape == (128, 128, 3) and scale == 200 / 128 and (px, py) == (0, 50)


@pytest.mark.parametrize("image, query, kwargs, message", [
    (np.zeros((64, 64, 3), np.uint8), "  ", {}, "empty query"),
    (np.zeros((1, 1, 3), np.uint8), "the face", {}, "too small"),
    (np.zeros((6000, 7000), np.uint8), "the face", {}, "downscale it first"),
    ("/no/such/image.png", "the face", {}, "no such file"),
    (np.zeros((64, 64, 3), np.uint8), "the face", {"decoder": "zipar_wide"}, "unknown decoder"),
    (np.zeros((64, 64, 3), np.uint8), "the face", {"task": "3d"}, "unknown task"),
    (np.zeros((64, 64, 3), np.uint8), "the face " * 20, {}, "too long"),
])
def test_bad_input_is_a_clear_error(grd, image, query, kwargs, message):
    with pytest.raises(ValueError, match=message):
        grd(image, query, **kwargs)


def test_unreadable_image_file(grd, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_text("not a picture")
    with pytest.raises(ValueError, match="cannot read image"):
        grd(str(bad), "the face")


def test_cli_single_image_and_folder(tmp_path, capsys):
    from vision.ground import main
    for i in range(2):
        Image.fromarray(data.scene("test", i).image).save(tmp_path / f"s{i}.png")
    (tmp_path / "broken.jpg").write_text("not a picture")
    single = tmp_path.parent / f"{tmp_path.name}-out" / "out.png"
    assert main([str(tmp_path / "s0.png"), "the red circle", "--out", str(single)]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert single.is_file() and "boxes" in rec and not list(single.parent.glob(".*.tmp"))
    assert main([str(tmp_path), "the face", "--decoder", "parallel_box"]) == 1     # broken.jpg fails, the rest run
    out = capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "grounded").iterdir()) == ["manifest.jsonl", "s0.png", "s1.png"]
    assert "broken.jpg" in out.err and "cannot read image" in out.err and out.err.count("cannot read image") == 1
    assert [json.loads(line)["image"] for line in out.out.splitlines()] == [str(tmp_path / "s0.png"), str(tmp_path / "s1.png")]
    assert main([str(tmp_path / "s0.png"), " ", "--out", str(single.parent / "empty.png")]) == 2
    assert not (single.parent / "empty.png").exists()
    assert main([str(tmp_path / "s0.png"), "the face", "--decoder", "nope"]) == 2


def test_concurrent_calls_share_forwards_and_answer_as_alone(grd):
    """Queries sent at once from several threads (the Grounding tab's users): their rows share the
    box decoder's forwards (each row's encoder states and prompt length travel in its cache) and
    each answer equals the one its query gets alone."""
    from concurrent.futures import ThreadPoolExecutor
    items = data.heldout(4, "aabb")
    calls = [(s.image, q.text) for s, q in items]
    ask = lambda call: grd(call[0], call[1], decoder="ar", score=False)      # noqa: E731
    alone = [ask(c).tokens for c in calls]
    before = grd.scheduler("aabb").forwards_run
    with ThreadPoolExecutor(len(calls)) as pool:
        together = list(pool.map(ask, calls))
    assert [r.tokens for r in together] == alone
    assert sum(r.stats.num_forwards for r in together) > grd.scheduler("aabb").forwards_run - before
