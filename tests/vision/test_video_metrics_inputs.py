"""The video bench scores decoded clips (PIL frames) and real clips (arrays) alike."""
import numpy as np
from PIL import Image

from vision.metrics import as_uint8_array
from vision.video.metrics import clips_tensor


def test_frames_as_arrays_or_pil_images_give_the_same_tensor():
    rng = np.random.default_rng(0)
    clip = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    as_pil = [[Image.fromarray(f) for f in clip]]
    assert np.array_equal(as_uint8_array(list(clip)), as_uint8_array(as_pil[0]))
    assert clips_tensor([list(clip)]).equal(clips_tensor(as_pil))
    assert clips_tensor([list(clip)]).equal(clips_tensor(clip[None]))


def test_clips_of_another_length_than_the_motion_classifiers_get_no_motion_accuracy():
    """`python -m vision.video.bench --frames 2`: class accuracy still, motion accuracy "-" (it crashed)."""
    import os

    from vision.metrics import load_classifier
    from vision.pipeline import DEFAULT_WEIGHTS
    from vision.video.bench import clip_scores, motion_text
    from vision.video.data import make_clips
    from vision.video.metrics import load_motion_classifier
    motion_net = load_motion_classifier(os.path.join(DEFAULT_WEIGHTS, "video", "motion"))
    classifier = load_classifier(os.path.join(DEFAULT_WEIGHTS, "classifier"))
    for frames in (2, motion_net.frames):
        clips, labels, motions = make_clips("test", 1, frames=frames)
        scores = clip_scores(list(clips[:3]), labels[:3], motions[:3], classifier, motion_net, None, None)
        assert scores["class_accuracy"] > 0.5
        assert (scores["motion_accuracy"] is None) == (frames != motion_net.frames)
        assert motion_text(scores).startswith("-") == (frames != motion_net.frames)
