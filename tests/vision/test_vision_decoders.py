"""Image decoders on tiny random priors: zipar's masks and positions, sjd/mc_sjd lossless in
distribution over image codes (chi-square against the exact law), zipar_sjd's speculative rule
in law (full window; and window 1 on a prior of Markov rows), CFG composition."""
from dataclasses import replace
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities
import pytest
import torch
from chisq import goodness_of_fit

from tinymodels import tiny_prior

import suite
from suite import SamplingParams, logits_to_probs
from suite.decoders.raster.zipar import ZipAR


@pytest.fixture(scope="module")
def prior():
    return tiny_prior()


def prompts(prior, labels):
    return torch.tensor([[prior.class_token(c)] for c in labels])


def gen(model, prompt, decoder, n, **kw):
    return suite.generate(model, prompt, decoder=decoder, max_new_tokens=n, **kw)


def test_zipar_full_window_equals_ar(prior):
    """window = W starts a row only when the previous one is complete: exactly ar (greedy)."""
    h, w = prior.grid
    p = prompts(prior, [0, 1, 2])
    ar = gen(prior, p, "ar", h * w)
    zip_ = gen(prior, p, ZipAR(window=w), h * w)
    assert zip_.new_tokens == ar.new_tokens
    assert zip_.stats.num_forwards == ar.stats.num_forwards == h * w


def test_zipar_full_window_equals_ar_under_cfg(prior):
    h, w = prior.grid
    p = prompts(prior, [2, 0])
    null = torch.full_like(p, prior.config.extra["null_class_id"])
    cfg = suite.ClassifierFreeGuidance(prior, 2.5, null)
    assert gen(cfg, p, ZipAR(window=w), h * w).new_tokens == gen(cfg, p, "ar", h * w).new_tokens


def test_zipar_queries_see_exactly_the_generated_tokens(prior):
    """Replay a zipar run (window 1, greedy): each sampled cell must equal the argmax of a plain,
    uncached forward over the generated raster-earlier tokens at their true positions."""
    h, w = prior.grid
    p = prompts(prior, [1])
    adapter, dec, state = suite.api.prepare(prior, p, decoder=ZipAR(window=1), max_new_tokens=h * w)
    canvas_before = None
    for step in suite.decode_steps(adapter, dec, state):
        canvas = state.rows[0].canvas.tokens
        before = canvas_before or [-1] * (h * w)
        for cell in [i for i in range(h * w) if canvas[i] >= 0 and before[i] < 0]:
            seen = [i for i in range(cell) if before[i] >= 0]
            prev = cell - 1
            src_tok = before[prev] if prev >= 0 and before[prev] >= 0 else (
                [before[i] for i in seen][-1] if seen else int(p[0, 0]))
            seen_in = [i for i in seen if i != prev]
            ids = [int(p[0, 0])] + [before[i] for i in seen_in] + [src_tok]
            pos = [0] + [1 + i for i in seen_in] + [cell]     # query at raster slot of cell-1 (= position cell)
            if prev < 0:
                ids, pos = [int(p[0, 0])], [0]
            with torch.no_grad():
                out = prior.model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos])).logits
            assert int(out[0, -1, :prior.codebook_size].argmax()) == canvas[cell], f"cell {cell}"
        canvas_before = list(canvas)
    assert state.stats.num_forwards < h * w


def test_zipar_window_schedule_counts_forwards(prior):
    h, w = prior.grid
    for window in (1, 2, 3):
        out = gen(prior, prompts(prior, [0, 1]), ZipAR(window=window), h * w, temperature=1.0, seed=3)
        assert out.stats.num_forwards == w + (h - 1) * window
        assert all(len(t) == h * w for t in out.new_tokens)


def test_zipar_adaptive_without_room_to_wait_is_plain_zipar(prior):
    """max_window = window leaves no row pending: the same tokens and forwards as fixed ZipAR."""
    h, w = prior.grid
    p = prompts(prior, [0, 1, 2])
    plain = gen(prior, p, ZipAR(window=2), h * w, temperature=1.0, seed=5)
    adaptive = gen(prior, p, ZipAR(window=2, adaptive=True, max_window=2), h * w, temperature=1.0, seed=5)
    assert adaptive.new_tokens == plain.new_tokens
    assert adaptive.stats.num_forwards == plain.stats.num_forwards


