"""suite.runtime.jobs: both engines give the same outputs, faults and resume (Ray Data on a local cluster:
one session fixture; the 2-node test runs ray.cluster_utils.Cluster in a subprocess)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suite.runtime.jobs.engines import Engine, connect
from suite.runtime.jobs.items import BatchError, BatchJob, Item
from suite.runtime.jobs.run import run_batch

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
ray = pytest.importorskip("ray")


def _test_module(name: str, relative: str):
    """Another test folder's module (its fixtures and material makers), loaded by path, once."""
    import importlib.util
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / relative)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


video_weights = _test_module("video_generate_tests", "vision/test_generate_video.py").weights   # a tiny 2-frame prior


@pytest.fixture(scope="session")
def cluster():
    """One local Ray cluster for the whole run: 4 logical CPUs on this 2-core machine (an actor
    asking for every CPU would starve Ray Data's own tasks), a short no-progress timeout."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING", log_to_driver=False,
             runtime_env={"env_vars": RAY_ENV})
    ctx = ray.data.DataContext.get_current()
    ctx.execution_no_progress_timeout_s = 90
    ctx.wait_for_min_actors_s = 150
    yield ray
    ray.shutdown()


def squares(tmp_path, n=8, **worker_args):
    from jobworkers import Square
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    items = [Item(f"in{i}", {"x": i}, (out / f"{i}.txt",)) for i in range(n)]

    def write(item, result):
        from suite.runtime.storage import write_text
        assert not item.outputs[0].exists(), f"{item.key} written twice"
        write_text(item.outputs[0], str(result["y"]))
    return BatchJob("squares", items, Square, worker_args, write, fields=("y",), manifest=out / "manifest.jsonl",
                    settings={"power": 2})


def manifest(job):
    return {r["input"]: r for r in map(json.loads, job.manifest.read_text().splitlines())}


def test_local_engine_writes_outputs_manifest_and_error_rows(tmp_path):
    job = squares(tmp_path)
    s = run_batch(job)
    assert (s.done, s.failed, s.exit_code) == (7, 1, 1)
    assert {p.name: p.read_text() for p in job.items[0].outputs[0].parent.glob("*.txt")} == \
        {f"{i}.txt": str(i * i) for i in range(8) if i != 3}
    rows = manifest(job)
    assert rows["in3"]["status"] == "error" and rows["in3"]["message"] == "in3: three is a bad input"
    assert "7 done, 0 skipped, 1 failed" in s.line()
    again = run_batch(squares(tmp_path))                 # resume: only the failed input runs again
    assert (again.count("skipped"), again.done, again.failed) == (7, 0, 1)
    other = squares(tmp_path)
    other.settings = {"power": 3}                        # other settings: nothing counts as done
    for p in tmp_path.glob("out/*.txt"):
        p.unlink()
    assert run_batch(other).done == 7


def test_an_input_known_bad_on_the_driver_is_an_error_row_without_a_worker(tmp_path):
    class Unbuildable:
        def __init__(self):
            raise AssertionError("no worker should be built for inputs known to be bad")
    items = [Item("a.txt:1", {}, error="a.txt:1: unknown class 'hexagon'"), Item("a.txt:2", {}, error="no such motion")]
    for engine in (Engine(), Engine("ray")):             # nothing to run: no pool, no cluster
        s = run_batch(BatchJob("bad", items, Unbuildable, {}, write=None, manifest=tmp_path / "m.jsonl"), engine)
        assert [(o.status, o.message) for o in s.outcomes] == [
            ("error", "a.txt:1: unknown class 'hexagon'"), ("error", "a.txt:2: no such motion")]


def test_ray_engine_same_outputs_and_a_killed_worker_loses_nothing(cluster, tmp_path):
    job = squares(tmp_path, die_marker=str(tmp_path / "died"))
    s = run_batch(job, Engine("ray", workers=2, cpus_per_worker=1, batch_size=2))
    assert (tmp_path / "died").exists()                  # a worker did die on its first row
    assert (s.done, s.failed) == (7, 1) and len(s.outcomes) == 8
    assert {p.name: p.read_text() for p in (tmp_path / "out").glob("*.txt")} == \
        {f"{i}.txt": str(i * i) for i in range(8) if i != 3}
    assert manifest(job)["in3"]["message"] == "in3: three is a bad input"


def test_a_crash_mid_job_resumes_on_the_next_run(cluster, tmp_path):
    job = squares(tmp_path)
    real = job.write
    calls = []

    def crash_after_three(item, result):
        if len(calls) == 3:
            raise KeyboardInterrupt                      # Ctrl-C (or a kill) on the driver
        calls.append(item.key)
        real(item, result)
    job.write = crash_after_three
    with pytest.raises(KeyboardInterrupt):
        run_batch(job, Engine("ray", workers=1, cpus_per_worker=1, batch_size=2))
    assert len(list((tmp_path / "out").glob("*.txt"))) == 3
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]   # nothing half-written
    s = run_batch(squares(tmp_path), Engine("ray", workers=1, cpus_per_worker=1, batch_size=2))
    assert (s.count("skipped"), s.done, s.failed) == (3, 4, 1)
    assert len(list((tmp_path / "out").glob("*.txt"))) == 7


def test_text_cli_ray_engine_writes_the_local_engines_records(cluster, tiny_dir, tmp_path):
    from text.__main__ import main
    src = tmp_path / "prompts.txt"
    src.write_text("Hello there\nThe quick brown fox\n" + "word " * 200 + "\nOne two three\n")
    outs = {}
    for engine in ("local", "ray"):
        dst = tmp_path / f"{engine}.jsonl"
        argv = ["--input", str(src), "--output", str(dst), "--model", str(tiny_dir), "--decoder", "jacobi",
                "--max-new-tokens", "6", "--threads", "1", "--engine", engine]
        assert main(argv + (["--workers", "2", "--batch-size", "1"] if engine == "ray" else [])) == 1  # the long one
        outs[engine] = [{k: v for k, v in json.loads(line).items() if k != "stats"} for line in dst.read_text().splitlines()]
        rows = [json.loads(line) for line in (tmp_path / f"{engine}.jsonl.manifest.jsonl").read_text().splitlines()]
        assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"] and "context" in rows[2]["message"]
    assert outs["ray"] == outs["local"] and len(outs["ray"]) == 3


def test_document_cli_ray_engine_writes_the_local_engines_files(cluster, tmp_path):
    from PIL import Image, ImageDraw

    from document import data
    from document.__main__ import main
    src = tmp_path / "in"
    src.mkdir()
    font = data._font(data.font_paths()[0], 28)
    for name, text in (("a.png", "Invoice 4711"), ("b.png", "Total: $12.50")):
        img = Image.new("RGB", (500, 90), "white")
        ImageDraw.Draw(img).text((20, 25), text, font=font, fill="black")
        img.save(src / name)
    (src / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    (src / "empty.pdf").write_bytes(b"")
    files = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        extra = ["--workers", "1", "--batch-size", "2"] if engine == "ray" else []
        # the projection line finder: the engines are under test here, not rapidocr (6-10 s an image on 2 cores)
        assert main([str(src), "--out", str(out), "--overlay", "--detector", "projection", "--threads", "1",
                     "--engine", engine, *extra]) == 1
        files[engine] = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "manifest.jsonl"}
        rows = {Path(r["input"]).name: r for r in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
        assert rows["broken.pdf"]["status"] == rows["empty.pdf"]["status"] == "error"
        assert "0 bytes" in rows["empty.pdf"]["message"] and "qpdf" not in rows["empty.pdf"]["message"]
    assert sorted(files["local"]) == ["a.png.json", "a.png.p1.png", "a.png.txt", "b.png.json", "b.png.p1.png", "b.png.txt"]
    assert files["ray"] == files["local"]                # byte for byte (greedy ar)


def test_unreachable_address_and_missing_ray_are_one_line_errors(monkeypatch):
    with pytest.raises(BatchError, match=r"127\.0\.0\.1:1.*--engine local"):
        connect("127.0.0.1:1")
    with pytest.raises(BatchError, match="not HOST:PORT"):
        connect("nowhere")
    monkeypatch.setitem(sys.modules, "ray", None)        # as if Ray were not installed
    with pytest.raises(BatchError, match="--engine local"):
        connect(None)


def test_cli_ray_errors_exit_2_without_a_traceback(tmp_path):
    (tmp_path / "p.txt").write_text("Hello\n")
    r = subprocess.run([sys.executable, "-m", "text", "--input", str(tmp_path / "p.txt"), "--engine", "ray",
                        "--ray-address", "127.0.0.1:1", "--decoder", "ar"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **RAY_ENV})
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert "127.0.0.1:1" in r.stderr and r.stderr.count("\n") == 1


LOCAL_CLUSTER = """
import os, psutil
from suite.runtime.jobs.engines import connect
ray, started = connect(None, workers=1)
assert started
assert ray.get(ray.remote(lambda: 6 * 7).remote()) == 42          # the loopback cluster runs tasks
mine = {p.pid for p in psutil.Process().children(recursive=True)} | {os.getpid()}
bound = sorted({c.laddr.ip for c in psutil.net_connections(kind="inet") if c.status == "LISTEN" and c.pid in mine})
print("listening on", bound)
ray.shutdown()
"""


def test_the_local_cluster_listens_on_loopback_only():
    """Issue 40, finding 2: the cluster `--engine ray` starts (no --ray-address) serves this machine only."""
    r = subprocess.run([sys.executable, "-c", LOCAL_CLUSTER], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, **RAY_ENV})
    assert r.returncode == 0, r.stderr[-2000:]
    bound = eval(r.stdout.split("listening on", 1)[1])
    assert bound and all(ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for ip in bound), bound


TWO_NODES = """
import sys
from ray.cluster_utils import Cluster
import ray
sys.path.insert(0, {here!r})
from suite.runtime.jobs.engines import Engine
from suite.runtime.jobs.items import BatchJob, Item
from suite.runtime.jobs.run import run_batch
from jobworkers import Square
cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 2, "include_dashboard": False}})
cluster.add_node(num_cpus=2)
ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False,
         runtime_env={{"env_vars": {env!r}}})
