"""The pictures the tabs draw: which forward decided each token, in colour."""
import numpy as np

from apps.pictures import RAMP, UNDECIDED, step_colours
from apps.speech import decided_steps


def test_step_colours_run_from_first_to_last_forward():
    rgb = step_colours(np.array([[1, 3, 5, 0]]), forwards=5)
    assert rgb.shape == (1, 4, 3) and rgb.dtype == np.uint8
    assert tuple(rgb[0, 0]) == RAMP[0] and tuple(rgb[0, 2]) == RAMP[-1]
    assert tuple(rgb[0, 1]) == RAMP[2]            # the middle forward sits mid-ramp
    assert tuple(rgb[0, 3]) == UNDECIDED          # not decided yet


def test_codebook_steps_follow_each_decoders_layout():
    one_per_step = [[1]] * 4
    # parallel: one whole frame per forward
    assert decided_steps("parallel", one_per_step, 2, 3).tolist() == [[1, 2, 3], [1, 2, 3]]
    # delay: column j holds codebook q of frame j - q
    assert decided_steps("delay", one_per_step, 2, 3).tolist() == [[1, 2, 3], [2, 3, 4]]
    # flat: codes in order t*Q + q, one per forward
    assert decided_steps("flat", one_per_step, 2, 2).tolist() == [[1, 3], [2, 4]]
    # several items in one forward share its index; items not committed yet stay 0
    assert decided_steps("parallel", [[2], [1]], 1, 4).tolist() == [[1, 1, 2, 0]]


def speech_result(per_step, q, t, codes=0):
    from types import SimpleNamespace

    import suite
    stats = suite.DecodeStats(num_forwards=len(per_step), num_new_tokens=sum(per_step),
                              accepted_lengths=[[n] for n in per_step], wall_time_s=0.1)
    audio = np.sin(np.linspace(0, 50, 1600)).astype(np.float32)
    import torch
    return SimpleNamespace(codes=torch.full((q, t), codes, dtype=torch.long), stats=stats, audio=audio, sample_rate=16000)


def test_speech_view_draws_each_grid_on_its_own_scale_baseline_first():
    from apps.speech import ROW_PX, speech_view
    results = {"flat": speech_result([1] * 20, 4, 5), "parallel": speech_result([1] * 5, 4, 5, codes=1)}
    audio, grid, ar_audio, ar_grid, heard, table = speech_view(results, "parallel", "hello")
    assert audio[0] == 16000 and audio[1].dtype == np.int16 and ar_audio[1].dtype == np.int16
    assert grid.size == ar_grid.size and grid.height > 4 * ROW_PX     # Q legible rows, then the scale bar
    assert heard == "hello"
    # each on its own scale: both grids' last code (last frame, last codebook) is their own last forward, yellow
    last = (grid.width - 1, 30 + 3 * ROW_PX + ROW_PX // 2)     # below the 30 px label band
    assert grid.getpixel(last) == ar_grid.getpixel(last) == RAMP[-1]
    # the table lists ar (the flat baseline) first, says parallel is lossy and differs from it
    assert table.index("<tr data-decoder='ar'") < table.index("<tr data-decoder='parallel'")
    assert "data-guarantee='lossy'" in table and "data-same='false'" in table
    assert "CER of our recogniser" in table          # the measured quality cost, from speech/quality.json


def test_heatmaps_carry_their_own_scale():
    from apps.image import heatmap
    early = heatmap(np.array([[1, 2], [3, 4]]), 4)
    late = heatmap(np.array([[1, 2], [3, 4]]), 256)
    assert early.getpixel((early.width - 1, 30 + early.width - 1)) == RAMP[-1]   # 4 of 4 forwards: yellow
    assert late.getpixel((late.width - 1, 30 + late.width - 1)) != RAMP[-1]      # 4 of 256: still dark
    assert early.height > early.width                                       # the scale bar below it


def test_image_heatmap_marks_each_token_with_the_forward_of_its_own_step():
    """Steps read after the scheduler moved on (a slow reader) still map each token to the forward that
    decided it: a step's own index, not the request's live running totals (shared by every step)."""
    import torch
    from PIL import Image

    import suite
    from apps.image import ImageRun
    from vision.pipeline import ImageStep
    live = suite.DecodeStats(num_forwards=4, num_new_tokens=4)          # where the request is now
    known = [torch.arange(4).reshape(1, 2, 2) < k for k in range(1, 5)]   # ar: one cell per forward
    steps = [ImageStep(k + 1, [Image.new("RGB", (8, 8))], known[k], live, k == 3) for k in range(4)]
    run = ImageRun("ar", steps, (2, 2))
    while not run.done:
        run.advance()
    assert run.decided_at.tolist() == [[1, 2], [3, 4]]
