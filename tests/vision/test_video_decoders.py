"""Video decoders on tiny random video priors (vision/video/prior.py's layout and window mask):
the adapter's cached logits follow the training mask; diagonal (frames pipelined) equals ar,
greedy and in law; sjd/mc_sjd with temporal drafts (init="frame") equal ar greedy and are
lossless in law (chi-square against the exact joint law); video_zipar's schedule; CFG."""
import pytest
import torch
from chisq import goodness_of_fit

import suite
from suite import SamplingParams, logits_to_probs
from suite.decoders.raster.video_zipar import Diagonal, VideoZipAR
from tinymodels import tiny_video
from vision.video.prior import PROMPT, VideoLayout


@pytest.fixture(scope="module")
def video():
    return tiny_video()


def prompts(video, pairs):
    return torch.tensor([video.layout.prompt(c, m) for c, m in pairs])


def cfg(video, prompt, scale=2.0):
    lay = video.layout
    null = torch.tensor([[lay.null_motion, lay.null_class]] * len(prompt))
    return suite.ClassifierFreeGuidance(video, scale, null)


def gen(model, prompt, decoder, n, **kw):
    return suite.generate(model, prompt, decoder=decoder, max_new_tokens=n, **kw)


def full_logits(video, seqs: torch.Tensor) -> torch.Tensor:
    """(B, L, K) logits of whole sequences in one uncached forward under the training mask."""
    from vision.video import prevframe
    from vision.video.prior import code_logits
    lay = video.layout
    pos = torch.arange(seqs.shape[1]).expand(len(seqs), -1)
    with torch.no_grad():
        embeds = prevframe.embed(video.model, lay.inputs(seqs, pos), seqs, pos)
        hidden = video.model.model(inputs_embeds=embeds, position_ids=lay.position_ids(pos),
                                   attention_mask=lay.training_mask(seqs.shape[1])[None, None].expand(len(seqs), 1, -1, -1))
        return code_logits(video.model, lay, hidden.last_hidden_state, seqs, pos, lay.motion_index(seqs[:, 0]))


def test_window_mask_sees_prompt_own_frame_and_the_neighbourhood_above():
    lay = VideoLayout(8, 2, 2, frames=2, height=4, width=4, radius=1)
    m = lay.training_mask()
    query = PROMPT + 16 + 4                  # holds cell (1, 1, 0) and predicts (1, 1, 1)
    prev = {PROMPT + r * 4 + c for r in (0, 1, 2) for c in (0, 1, 2)}
    own = set(range(PROMPT + 16, query + 1))     # not the frame-start slot (it holds frame 0's last cell)
    assert set(m[query].nonzero().flatten().tolist()) == {0, 1} | prev | own
    start = PROMPT + 15
    assert m[:, start].nonzero().flatten().tolist() == [start]
    assert lay.inputs(torch.tensor([[5] * 34]), torch.arange(34)[None])[0, PROMPT + 15] == lay.bof


def test_frame_rotary_splits_a_position_into_frame_and_slot():
    """One frame later, the same slot turns only the lowest (frame) pairs; the first frame's
    slots turn as the 1-D rotary turns them (where the image prior's cells sit)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from vision.video.rotary import FRAME_ANGLES
    video = tiny_video()
    rot, cells, n = video.model.model.rotary_emb, video.layout.cells, len(FRAME_ANGLES)
    x = torch.zeros(1)
    pos = torch.arange(2 * cells)[None]
    cos, sin = rot(x, pos)
    half = cos.shape[-1] // 2                # cos = cat(pairs, pairs); the frame pairs are the last n
    assert torch.allclose(cos[0, :cells, :half - n], cos[0, cells:, :half - n])
    assert torch.allclose(cos[0, cells + 3, half - n:half], torch.tensor(FRAME_ANGLES).cos())
    plain_cos, _ = LlamaRotaryEmbedding(video.model.config)(x, pos[:, :cells])
    assert torch.allclose(cos[0, :cells, :half - n], plain_cos[0, :, :half - n])


def test_prev_frame_inputs_read_the_window_above_but_never_a_frame_s_last_cell():
    """Slot p (predicting cell p + 1 - P) reads frame t-1's cells within the radius of its cell;
    frame 0, cells off the grid and the frame's last cell (its slot reads BOF) read "none"."""
    from vision.video.prevframe import PrevFrame
    pf = PrevFrame(codebook=8, hidden=4, height=4, width=4, radius=1, prompt=PROMPT)
    where, ok = pf.neighbours(torch.tensor([PROMPT + 16 + 4]))     # predicts cell (1, 1, 1)
    assert where[ok].tolist() == [PROMPT + r * 4 + c for r in (0, 1, 2) for c in (0, 1, 2)]
    where, ok = pf.neighbours(torch.tensor([PROMPT + 16 + 14]))    # predicts cell (1, 3, 3)
    assert where[ok].tolist() == [PROMPT + 10, PROMPT + 11, PROMPT + 14]
    assert not pf.neighbours(torch.tensor([0, PROMPT - 1, PROMPT + 14]))[1].any()   # frame 0
    lay = VideoLayout(8, 2, 2, frames=2, height=4, width=4, radius=1)
    seen = lay.training_mask()
    for p in range(PROMPT - 1, lay.length - 1):                     # a subset of what the window shows
        where, ok = pf.neighbours(torch.tensor([p]))
        assert seen[p, where[ok]].all()