got = {{}}
job = BatchJob("two nodes", [Item(str(i), {{"x": i, "sleep": 0.5}}) for i in range(24) if i != 3], Square, {{}},
               lambda item, r: got.__setitem__(item.key, r))
s = run_batch(job, Engine("ray", workers=2, cpus_per_worker=1.5, batch_size=1))
assert s.done == 23 and sorted(got, key=int) == [str(i) for i in range(24) if i != 3], s.line()
assert all(r["y"] == int(k) ** 2 for k, r in got.items())
print("nodes", len({{r["node"] for r in got.values()}}))
ray.shutdown()
cluster.shutdown()
"""


def test_two_node_cluster_runs_actors_on_both_nodes():
    script = TWO_NODES.format(here=str(HERE), env=RAY_ENV)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=170,
                       env={**os.environ, **RAY_ENV})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nodes 2" in r.stdout                         # 1.5 CPUs each: one actor per 2-CPU node


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "manifest.jsonl"}


def test_vision_generate_ray_engine_writes_the_local_engines_images(cluster, tmp_path):
    from vision.generate import main
    manifests = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        extra = ["--workers", "1"] if engine == "ray" else []
        assert main(["--labels", "circle", "digit_7", "--num-per-label", "2", "--decoder", "zipar", "--option",
                     "window=4", "--batch-size", "3", "--threads", "1", "--out", str(out), "--engine", engine, *extra]) == 0
        manifests[engine] = json.loads((out / "manifest.json").read_text())
        assert not list(tmp_path.glob(".*.partial"))
    assert manifests["ray"]["images"] == manifests["local"]["images"] and len(manifests["ray"]["images"]) == 4
    assert tree(tmp_path / "ray") .keys() == tree(tmp_path / "local").keys()
    assert {k: v for k, v in tree(tmp_path / "ray").items() if k.endswith(".png")} == \
        {k: v for k, v in tree(tmp_path / "local").items() if k.endswith(".png")}


def test_vision_ground_ray_engine_writes_the_local_engines_images(cluster, tmp_path, capsys):
    from PIL import Image

    from vision.ground import main
    from vision.grounding import data
    src = tmp_path / "in"
    src.mkdir()
    for i in range(2):
        Image.fromarray(data.scene("test", i).image).save(src / f"s{i}.png")
    (src / "broken.jpg").write_text("not a picture")
    boxes = {}
    for engine in ("local", "ray"):
        extra = ["--workers", "1"] if engine == "ray" else []
        assert main([str(src), "the face", "--out", str(tmp_path / engine), "--threads", "1", "--engine", engine,
                     *extra]) == 1
        out = capsys.readouterr()
        boxes[engine] = [json.loads(line)["boxes"] for line in out.out.splitlines()]
        assert out.err.count("cannot read image") == 1 and "broken.jpg" in out.err
    assert boxes["ray"] == boxes["local"] and len(boxes["ray"]) == 2
    assert tree(tmp_path / "ray") == tree(tmp_path / "local")


def assert_same_speech(a: Path, b: Path) -> None:
    """The same speech in both folders: the same files, their samples equal up to the last bit of the
    codec's float rounding (its convolutions round differently with the thread count, and so may
    another process's kernels: one LSB of 16-bit PCM; a different code would change whole frames)."""
    import numpy as np
    import soundfile as sf
    assert sorted(tree(a)) == sorted(tree(b))
    for name in tree(a):
        (x, rate_x), (y, rate_y) = sf.read(a / name, dtype="int16"), sf.read(b / name, dtype="int16")
        assert rate_x == rate_y and x.shape == y.shape, name
        worst = int(np.abs(x.astype(np.int32) - y).max(initial=0))
        assert worst <= 1, f"{name}: samples differ by up to {worst} (of {len(x)}, {int((x != y).sum())} differ)"


