"""Box decoders (ar, parallel_box, hybrid) on scripted grounding models (exact forward counts,
validation and fallback) and on a tiny random GroundingModel built from config (hybrid with an
unreachable confidence floor is exactly ar, through the real GPT-2 cache path)."""
import pytest
import torch
from scripted import PROMPT, TWO_BOXES, BoxScript

import suite
from suite import DecodeState, SamplingParams
from suite.decoders.boxes.hybrid_box import HybridBox, fallback_reasons
from suite.decoders.boxes.parallel_box import BoxLayout, ParallelBox, block_problem
from vision.grounding.model import COORD0, END, EOS, GRID, MASK, NONE, OBJ

C = COORD0


def run(model, decoder, rows=1):
    dec = suite.make_decoder(decoder) if isinstance(decoder, str) else decoder
    dec = dec.bind(model) if hasattr(dec, "bind") else dec
    state = DecodeState(tokens=[list(PROMPT) for _ in range(rows)], cache=model.new_cache(rows),
                        params=SamplingParams(), max_new_tokens=25, eos_token_ids=frozenset([EOS, NONE]))
    res = suite.decode(model, dec, state)
    return res.new_tokens, res.stats.num_forwards, res.stats.events


def test_parallel_box_decodes_a_block_per_forward():
    model = BoxScript([TWO_BOXES])
    ar, ar_fwd, _ = run(model, "ar")
    par, par_fwd, events = run(model, ParallelBox())
    hyb, hyb_fwd, hs = run(model, HybridBox())
    assert ar == par == hyb == [TWO_BOXES]
    assert ar_fwd == len(TWO_BOXES) == 13
    assert par_fwd == hyb_fwd == 3                # two box blocks, then the EOS head
    assert events["box_blocks"] == hs["box_blocks"] == 2 and "box_fallbacks" not in hs


def test_no_match_and_ragged_batch():
    model = BoxScript([[NONE], TWO_BOXES])
    ar, _, _ = run(model, "ar", rows=2)
    par, fwd, _ = run(model, ParallelBox(), rows=2)
    assert par == ar == [[NONE], TWO_BOXES]
    assert fwd == 3


def swap_x1(target, j):
    """Noisy slot 4 (x1) predicts grid value 0: x1 < x0 in every parallel block."""
    return COORD0 if j == 4 else target


def test_hybrid_falls_back_to_ar_on_an_invalid_block():
    model = BoxScript([TWO_BOXES], noisy=swap_x1)
    ar, ar_fwd, _ = run(model, "ar")
    par, _, _ = run(model, ParallelBox(ordered=False))
    hyb, hyb_fwd, events = run(model, HybridBox())
    assert par != ar                               # the lossy decoder keeps the broken box
    assert par[0][3] == COORD0
    ordered, _, _ = run(model, ParallelBox())      # default: the far corner is chosen again past x0
    x0 = TWO_BOXES[1]
    assert ordered[0][3] == x0 + 1 and ordered[0][9] == TWO_BOXES[7] + 1    # all later values tie in the script
    assert ordered[0][:3] + ordered[0][4:9] + ordered[0][10:] == TWO_BOXES[:3] + TWO_BOXES[4:9] + TWO_BOXES[10:]
    assert hyb == ar                               # hybrid re-decodes both blocks: exactly ar's tokens
    assert events["box_fallbacks"] == 2 and fallback_reasons(events) == {"geometry": 2}
    # the parallel forward (first head); per box one verification forward (keeps x0 y0, corrects
    # x1; y1 and END stay queued as drafts), then one forward that accepts y1 END and scores the
    # next block (box 2's head and slots; after box 2 the EOS head)
    assert hyb_fwd == 1 + 2 * 2 < ar_fwd


def test_hybrid_verification_accepting_a_whole_block():
    """Right but 'unconfident' parallel blocks (floor above 1): verification accepts every slot."""
    model = BoxScript([TWO_BOXES, [NONE], TWO_BOXES[6:]])
    ar, _, _ = run(model, "ar", rows=3)
    hyb, fwd, events = run(model, HybridBox(confidence_floor=1.5), rows=3)
    assert hyb == ar and fallback_reasons(events) == {"confidence": 3}
    # the parallel forward (first head), then per box one forward that verifies its drafts and
    # scores the next block (box 2, then the EOS head) in the same pass
    assert fwd == 1 + 2


def test_hybrid_redrafts_the_slots_after_a_disagreement():
    """x0 and y1 both wrong in every parallel block: the verification corrects x0 and takes AR's
    own guesses from the same forward as the drafts of y0 x1 y1 END (right in this script), so
    the next forward accepts them all and scores the next block; output exactly ar's."""
    model = BoxScript([TWO_BOXES], noisy=lambda t, j: COORD0 + 999 if j in (2, 5) else t)
    ar, ar_fwd, _ = run(model, "ar")
    hyb, fwd, events = run(model, HybridBox(confidence_floor=0.0))
    assert hyb == ar == [TWO_BOXES] and events["box_fallbacks"] == 2
    # first head; per box: verify (corrects x0, redrafts), verify with the next block scored
    assert fwd == 1 + 2 * 2 < ar_fwd


def test_hybrid_catches_misplaced_structure_tokens():
    model = BoxScript([TWO_BOXES], noisy=lambda t, j: OBJ if t == END else t)
    hyb, fwd, events = run(model, HybridBox())
    assert hyb == [TWO_BOXES] and fallback_reasons(events) == {"structure": 2}
    assert fwd == 2 * 2 + 1                        # verification keeps the 4 coordinates, corrects END