@pytest.mark.parametrize("positions,inputs,copy", [("frame", "both", "motion"), ("frame", None, "motion"),
                                                   ("frame", "tables", None), ("frame", "copy", None),
                                                   ("frame", None, None), ("1d", None, None)])
def test_cached_ar_follows_the_training_mask(video, positions, inputs, copy):
    """Greedy ar through the adapter (cache, window mask, previous-frame board and motion per step)
    picks the argmax of one uncached forward over its own output under the training mask, at every
    cell (the shipped schemes and older folders': 1-D positions, no previous-frame inputs, no
    motion copy)."""
    video = video if inputs == "both" else tiny_video(positions=positions, inputs=inputs, copy=copy)
    n = video.layout.frames * video.layout.cells
    p = prompts(video, [(0, 1), (1, 0)])
    out = gen(video, p, "ar", n)
    seqs = torch.cat([p, torch.tensor(out.new_tokens)], 1)
    assert torch.equal(full_logits(video, seqs)[:, PROMPT - 1:-1].argmax(-1), seqs[:, PROMPT:])


@pytest.mark.parametrize("guided,positions", [(False, "frame"), (True, "frame"), (False, "1d")])
def test_diagonal_equals_ar_greedy_with_fewer_forwards(video, guided, positions):
    video = video if positions == "frame" else tiny_video(positions="1d", inputs=None, copy=None)
    lay = video.layout
    n = lay.frames * lay.cells
    p = prompts(video, [(0, 0), (1, 1)])
    model = cfg(video, p) if guided else video
    ar, diag = gen(model, p, "ar", n), gen(model, p, Diagonal(), n)
    assert diag.new_tokens == ar.new_tokens
    lag = lay.radius * lay.width + lay.radius + 1      # cells of frame t before frame t+1 starts
    assert diag.stats.num_forwards == lay.cells + (lay.frames - 1) * lag < ar.stats.num_forwards


@pytest.mark.parametrize("guided", [False, True])
def test_diagonal_samples_ar_codes_for_the_same_seed(video, guided):
    # each cell is drawn from its exact conditional with its row's uniform at its position
    # (suite.random_streams): the same seed gives ar's clip, whatever the order cells are filled in
    lay = video.layout
    p = prompts(video, [(0, 0), (1, 1)])
    model = cfg(video, p) if guided else video
    kw = dict(temperature=0.7, top_k=8, seed=3)
    ar, diag = gen(model, p, "ar", lay.frames * lay.cells, **kw), gen(model, p, Diagonal(), lay.frames * lay.cells, **kw)
    assert diag.new_tokens == ar.new_tokens
    other = gen(model, p, "ar", lay.frames * lay.cells, **{**kw, "seed": 4})
    assert other.new_tokens != ar.new_tokens


