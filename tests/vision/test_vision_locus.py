"""locus (Jacobi-verified box drafts) on scripted box models (exact forward counts, redrafts) and
on a tiny random GroundingModel: identical tokens to `ar` greedy, and in distribution sampling."""
import sys
from pathlib import Path

import pytest
import torch
from chisq import goodness_of_fit
from scripted import PROMPT, TWO_BOXES, BoxScript, ScriptedModel

import suite
from suite.decoders.boxes.locus import Locus
from vision.grounding.model import COORD0, END, EOS, GRID, MASK, NONE, OBJ

sys.path.insert(0, str(Path(__file__).parent))      # the grounding decoder tests' runner and tiny model
from test_vision_grounding_decoders import run, tiny_pipeline  # noqa: E402,F401,F811 (tiny_pipeline: a fixture)


def test_right_drafts_cost_one_forward_per_box():
    model = BoxScript([TWO_BOXES])
    ar, ar_fwd, _ = run(model, "ar")
    out, fwd, events = run(model, Locus())
    assert out == ar == [TWO_BOXES] and ar_fwd == 13
    # the parallel draft of box 1; per box one forward that verifies it and drafts the next (box 2, then EOS)
    assert fwd == 3 and events["box_blocks"] == 2 and "box_fallbacks" not in events


def test_wrong_drafts_are_corrected_and_guessed_again():
    """x0 and y1 wrong in every parallel draft: the first verification keeps the head's box up to
    x0's slot, corrects x0 and takes the chain's own guesses of y0 x1 y1 END (right here); the
    next forward accepts them and drafts the next box."""
    model = BoxScript([TWO_BOXES], noisy=lambda t, j: COORD0 + 999 if j in (2, 5) else t)
    ar, _, _ = run(model, "ar")
    out, fwd, events = run(model, Locus())
    assert out == ar == [TWO_BOXES]
    assert fwd == 1 + 2 * 2 and events["box_fallbacks"] == 2


def test_every_draft_wrong_is_still_ar_with_one_token_per_forward_at_worst():
    model = BoxScript([TWO_BOXES, [NONE], TWO_BOXES[6:]], noisy=lambda t, j: COORD0 + 7)
    ar, ar_fwd, _ = run(model, "ar", rows=3)
    out, fwd, _ = run(model, Locus(), rows=3)
    assert out == ar == [TWO_BOXES, [NONE], TWO_BOXES[6:]]
    assert fwd <= ar_fwd


def test_locus_refuses_a_model_without_a_box_layout():
    from tinymodels import tiny_model
    with pytest.raises(ValueError, match="grounding model adapter"):
        suite.generate(tiny_model("llama"), torch.tensor([[1, 2]]), decoder=Locus(), max_new_tokens=4)


@pytest.mark.parametrize("task", ["aabb", "obb"])
def test_locus_is_ar_on_a_real_model(tiny_pipeline, task):  # noqa: F811 (the fixture)
    from vision.grounding import data
    scenes = [data.scene("test", i, task) for i in range(3)]
    queries = ["the red circle", "the word cat", "the bar left of the blue star"]
    ar = tiny_pipeline([s.image for s in scenes], queries, decoder="ar", task=task)
    loc = tiny_pipeline([s.image for s in scenes], queries, decoder=Locus(), task=task)
    assert [r.tokens for r in loc] == [r.tokens for r in ar]
    assert all(len(r.tokens) > 0 for r in ar)
    assert sum(r.stats.row_forwards for r in loc) <= sum(r.stats.row_forwards for r in ar)


class BranchingBoxes(ScriptedModel):
    """A box model that samples: after the prompt OBJ or NONE, x0 in {C+1, C+2}, each later
    coordinate c+1 or c+2 after c, then END, EOS (equal odds: 1/2 NONE, 1/32 each of 16 boxes).
    A MASK slot drafts the "+1" path (C+1, C+2, C+3, C+4, END), each coordinate with the next value
    as a runner-up (an alternative branch): often right, often not."""

    def __init__(self):
        super().__init__(self.law, vocab=COORD0 + GRID + 1)
        self.config = BoxScript([]).config

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        logits = super().__call__(tokens, positions, cache, attention_mask)
        for r in range(tokens.shape[0]):
            masked = (tokens[r] == MASK).nonzero().flatten().tolist()
            for i in masked:
                m = int(positions[r, i] - positions[r, masked[0]]) + 1          # 1: x0 ... 5: END
                logits[r, i] = -10.0
                logits[r, i, END if m == 5 else COORD0 + m] = 10.0
                if m < 5:
                    logits[r, i, COORD0 + m + 1] = 9.0                       # a runner-up: a branch
        return logits[:, logits_from:]

    @staticmethod
    def law(history):
        gen = history[len(PROMPT):]
        if MASK in gen:
            return 0                                  # a MASK slot: drafted in __call__
        if not gen:
            return [OBJ, NONE]
        coords = gen[1:]
        if len(coords) == 4:
            return END
        if gen[-1] == END:
            return EOS
        return [COORD0 + 1, COORD0 + 2] if not coords else [coords[-1] + 1, coords[-1] + 2]


