"""The vision CLIs say what each result is (its decoder's guarantee, and for a lossy one the measured
quality cost from vision/quality.json), and run the lossless default their app tabs run."""
import json

from PIL import Image


def test_generate_summary_names_a_lossy_decoders_measured_cost(tmp_path, capsys):
    from vision.generate import main
    assert main(["--labels", "star", "--decoder", "zipar", "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    line = out.strip().splitlines()[-1]
    assert line.startswith("wrote 1 images and manifest.json to ")
    assert "Loading weights" not in err                       # the job's own bar only
    assert "; zipar: lossy: class accuracy 96.1% against ar's 97.6% on 800 images" in line


def test_ground_runs_the_apps_default_and_each_record_says_what_it_is(tmp_path, capsys):
    import apps.grounding
    from vision.ground import main
    from vision.grounding import data
    src = tmp_path / "scene.png"
    Image.fromarray(data.scene("test", 17, "aabb").image).save(src)
    assert main([str(src), "the ring left of the blue square", "--out", str(tmp_path / "a.png")]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["decoder"] == apps.grounding.DEFAULT_DECODER == "ar" and rec["guarantee"] == "ar: the baseline"
    assert main([str(src), "the ring left of the blue square", "--decoder", "hybrid", "--out",
                 str(tmp_path / "b.png")]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["guarantee"].startswith("hybrid: lossy: Acc@0.5 81.1% (oriented 73.3%) against ar's 81.0%")