def test_video_zipar_full_rows_is_diagonal_and_windows_overlap_rows(video):
    lay = video.layout
    n = lay.frames * lay.cells
    p = prompts(video, [(1, 0)])
    assert gen(video, p, VideoZipAR(window=None), n).new_tokens == gen(video, p, "ar", n).new_tokens
    out = gen(video, p, VideoZipAR(window=1), n, temperature=1.0, seed=0)
    assert all(t >= 0 for t in out.new_tokens[0]) and len(out.new_tokens[0]) == n
    assert out.stats.num_forwards < gen(video, p, Diagonal(), n).stats.num_forwards


def test_video_zipar_samples_a_cell_only_once_its_window_above_exists(video):
    """Every cell (t, r, c) is sampled after frame t-1's cells within the radius (the window
    the model sees) and, inside its frame, after `window` more cells of the row above."""
    lay = video.layout
    n = lay.frames * lay.cells
    adapter, dec, state = suite.prepare(video, prompts(video, [(0, 1)]), decoder=VideoZipAR(window=2),
                                        max_new_tokens=n, temperature=1.0, seed=1)
    when = {}
    for step in suite.decode_steps(adapter, dec, state):
        for cell, tok in enumerate(state.rows[0].canvas.tokens):
            if tok >= 0:
                when.setdefault(cell, step.index)
    h, w, rad = lay.height, lay.width, lay.radius
    for cell, t_step in when.items():
        t, r, c = cell // lay.cells, cell % lay.cells // w, cell % w
        if t > 0:
            need = (t - 1) * lay.cells + min(r + rad, h - 1) * w + min(c + rad, w - 1)
            assert when[need] < t_step
        if r > 0:
            assert when[t * lay.cells + (r - 1) * w + min(c + 2, w) - 1] < t_step


@pytest.mark.parametrize("decoder", ["sjd", "mc_sjd"])
@pytest.mark.parametrize("guided,init", [(False, "frame"), (True, "frame"), (False, "motion"), (True, "motion")])
def test_sjd_with_temporal_drafts_equals_ar_greedy(video, decoder, guided, init):
    lay = video.layout
    n = lay.frames * lay.cells
    p = prompts(video, [(0, 1), (1, 1)])
    model = cfg(video, p) if guided else video
    out = gen(model, p, decoder, n, init=init, window=6)
    assert out.new_tokens == gen(model, p, "ar", n).new_tokens
    assert out.stats.num_forwards < n


def test_frame_init_drafts_the_same_cell_of_the_previous_frame(video):
    from suite.decoders.chain.jacobi import init_guesses
    lay = video.layout
    adapter, dec, state = suite.prepare(video, prompts(video, [(0, 0)]), decoder="sjd", init="frame",
                                        max_new_tokens=lay.frames * lay.cells)
    assert dec.period == lay.cells
    state.tokens[0] += list(range(lay.cells)) + [7, 6]
    assert init_guesses(state, 0, 3, "frame", dec.period) == [2, 3, 4]
    state.tokens[0] = state.tokens[0][:PROMPT + 3]
    assert init_guesses(state, 0, 2, "frame", dec.period) == [2, 2]    # first frame: the left neighbour


def test_motion_init_drafts_the_previous_frame_moved_as_the_last_row_moved(video):
    from suite.decoders.chain.jacobi import init_guesses
    lay = video.layout
    adapter, dec, state = suite.prepare(video, prompts(video, [(0, 0)]), decoder="sjd", init="motion",
                                        max_new_tokens=lay.frames * lay.cells)
    assert (dec.period, dec.width) == (lay.cells, lay.width)
    first = list(range(lay.cells))                       # frame 0: cell j holds code j
    moved = [9] + first[:lay.width]                      # frame 1 so far: frame 0 one cell to the right
    state.tokens[0] += first + moved
    assert init_guesses(state, 0, 3, "motion", dec.period, dec.width) == first[lay.width:lay.width + 3]
    assert init_guesses(state, 0, 3, "frame", dec.period) == first[lay.width + 1:lay.width + 4]


V, ROWS, BATCHES = 3, 300, 3


def exact_law(video, prompt, n, params, vocab=V):
    """The exact joint law of the first n codes (every prefix scored by the adapter)."""
    law = {(): 1.0}
    for _ in range(n):
        seqs = list(law)
        ids = torch.tensor([prompt + list(s) for s in seqs])
        pos = torch.arange(ids.shape[1]).expand(len(seqs), -1)
        with torch.no_grad():
            logits = video(ids, pos, video.new_cache(len(seqs)), None)[:, -1]
        probs = logits_to_probs(logits, params)
        law = {s + (t,): law[s] * float(probs[i, t]) for i, s in enumerate(seqs) for t in range(vocab)}
    return law