def test_locus_samples_from_ars_distribution():
    """Temperature 1, top_k 2 (the two equal branches): locus's answers follow the exact law of
    the model's own factorisation (χ²); on the way drafts are accepted, rejected, and taken on branches."""
    model = BranchingBoxes()
    law = {(NONE,): 0.5}
    for path in range(16):
        c, coords = COORD0, []
        for bit in range(4):
            c += 1 + (path >> bit & 1)
            coords.append(c)
        law[(OBJ, *coords, END, EOS)] = 1 / 32
    samples, events = [], {}
    for seed in range(4):
        out = suite.generate(model, torch.tensor([PROMPT] * 200), decoder=Locus(), max_new_tokens=8,
                             temperature=1.0, top_k=2, seed=seed)
        samples += [tuple(t) for t in out.new_tokens]
        for k, v in out.stats.events.items():
            events[k] = events.get(k, 0) + v
    assert goodness_of_fit(samples, law) > 1e-3
    assert events["box_blocks"] > events.get("box_fallbacks", 0) > 0 and events["box_branches"] > 0


def test_branches_of_branches_fix_two_coordinates_one_step_off_in_one_forward():
    """x0 and y1 drafted one grid value high, the right values their runners-up: the tree holds the
    branch at x0 and, below it, the branch at y1, so each box is verified by one forward (a tree
    with branches only off the main chain, tree_slots small, needs a second)."""
    off = {2, 5}
    model = BoxScript([TWO_BOXES], noisy=lambda t, j: {t + 1: 10.0, t: 9.0} if j in off else t)
    ar, _, _ = run(model, "ar")
    out, fwd, events = run(model, Locus())
    assert out == ar == [TWO_BOXES] and fwd == 3 and "box_fallbacks" not in events
    assert events["box_branches"] == 4
    out, fwd, events = run(model, Locus(tree_slots=8))            # x0's branches only (5 slots each)
    assert out == ar and fwd == 5 and events["box_fallbacks"] == 2


def test_modes_branch_to_another_objects_edge():
    """y0 drafted 300 values off with two grid neighbours as runners-up, the right value a weaker
    far mode: only `modes` puts it in the tree."""
    model = BoxScript([TWO_BOXES], noisy=lambda t, j: {t + 300: 10.0, t + 299: 9.5, t + 301: 9.5, t: 8.0}
                      if j == 3 else t)
    ar, _, _ = run(model, "ar")
    out, fwd, events = run(model, Locus(modes=0))
    assert out == ar and events["box_fallbacks"] == 2 and fwd == 5
    out, fwd, events = run(model, Locus())
    assert out == ar and fwd == 3 and "box_fallbacks" not in events


def test_grow_tree_takes_the_likeliest_branches_within_its_slots():
    from suite.decoders.boxes.locus import BoxTree, grow_tree
    tree = BoxTree(main=[10, 20, 30], alts=[[11], [21], []], probs=[[0.6, 0.4], [0.9, 0.1], [1.0]])
    values, depth, parent = grow_tree(tree, budget=5)
    # main chain; then x=11 at depth 0 (0.4, 3 slots); then 21 below 10 (0.6 * 0.1 = 0.06, 2 slots);
    # 21 below 11 (0.04) no longer fits
    assert values == [10, 20, 30, 11, 20, 30, 21, 30]
    assert depth == [0, 1, 2, 0, 1, 2, 1, 2] and parent == [-1, 0, 1, -1, 3, 4, 0, 6]
    assert grow_tree(tree, budget=0) == ([10, 20, 30], [0, 1, 2], [-1, 0, 1])