def test_speech_tts_and_asr_ray_engine_write_the_local_engines_files(cluster, tmp_path):
    from speech.asr import main as asr
    from speech.tts import main as tts
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("Return a list of cookies.\n\nRemove an item from the queue.\n")
    for engine in ("local", "ray"):
        extra = ["--workers", "1"] if engine == "ray" else []
        # greedy: this checks the engines (a WAV once came out a different waveform: Griffin-Lim's random start
        # phase came from a global seed that concurrent decodes raced on; it has a generator of its own now)
        assert tts(["--input", str(sentences), "--out", str(tmp_path / f"tts_{engine}"), "--threads", "1",
                    "--engine", engine, "--temperature", "0", *extra]) == 0
    assert_same_speech(tmp_path / "tts_ray", tmp_path / "tts_local")
    assert sorted(tree(tmp_path / "tts_ray")) == ["line_0001.wav", "line_0002.wav"]
    (tmp_path / "tts_local" / "broken.wav").write_text("not audio")
    for engine in ("local", "ray"):
        extra = ["--workers", "1"] if engine == "ray" else []
        assert asr([str(tmp_path / "tts_local"), "--decoder", "ctc", "--out", str(tmp_path / f"asr_{engine}"),
                    "--threads", "1", "--engine", engine, *extra]) == 1          # broken.wav failed
    assert tree(tmp_path / "asr_ray") == tree(tmp_path / "asr_local")
    assert sorted(tree(tmp_path / "asr_ray")) == ["line_0001.wav.txt", "line_0002.wav.txt"]