def sample_law(video, prompt, n, decoder, setting, **options):
    samples, longest = [], 0
    for seed in range(BATCHES):
        out = gen(video, torch.tensor([prompt] * ROWS), decoder, n, seed=seed, **setting, **options)
        samples += [tuple(t) for t in out.new_tokens]
        longest = max([longest] + [k for s in out.stats.accepted_lengths for k in s])
    return samples, longest


@pytest.mark.parametrize("decoder,init", [("sjd", "frame"), ("mc_sjd", "frame"), ("sjd", "motion")])
@pytest.mark.parametrize("setting", [dict(temperature=1.0), dict(temperature=1.0, top_k=2)])
def test_sjd_with_temporal_drafts_is_lossless(decoder, init, setting):
    video = tiny_video(codebook=V, frames=2, grid=(1, 2), radius=1, sharpen=3.0)
    prompt = video.layout.prompt(1, 0)
    samples, longest = sample_law(video, prompt, 4, decoder, setting, init=init, window=3)
    assert goodness_of_fit(samples, exact_law(video, prompt, 4, SamplingParams(**setting))) > 1e-3
    assert longest > 1


def test_diagonal_is_lossless_when_sampling():
    """radius 0 on 2x1 frames: frame 1's first cell is sampled beside frame 0's last (3 forwards, not 4)."""
    video = tiny_video(codebook=V, frames=2, grid=(2, 1), radius=0, sharpen=3.0)
    prompt = video.layout.prompt(0, 1)
    setting = dict(temperature=1.0)
    samples, longest = sample_law(video, prompt, 4, Diagonal(), setting)
    assert goodness_of_fit(samples, exact_law(video, prompt, 4, SamplingParams(**setting))) > 1e-3
    assert longest == 2


def test_video_decoders_need_a_video_adapter():
    from tinymodels import tiny_prior
    with pytest.raises(ValueError, match="video_grid"):
        gen(tiny_prior(), torch.tensor([[16]]), Diagonal(), 16)
    with pytest.raises(ValueError, match="video_grid"):
        gen(tiny_prior(), torch.tensor([[16]]), "sjd", 16, init="frame")


@pytest.mark.parametrize("guided", [False, True])
def test_video_zipar_sjd_full_rows_equals_ar_greedy_in_fewer_forwards_than_diagonal(video, guided):
    from suite.decoders.raster.video_zipar_sjd import VideoZipARSJD
    lay = video.layout
    n = lay.frames * lay.cells
    p = prompts(video, [(0, 0), (1, 1)])
    model = cfg(video, p) if guided else video
    out = gen(model, p, VideoZipARSJD(draft_len=3), n)
    assert out.new_tokens == gen(model, p, "ar", n).new_tokens
    assert out.stats.num_forwards < gen(model, p, Diagonal(), n).stats.num_forwards


@pytest.mark.parametrize("coupled", [True, False])
def test_video_zipar_sjd_is_lossless_when_sampling(coupled):
    from suite.decoders.raster.video_zipar_sjd import VideoZipARSJD
    video = tiny_video(codebook=2, frames=2, grid=(1, 3), radius=1, sharpen=3.0)
    prompt = video.layout.prompt(1, 1)
    setting = dict(temperature=1.0)
    samples, longest = sample_law(video, prompt, 6, VideoZipARSJD(draft_len=2, coupled=coupled), setting)
    law = exact_law(video, prompt, 6, SamplingParams(**setting), vocab=2)
    assert goodness_of_fit(samples, law) > 1e-3
    assert longest > 2