class ScriptedPrior(AdapterBase):
    """A greedy prior whose code for each predicted cell is `code(cell, width)` (the tiny prior runs
    alongside only to keep the cache in step); `calls` counts the forwards."""

    def __init__(self, prior):
        self.prior, self.config = prior, prior.config
        self.capabilities = Capabilities(custom_mask=True)
        self.calls = 0

    def new_cache(self, batch, max_len=None):
        return self.prior.new_cache(batch, max_len)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from=0):
        self.prior(tokens, positions, cache, attention_mask, logits_from)
        self.calls += 1
        cell = positions[:, logits_from:]                                        # slot at position s predicts cell s
        code = self.code(cell, self.config.extra["grid"][1])
        return torch.nn.functional.one_hot(code, self.config.vocab_size).float() * 10


class FirstColumnScripted(ScriptedPrior):
    """Code 0 everywhere, except the first cell of rows below row 0 when `flip`: there the code
    flips with every forward, so no first-token draft is ever stable."""

    def __init__(self, prior, flip):
        super().__init__(prior)
        self.flip = flip

    def code(self, cell, width):
        first_below = (cell % width == 0) & (cell >= width)
        return torch.where(first_below & self.flip, torch.full_like(cell, self.calls % 2), torch.zeros_like(cell))


@pytest.mark.parametrize("flip", [False, True])
def test_zipar_adaptive_starts_rows_when_their_first_token_is_stable(flip):
    """Stable first tokens pass their check at once: fixed window-2 forwards. Ever-changing ones
    fail every check: each row waits for max_window cells above, as fixed window 4 would."""
    prior = tiny_prior(grid=(4, 8))
    h, w = prior.grid
    out = gen(FirstColumnScripted(prior, flip), prompts(prior, [0, 1]), ZipAR(window=2, adaptive=True, max_window=4),
              h * w)
    assert out.stats.num_forwards == w + (h - 1) * (4 if flip else 2)
    assert all(len(t) == h * w for t in out.new_tokens)


def test_zipar_max_window_below_window_is_refused(prior):
    h, w = prior.grid
    with pytest.raises(ValueError, match="max_window must be >= window"):
        gen(prior, prompts(prior, [0]), ZipAR(window=3, adaptive=True, max_window=2), h * w)


def test_zipar_needs_a_grid():
    from tinymodels import tiny_model
    with pytest.raises(ValueError, match="grid"):
        suite.generate(tiny_model("llama"), torch.tensor([[1, 2]]), decoder=ZipAR(), max_new_tokens=4)


# ---- lossless in distribution: sjd / mc_sjd over image codes (exact law by enumeration)

V, NEW, ROWS, BATCHES = 4, 3, 300, 3


def exact_law(model, prompt, params):
    law = {(): 1.0}
    for _ in range(NEW):
        seqs = list(law)
        with torch.no_grad():
            logits = model.model(input_ids=torch.tensor([prompt + list(s) for s in seqs])).logits[:, -1, :V]
        probs = logits_to_probs(logits, params)
        law = {s + (t,): law[s] * float(probs[i, t]) for i, s in enumerate(seqs) for t in range(V)}
    return law


@pytest.mark.parametrize("decoder", ["sjd", "mc_sjd"])
@pytest.mark.parametrize("setting", [dict(temperature=1.0), dict(temperature=1.0, top_k=3)])
def test_sjd_lossless_on_image_codes(decoder, setting):
    prior = tiny_prior(codebook=V, classes=2, grid=(2, 2), sharpen=3.0)
    prior.capabilities = replace(prior.capabilities, row_widths=None)    # every row of the 300 drafts
    prompt = [prior.class_token(1)]
    law = exact_law(prior, prompt, SamplingParams(**setting))
    samples, longest = [], 0
    for seed in range(BATCHES):
        out = gen(prior, torch.tensor([prompt] * ROWS), decoder, NEW, seed=seed, init="left", window=3, **setting)
        samples += [tuple(t) for t in out.new_tokens]
        longest = max([longest] + [n for s in out.stats.accepted_lengths for n in s])
    assert goodness_of_fit(samples, law) > 1e-3
    assert longest > 1


def test_zipar_sjd_full_window_equals_ar_greedy(prior):
    from suite.decoders.raster.zipar_sjd import ZipARSJD
    h, w = prior.grid
    p = prompts(prior, [0, 1, 2])
    ar = gen(prior, p, "ar", h * w)
    out = gen(prior, p, ZipARSJD(window=w, draft_len=3), h * w)
    assert out.new_tokens == ar.new_tokens
    assert out.stats.num_forwards <= ar.stats.num_forwards


@pytest.mark.parametrize("coupled", [True, False])
def test_zipar_sjd_accepts_drafts_and_fills_the_grid(prior, coupled):
    from suite.decoders.raster.zipar_sjd import ZipARSJD
    h, w = prior.grid
    out = gen(prior, prompts(prior, [0, 1]), ZipARSJD(window=2, draft_len=3, coupled=coupled), h * w,
              temperature=1.0, seed=0)
    assert all(len(t) == h * w and all(0 <= x < prior.codebook_size for x in t) for t in out.new_tokens)
    assert out.stats.num_forwards <= w + (h - 1) * 2