VIDEO_TIMES = ("wall_time_s", "tokens_per_second", "draft_time_s", "forward_time_s")   # wall-clock fields of a clip's record


def test_generate_video_ray_engine_writes_the_local_engines_clips(cluster, video_weights, tmp_path, capsys):
    from vision.generate_video import main
    requests = tmp_path / "requests.txt"
    requests.write_text("star left 2\nhexagon left\nring grow 1 9\n")          # line 2: an unknown class
    manifests = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        extra = ["--workers", "1", "--batch-size", "2"] if engine == "ray" else []
        assert main(["--weights", video_weights, "--input", str(requests), "--decoder", "video_zipar", "--gif",
                     "--threads", "1", "--out", str(out), "--engine", engine, *extra]) == 1
        assert "requests.txt:2: unknown class 'hexagon'" in capsys.readouterr().err
        m = json.loads((out / "manifest.json").read_text())
        assert [c["status"] for c in m["clips"]] == ["ok", "error", "ok"], m["clips"]
        manifests[engine] = {**{k: v for k, v in m.items() if k not in ("clips", "wall_time_s")},
                             "clips": [{k: v for k, v in c.items() if k not in VIDEO_TIMES} for c in m["clips"]]}
    assert manifests["ray"] == manifests["local"]        # requests, forwards, tokens, sampling: the same per clip
    assert sorted(tree(tmp_path / "ray")) == sorted(tree(tmp_path / "local")) == [
        ".clips/0001_star_left.json", ".clips/0003_ring_grow.json", "0001_star_left.gif", "0001_star_left.mp4",
        "0003_ring_grow.gif", "0003_ring_grow.mp4", "manifest.json"]
    videos = {e: {k: v for k, v in tree(tmp_path / e).items() if k.endswith((".mp4", ".gif"))}
              for e in ("local", "ray")}
    assert videos["ray"] == videos["local"]              # H.264 and GIF bytes too (encoded on the driver, no time)
    assert main(["--weights", video_weights, "--input", str(requests), "--decoder", "video_zipar", "--gif",
                 "--threads", "1", "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1"]) == 1
    assert "0 done, 2 skipped, 1 failed" in capsys.readouterr().err   # resumed: only the bad line again