def test_a_written_prior_loads_back_with_its_previous_frame_weights(tmp_path):
    """write_prior records the schemes in video_prior.json and VideoPrior.load reads every weight
    back (the previous-frame tables and copy gates too): the same logits through the cache."""
    from vision.video import data as vdata
    from vision.video import motioncopy, prevframe, rotary
    from vision.video.prior import VideoPrior, build_video_prior
    from vision.video.train import _meta, write_prior
    lay = VideoLayout(8, 10, 6, frames=2, height=2, width=2, radius=1)
    positions, inputs = rotary.meta(), prevframe.meta(1, tables=True, copy=True)
    copy = motioncopy.meta(vdata.MOTIONS, vdata._MOVES)
    torch.manual_seed(0)
    model = build_video_prior(lay, hidden=32, layers=2, heads=4, positions=positions, inputs=inputs, copy=copy).eval()
    with torch.no_grad():
        for param in list(prevframe.module(model).parameters()) + list(motioncopy.module(model).parameters()):
            param.normal_(0, 0.3)
    write_prior(model, lay, str(tmp_path / "prior"), {}, positions, inputs, copy)
    back = VideoPrior.load(str(tmp_path / "prior"))
    assert back.meta["inputs"] == inputs and back.meta["copy"] == copy
    assert torch.equal(motioncopy.module(back.model).gate_bias, motioncopy.module(model).gate_bias)
    video = VideoPrior(model, _meta(lay, positions, inputs, copy))
    seqs = torch.tensor([lay.prompt(1, 0) + [3, 1, 4, 1, 5, 2, 6, 5]])
    pos = torch.arange(seqs.shape[1])[None]
    with torch.no_grad():
        want = video(seqs, pos, video.new_cache(1), None)
        got = back(seqs, pos, back.new_cache(1), None)
    assert torch.equal(want, got)
    with torch.no_grad():                    # and they matter: without the copy gates, other logits
        prevframe.module(back.model).gate.zero_()
        assert not torch.equal(want, back(seqs, pos, back.new_cache(1), None))


def test_motion_copy_reads_the_cell_its_motion_names():
    """A told motion puts its copy mass on the one cell of frame t-1 its offset names ("m0" moves
    one cell right: cell (r, c) reads (r, c - 1)); a learnt one spreads it over the window's cells;
    frame 0 and cells off the grid get none."""
    from vision.video.motioncopy import MotionCopy
    mc = MotionCopy(codebook=8, hidden=4, height=4, width=4, radius=1, prompt=PROMPT, told=[[0, -1], None, None])
    slot = torch.tensor([[PROMPT + 16 + 5, PROMPT + 16 + 3, PROMPT + 3]])     # predict (1,1,2), (1,1,0), (0,1,0)
    told, learnt = mc.weights(slot, torch.tensor([0])), mc.weights(slot, torch.tensor([1]))
    where, _ = mc.neighbours(slot)
    assert where[0, 0, told[0, 0].argmax()] == PROMPT + 1 * 4 + 1 and told[0, 0].sum() == 1
    assert told[0, 1].sum() == 0 and told[0, 2].sum() == 0 and learnt[0, 2].sum() == 0
    assert torch.allclose(learnt[0, 0].sum(), torch.tensor(1.0)) and learnt[0, 1].sum() < 1   # off the grid: less
    board = torch.randint(8, (1, PROMPT + 32))
    with torch.no_grad():
        mc.gate_bias.fill_(20.0)                               # copy only
        out = mc(torch.zeros(1, 3, 8), torch.zeros(1, 3, 4), board, slot, torch.tensor([0]))
    assert out[0, 0].argmax() == board[0, PROMPT + 5] and torch.allclose(out[0, 0].exp().sum(), torch.tensor(1.0))
    assert torch.isfinite(out).all()


def test_guidance_s_unconditional_rows_copy_by_the_null_motion(video):
    """Under classifier-free guidance each row's copy reads its own prompt's motion: at scale 0 the
    guided logits are the null prompt's, as one uncached forward over the null-prompt sequence gives."""
    lay = video.layout
    p = prompts(video, [(0, 0), (1, 1)])
    seqs = torch.cat([p, torch.randint(lay.codebook, (2, lay.frames * lay.cells))], 1)
    model = cfg(video, p, scale=0.0)
    pos = torch.arange(seqs.shape[1]).expand(2, -1)
    with torch.no_grad():
        got = model(seqs, pos, model.new_cache(2), None)
    null = seqs.clone()
    null[:, :PROMPT] = torch.tensor([lay.null_motion, lay.null_class])
    assert torch.allclose(got, full_logits(video, null), atol=1e-4)
    assert not torch.allclose(got, full_logits(video, seqs), atol=1e-2)
