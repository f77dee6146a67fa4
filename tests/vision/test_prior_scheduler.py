"""Every image and video decoder through one scheduler under classifier-free guidance: seeded
sampled requests at different scales, one arriving while another runs, share forwards and each
gets the tokens it gets decoded alone (their rows draw from their own streams, `batch_independent`)."""
import pytest
import torch
from tinymodels import tiny_prior, tiny_video

import suite
from suite.scheduler import Scheduler
from vision.pipeline import DECODERS as IMAGE_DECODERS, IMAGE_DEFAULTS
from vision.video.pipeline import DECODERS as VIDEO_DECODERS, VIDEO_DEFAULTS


@pytest.fixture(scope="module")
def image():
    from vision.position_queries import add_query_tokens
    from vision.prior import ImagePrior
    prior = tiny_prior(codebook=16, classes=3, grid=(4, 4))
    torch.manual_seed(1)
    with_queries = ImagePrior(prior.model, add_query_tokens(prior.model, prior.meta))   # lpd's position queries
    return with_queries, [[prior.class_token(0)], [prior.class_token(2)]], prior.class_token(1), 16


@pytest.fixture(scope="module")
def video():
    prior = tiny_video()
    rows = [list(prior.layout.prompt(0, 1)), list(prior.layout.prompt(1, 0))]
    return prior, rows, prior.layout.null_class, 3 * 16


def guided(prior, rows, null, scale):
    return suite.ClassifierFreeGuidance(prior, scale, torch.tensor([[null] * len(r) for r in rows]))


def serve_as_alone(case, decoder, options):
    prior, rows, null, budget = case
    requests = [([rows[0]], 3, 2.0), (rows, 4, 1.5), ([rows[1]], 3, 3.0)]      # (rows, seed, guidance scale)
    kw = dict(decoder=decoder, max_new_tokens=budget, temperature=1.0, **options)
    alone = [suite.generate(guided(prior, r, null, s), r, seed=seed, **kw).new_tokens for r, seed, s in requests]
    sched = Scheduler(guided(prior, rows[:1], null, 1.0), max_rows=8)

    def submit(r, seed, scale, stream=False):
        return sched.submit(r, seed=seed, bound=guided(prior, r, null, scale), stream=stream, **kw)
    handles = [submit(*requests[0], stream=True), submit(*requests[1])]
    next(handles[0].steps())                         # the third arrives while the first two run
    handles.append(submit(*requests[2]))
    assert [h.result().new_tokens for h in handles] == alone
    assert set(handles[0].forward_ids) & set(handles[1].forward_ids) & set(handles[2].forward_ids)
    sched.close()
    assert sched.live_rows == 0


@pytest.mark.parametrize("decoder", IMAGE_DECODERS)
def test_image_decoders_serve_each_request_as_alone(image, decoder):
    serve_as_alone(image, decoder, {**IMAGE_DEFAULTS.get(decoder, {}), **({"steps": 6} if decoder == "lpd" else {})})


@pytest.mark.parametrize("decoder", VIDEO_DECODERS)
def test_video_decoders_serve_each_request_as_alone(video, decoder):
    serve_as_alone(video, decoder, VIDEO_DEFAULTS.get(decoder, {}))