def test_process_video_ray_engine_writes_the_local_engines_json_and_srt(cluster, tmp_path, capsys):
    pytest.importorskip("av")
    from apps.process_video import main
    material = _test_module("video_process_tests", "vision/test_process_video.py")
    src = tmp_path / "in"
    src.mkdir()
    frames = material.slide_frames()                     # text slides and a voice track: OCR, ASR (and a phrase)
    material.write_mp4(src / "slides.mp4", frames, material.voice_track(len(frames) / material.FPS))
    material.write_undecodable(src / "broken.mp4")       # a valid container, its H.264 payload zeroed
    outs, lines = {}, {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        extra = ["--workers", "1"] if engine == "ray" else []
        assert main([str(src), "--out", str(out), "--fps", "2", "--max-frames", "3", "--detector", "projection",
                     "--phrase", "the red circle", "--threads", "1", "--engine", engine, *extra]) == 1
        captured = capsys.readouterr()
        lines[engine] = captured.out
        assert captured.err.count("cannot be decoded") == 1 and "broken.mp4" in captured.err
        rows = {Path(r["input"]).name: r for r in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
        assert rows["slides.mp4"]["status"] == "ok" and rows["broken.mp4"]["status"] == "error"
        outs[engine] = tree(out)
        report = json.loads(outs[engine]["slides.mp4.json"])
        assert report["subtitles"] == "speech" and len(report["frames"]) == 3 and report["grounding"]["forwards"]
        assert report["ocr"]["forwards"] and report["speech"]["segments"]
        assert set(report["seconds"]) >= {"decode", "ocr", "grounding", "asr"}       # wall-clock seconds per stage
        outs[engine]["slides.mp4.json"] = re.sub(rb'"seconds": \{[^}]*\}', b'"seconds": {}',
                                                 outs[engine]["slides.mp4.json"])
    assert sorted(outs["ray"]) == sorted(outs["local"]) == ["slides.mp4.json", "slides.mp4.srt"]
    assert outs["ray"] == outs["local"]                  # the SRT byte for byte, the JSON but its timings
    assert lines["ray"] == lines["local"] and "slides.mp4" in lines["ray"]     # the result lines, forwards and all