def test_zipar_sjd_row_law_matches_ar_with_full_window():
    """window = W: rows never overlap, so the in-row speculative rule must give ar's joint law."""
    from suite.decoders.raster.zipar_sjd import ZipARSJD
    prior = tiny_prior(codebook=V, classes=2, grid=(1, 3), sharpen=3.0)
    prompt = [prior.class_token(0)]
    law = exact_law(prior, prompt, SamplingParams(temperature=1.0))
    samples, longest = [], 0
    for seed in range(BATCHES):
        out = gen(prior, torch.tensor([prompt] * ROWS), ZipARSJD(window=3, draft_len=2), 3, temperature=1.0, seed=seed)
        samples += [tuple(t) for t in out.new_tokens]
        longest = max([longest] + [n for s in out.stats.accepted_lengths for n in s])
    assert goodness_of_fit(samples, law) > 1e-3
    assert longest > 1


class RowScripted(ScriptedPrior):
    """Row-0 cells' code flips with the cell and with every forward (so row-0 drafts fail); 0 below
    row 0 (so every draft passes): lower rows would outrun the row above them."""

    def code(self, cell, width):
        return torch.where(cell < width, (cell + self.calls) % 2, torch.zeros_like(cell))


@pytest.mark.parametrize("decoder", [ZipAR(window=2), ZipAR(window=2, adaptive=True), "zipar_sjd",
                                     "zipar_sjd adaptive", "zipar_sjd cross_rows", "zipar_sjd cross_rows adaptive"])
def test_a_cell_is_decoded_only_once_window_cells_above_it_exist(decoder):
    """ZipAR's locality rule: cell (r, c) is sampled only after row r-1 holds min(c + window, W)
    cells, so each token sees the cells above and right of it. zipar_sjd's in-row drafts must
    keep it too: they may not run ahead of the row above. With cross_rows a row's guesses may
    stand on the row above's guesses of the same forward, but only on accepted ones: row 0's
    guesses always fail here, so every lower-row guess that saw one must be dropped."""
    from suite.decoders.raster.zipar_sjd import ZipARSJD
    prior = tiny_prior(grid=(4, 8))
    model = RowScripted(prior)
    h, w = prior.grid
    cross = isinstance(decoder, str) and "cross_rows" in decoder
    if isinstance(decoder, str):
        decoder = ZipARSJD(window=2, draft_len=6, adaptive=decoder.endswith("adaptive"), cross_rows=cross)
    adapter, dec, state = suite.api.prepare(model, prompts(prior, [0, 1]), decoder=decoder, max_new_tokens=h * w)
    before = [[-1] * (h * w) for _ in range(2)]
    for _ in suite.decode_steps(adapter, dec, state):
        for b in range(2):
            now = state.rows[b].canvas.tokens
            for cell in (i for i in range(h * w) if now[i] >= 0 and before[b][i] < 0):
                r, c = divmod(cell, w)
                above = sum(t >= 0 for t in before[b][(r - 1) * w:r * w]) if r else w
                if cross and r:          # + the row above's guesses accepted in this forward (not its new token)
                    above = max(above, sum(t >= 0 for t in now[(r - 1) * w:r * w]) - 1)
                assert above >= min(c + 2, w), f"row {b}: cell ({r}, {c}) saw {above} cells above"
            before[b] = list(now)


class ZeroScripted(ScriptedPrior):
    """Code 0 everywhere: every left-neighbour guess is right."""

    def code(self, cell, width):
        return torch.zeros_like(cell)


def test_zipar_sjd_cross_rows_guesses_ride_on_the_row_above():
    """When every guess passes, a row's guesses need not wait a forward for the row above's to be
    committed: fewer forwards, the same (greedy) image."""
    from suite.decoders.raster.zipar_sjd import ZipARSJD
    prior = tiny_prior(grid=(4, 8))
    h, w = prior.grid
    outs = [gen(ZeroScripted(prior), prompts(prior, [0, 1]), ZipARSJD(window=3, draft_len=3, cross_rows=cross), h * w)
            for cross in (False, True)]
    assert outs[0].new_tokens == outs[1].new_tokens == [[0] * (h * w)] * 2
    assert outs[1].stats.num_forwards < outs[0].stats.num_forwards


