"""The pictures the tabs draw: which forward decided each token, in colour."""
import numpy as np

from apps._common import RAMP, UNDECIDED, step_colours
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


def test_speech_view_draws_both_grids_when_compared():
    from types import SimpleNamespace

    import suite
    from apps.speech import _speech_view

    def result(per_step, q, t):
        stats = suite.DecodeStats(num_forwards=len(per_step), num_new_tokens=sum(per_step),
                                  accepted_lengths=[[n] for n in per_step], wall_time_s=0.1)
        audio = np.sin(np.linspace(0, 50, 1600)).astype(np.float32)
        return SimpleNamespace(codes=np.zeros((q, t), dtype=np.int64), stats=stats, audio=audio, sample_rate=16000)

    results = {"parallel": result([1] * 6, 4, 5), "flat": result([1] * 20, 4, 5)}
    audio, wave, grid, ar_grid, heard, table = _speech_view(results, "parallel", [], "hello")
    assert audio[0] == 16000 and audio[1].dtype == np.int16
    assert grid.size == ar_grid.size and grid.height == 4 * 12      # Q rows of 12 px, same frames
    assert wave.width > 0 and heard == "hello"
    # one colour scale for both: parallel's last frame (forward 5) is far from flat's last, yellow (forward 20 of 20)
    assert grid.getpixel((grid.width - 1, 0)) != ar_grid.getpixel((ar_grid.width - 1, grid.height - 1))
    assert ar_grid.getpixel((ar_grid.width - 1, ar_grid.height - 1)) == (253, 231, 37)