def test_hybrid_verification_with_a_wrong_first_slot_and_a_ragged_batch():
    """Every parallel x0 is wrong (x0 > x1): verification keeps nothing, AR redoes the block; three
    ragged rows (two boxes, no match, one box) advance independently."""
    model = BoxScript([TWO_BOXES, [NONE], TWO_BOXES[6:]], noisy=lambda t, j: COORD0 + 999 if j == 2 else t)   # x0
    ar, _, _ = run(model, "ar", rows=3)
    hyb, _, events = run(model, HybridBox(confidence_floor=0.0), rows=3)
    assert hyb == ar == [TWO_BOXES, [NONE], TWO_BOXES[6:]]
    assert fallback_reasons(events) == {"geometry": 3}


def test_block_problem_rules():
    lay = BoxLayout(6, MASK, OBJ, END, COORD0, COORD0 + GRID)
    good = [OBJ, C + 10, C + 20, C + 30, C + 40, END]
    assert block_problem(good, [1.0] * 6, lay, 0.5) is None
    assert block_problem(good, [1.0] * 5 + [0.4], lay, 0.5) == "confidence"
    assert block_problem([OBJ, C + 30, C + 20, C + 10, C + 40, END], [1.0] * 6, lay, 0.5) == "geometry"
    assert block_problem([OBJ, C + 10, C + 20, C + 30, C + 40, OBJ], [1.0] * 6, lay, 0.5) == "structure"
    assert block_problem([OBJ, 3, C + 20, C + 30, C + 40, END], [1.0] * 6, lay, 0.5) == "structure"
    obb = BoxLayout(8, MASK, OBJ, END, COORD0, COORD0 + GRID, "cxcywh_cs")
    unit = [C + 1000, C + 500]                     # cos 2θ = 1, sin 2θ = 0
    assert block_problem([OBJ, C + 500, C + 500, C + 200, C + 100, *unit, END], [1.0] * 8, obb, 0.5) is None
    assert block_problem([OBJ, C + 500, C + 500, C + 200, C + 100, C + 500, C + 500, END], [1.0] * 8, obb, 0.5) == "geometry"
    assert block_problem([OBJ, C + 950, C + 500, C + 200, C + 100, *unit, END], [1.0] * 8, obb, 0.5) == "outside"


def test_box_decoders_refuse_a_model_without_a_box_layout():
    from tinymodels import tiny_model
    with pytest.raises(ValueError, match="grounding model adapter"):
        suite.generate(tiny_model("llama"), torch.tensor([[1, 2]]), decoder="parallel_box", max_new_tokens=4)


@pytest.fixture(scope="module")
def tiny_pipeline():
    from vision.grounding import data
    from vision.grounding.model import GroundingModel, QueryTokenizer, default_config
    from vision.grounding.pipeline import DEFAULT_WEIGHTS, GroundingPipeline
    torch.manual_seed(0)
    tok = QueryTokenizer.build(DEFAULT_WEIGHTS / "tokenizer.json", data.all_query_texts())
    cfg = default_config(len(tok.bpe_ids))
    cfg.update(n_embd=32, n_layer=2, n_head=2, query_bpe_ids=tok.bpe_ids)
    model = GroundingModel(cfg).eval()
    with torch.no_grad():
        model.decoder.lm_head.weight.mul_(8.0)    # sharpen: greedy paths not decided by float noise
    model.tokenizer = tok
    return GroundingPipeline(model, grammar=False)     # raw decoders: the random model may break the layout


@pytest.mark.parametrize("task", ["aabb", "obb"])
def test_hybrid_with_unreachable_floor_is_ar_on_a_real_model(tiny_pipeline, task):
    from vision.grounding import data
    scenes = [data.scene("test", i, task) for i in range(3)]
    queries = ["the red circle", "the word cat", "the bar left of the blue star"]
    ar = tiny_pipeline([s.image for s in scenes], queries, decoder="ar", task=task)
    hyb = tiny_pipeline([s.image for s in scenes], queries, decoder="hybrid", task=task, confidence_floor=1.01)
    par = tiny_pipeline([s.image for s in scenes], queries, decoder="parallel_box", task=task)
    assert [r.tokens for r in hyb] == [r.tokens for r in ar]
    assert all(len(r.tokens) > 0 for r in ar)
    assert par[0].stats.row_forwards < ar[0].stats.row_forwards


def test_grammar_filter_allows_each_slot_its_tokens():
    from vision.grounding.grammar import allowed_mask
    P, B, V = 5, 6, COORD0 + GRID + 1 + 40
    q = torch.arange(3, 5 + 2 * B + 1)[None]                  # prompt slots, two blocks, a head
    allow = allowed_mask(q, torch.tensor([P]), B, V)[0]       # (N, V)
    kinds = []
    for row in allow:
        ids = set(row.nonzero().flatten().tolist())
        kinds.append("any" if len(ids) == V else "head+none" if ids == {OBJ, EOS, NONE} else "head" if ids == {OBJ, EOS}
                     else "end" if ids == {END} else "coord" if ids == set(range(COORD0, COORD0 + GRID + 1)) else "?")
    assert kinds == ["any", "any", "head+none"] + ["coord"] * 4 + ["end", "head"] + ["coord"] * 4 + ["end", "head"]