def test_cross_row_mask_sees_the_row_above_up_to_its_reach():
    """A guess sees the row above's guesses up to `above_reach` positions back, and no others."""
    from suite.decoders.raster.zipar import REAL, slot_mask
    # width 8, window 2 (reach 6): row 0 guesses at positions 3..5, row 1 guesses at 9..10, row 2 at 17
    slots = [(0, 2, REAL), (0, 3, 0), (0, 4, 0), (0, 5, 0), (0, 9, 1), (0, 10, 1), (0, 17, 2)]
    m = slot_mask(slots, above_reach=6, device="cpu")
    assert m[4, :4].tolist() == [True, True, False, False]      # (1, 1) sees row 0 up to column 3
    assert m[5, :4].tolist() == [True, True, True, False]       # (1, 2) up to column 4
    assert m[6].tolist() == [True, False, False, False, True, True, True]   # not row 0's guesses
    assert not slot_mask(slots, device="cpu")[4:6, 1:4].any()                 # without cross rows: none of them


class MarkovRows(ScriptedPrior):
    """A sampling prior whose rows are independent Markov chains over V codes: a row's first cell
    from its own fixed law, each later cell from a law set by its left neighbour (the token its
    query slot holds). Every decoder that lets a cell see its left neighbour samples the same
    joint law, so zipar_sjd's speculative rule can be checked at window < W, cross rows included."""

    def __init__(self, prior, first, step):
        super().__init__(prior)
        self.first, self.step = first, step        # (H, V) logits of row starts; (V, V) left -> next

    def __call__(self, tokens, positions, cache, attention_mask, logits_from=0):
        self.prior(tokens, positions, cache, attention_mask, logits_from)
        w = self.config.extra["grid"][1]
        cell, left = positions[:, logits_from:], tokens[:, logits_from:]          # slot at position s predicts cell s
        v = self.step.shape[0]
        law = torch.where((cell % w == 0)[..., None], self.first[(cell // w).clamp(max=len(self.first) - 1)],
                          self.step[left.clamp(0, v - 1)])
        out = torch.full((*cell.shape, self.config.vocab_size), -1e9)
        out[..., :v] = law
        return out

    def law(self, h, w) -> dict:
        import itertools
        first, step = self.first.log_softmax(-1), self.step.log_softmax(-1)
        out = {}
        for grid in itertools.product(range(self.step.shape[0]), repeat=h * w):
            rows = [grid[r * w:(r + 1) * w] for r in range(h)]
            logp = sum(first[r, row[0]] + sum(step[a, b] for a, b in zip(row, row[1:])) for r, row in enumerate(rows))
            out[grid] = float(logp.exp())
        return out


@pytest.mark.parametrize("cross_rows", [False, True])
def test_zipar_sjd_is_lossless_where_the_prior_needs_only_the_left_neighbour(cross_rows):
    """window 1 < W: rows overlap and guesses ride on the row above's (cross_rows), yet every cell
    sees its left neighbour, so on a prior of independent Markov rows zipar_sjd must sample that
    prior's exact joint law (chi-square), with multi-token acceptances."""
    from suite.decoders.raster.zipar_sjd import ZipARSJD
    prior = tiny_prior(codebook=4, classes=2, grid=(2, 3))
    g = torch.Generator().manual_seed(0)
    model = MarkovRows(prior, torch.randn(2, 2, generator=g), 1.5 * torch.randn(2, 2, generator=g))
    law = model.law(2, 3)
    samples, longest = [], 0
    for seed in range(BATCHES):
        out = gen(model, torch.tensor([[prior.class_token(0)]] * ROWS),
                  ZipARSJD(window=1, draft_len=3, cross_rows=cross_rows), 6, temperature=1.0, seed=seed)
        samples += [tuple(t) for t in out.new_tokens]
        longest = max([longest] + [n for s in out.stats.accepted_lengths for n in s])
    assert goodness_of_fit(samples, law) > 1e-3
    assert longest > 2


def test_sjd_windows_follow_the_rows_on_a_cpu():
    """On a CPU the prior's step gives a row 17 slots (16 guesses) in a step of up to 4 rows, 5 up to 8 and
    1 past that (vision.prior.CPU_ROW_WIDTHS): drafts pay for few images, not for many."""
    from suite.api import prepare
    from suite.loop import decode_steps
    prior = tiny_prior(grid=(6, 6))
    for rows, most in ((2, 17), (6, 5), (10, 1)):
        _, decoder, state = prepare(prior, [[prior.class_token(0)]] * rows, decoder="sjd", window=16, init="left",
                                    max_new_tokens=36, temperature=1.0, seed=0)
        widths = [step.draft_size for step in decode_steps(prior, decoder, state)]
        assert max(widths) == most, (rows, widths)
