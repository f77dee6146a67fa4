"""The contract every registered decoder keeps, driven by suite's registry: each decoder runs on a
small model of its modality; it respects max_new_tokens and EOS, counts its forwards honestly (the
adapter's real calls), and where its entry says "exact" or "in distribution" against `ar`, its
greedy fp32 output equals `ar`'s. (The χ² test of the in-distribution ones: tests/core/test_distribution.py,
driven by the same registry.)"""
import dataclasses
import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from tinymodels import tiny_diffusion_gemma, tiny_eagle_head, tiny_model, tiny_prior, tiny_tts, tiny_video

import suite
from suite import CTCHypothesis, RequestInputs
from suite.registry import GUARANTEES, MODALITIES, REGISTRY
from suite.scheduler import Scheduler
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

ROOT = Path(__file__).resolve().parents[1]
DECODER_FOLDERS = [ROOT / "suite" / "decoders"]


def declared_decoder_names() -> set[str]:
    """`name: ClassVar[str] = "..."` of every decoder class in the source."""
    names = set()
    for folder in DECODER_FOLDERS:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "name" \
                        and isinstance(node.value, ast.Constant) and "ClassVar" in ast.unparse(node.annotation):
                    names.add(node.value.value)
    return names - {"frames"}          # the frame decoders' shared base class


def test_registry_lists_every_decoder():
    assert declared_decoder_names() == set(REGISTRY)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_entry_resolves_to_its_class_and_is_tagged(name):
    entry = REGISTRY[name]
    assert suite.DECODERS[name].name == name
    assert entry.guarantee in GUARANTEES and entry.summary
    assert all(m == "any" or m in MODALITIES for m in entry.modalities)


def test_list_decoders_filters():
    assert suite.list_decoders("grounding", chain=("ar",)) == ["ar", "parallel_box", "hybrid", "locus"]
    assert "eagle" in suite.list_decoders("text") and "eagle" not in suite.list_decoders("image")
    assert set(suite.list_decoders("image")) >= {e.name for e in REGISTRY.values() if e.modalities == ("any",)}
    assert "lookahead" not in suite.list_decoders(adapter=_NoCustomMask())
    with pytest.raises(ValueError, match="unknown modality"):
        suite.list_decoders("smell")


class _NoCustomMask(AdapterBase):
    capabilities = Capabilities()


# ---------------------------------------------------------------- one small model per modality

@dataclass
class Case:
    adapter: object                # a suite.ModelAdapter
    rows: list                     # prompt rows
    budget: int
    options: dict = field(default_factory=dict)
    inputs: RequestInputs | None = None
    eos_is_a_token: bool = True    # can the model's EOS be set to a generated token (single-id EOS)
    budgets: tuple[int, ...] = (1, 3)   # max_new_tokens to try besides `budget`


class Counting:
    """An adapter proxy counting the forwards that really happen (decoding only: no cost-curve
    calibration forwards, which suite/cost.py would otherwise run through it)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0
        self.capabilities = dataclasses.replace(inner.capabilities, cost_model=False)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def __class__(self):         # isinstance checks see the wrapped adapter
        return type(self.inner)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


def _text_case(name):
    model = tiny_model("llama")
    opts = {"speculative": {"draft_model": tiny_model("llama", seed=1)},
            "eagle": {"draft_head": tiny_eagle_head(model)}}.get(name, {})
    return Case(suite.as_adapter(model), [[5, 6, 7, 8, 9, 5, 6, 7], [20, 21, 22, 20, 21]], 12, opts)


def _diffusion_gemma_case(name):
    """DiffusionGemma's own sampler runs on a DiffusionGemma adapter only (few steps: a cheap contract)."""
    from text.diffusion_gemma import DiffusionGemmaAdapter
    return Case(DiffusionGemmaAdapter(tiny_diffusion_gemma(canvas_length=4)), [[5, 6, 7, 8, 9, 5, 6, 7], [20, 21, 22]],
                10, {"max_denoising_steps": 3})


def _document_case(name):
    case = _text_case("ar")
    rows = case.rows
    if "mask_token_id" in suite.decoder_options(name):
        case.options = {"mask_token_id": 3}
    if name == "ngram_prior":
        case.inputs = RequestInputs(prior_tokens=tuple(list(r) + [5, 6, 7] for r in rows))
    if name == "ctc_speculative":
        case.inputs = RequestInputs(ctc=tuple(CTCHypothesis([5, 6, 7, 8], torch.ones(6)) for _ in rows))
    return case


def _image_case(name):
    from vision.position_queries import add_query_tokens
    from vision.prior import ImagePrior
    prior = tiny_prior(codebook=16, classes=3, grid=(4, 4))
    if name == "lpd":
        torch.manual_seed(1)
        prior = ImagePrior(prior.model, add_query_tokens(prior.model, prior.meta))
    return Case(prior, [[prior.class_token(0)], [prior.class_token(2)]], 16, {"steps": 6} if name == "lpd" else {},
                eos_is_a_token=False, budgets=())     # whole grids only


def _grounding_case(name):
    from scripted import PROMPT, TWO_BOXES, BoxScript
    return Case(BoxScript([TWO_BOXES, TWO_BOXES]), [list(PROMPT), list(PROMPT)], 25, eos_is_a_token=False)


def _speech_case(name):
    from speech.alignment import frame_conditioning
    from speech.tts_model import FrameTTSAdapter
    output = {"local_ar": "local", "local_maskgit": "local", "stack_local": "local", "stack": "stack"}.get(name, "frame")
    model = tiny_tts(local_frames=2 if name == "stack_local" else 1)
    cfg = model.config
    q = cfg.num_codebooks
    layout = cfg.delay_token if name == "delay" else cfg.parallel_token
    prompt = [(layout,) + (cfg.pad,) * (q - 1), (cfg.bos,) * q]
    table = frame_conditioning(cfg.phone_ids("a b c a".split()), [2, 1, 0, 3], 3)
    adapter = FrameTTSAdapter(model, output).for_request([len(prompt) - 1], [table])
    return Case(adapter, [prompt], 6, eos_is_a_token=False)


def _video_case(name):
    video = tiny_video()
    rows = [video.layout.prompt(0, 1), video.layout.prompt(1, 0)]
    return Case(video, [list(r) for r in rows], 3 * 16, eos_is_a_token=False, budgets=())    # whole clips only


CASES = {"video": _video_case, "text": _text_case, "document": _document_case, "asr": _document_case, "image": _image_case,
         "grounding": _grounding_case, "speech": _speech_case}


def case_for(name: str) -> Case:
    entry = REGISTRY[name]
    if name == "diffusion_gemma":
        return _diffusion_gemma_case(name)
    modality = "text" if entry.modalities == ("any",) else entry.modalities[0]
    return CASES[modality](name)


def run(case: Case, name: str, **kw):
    counting = Counting(case.adapter)
    options = {} if name == "ar" else case.options
    only = case.adapter.capabilities.only_decoders
    if name == "ar" and only:   # a model ar cannot drive: its own decoder
        name, options = only[0], case.options
    _, dec, state = suite.prepare(counting, case.rows, decoder=name, max_new_tokens=kw.pop("budget", case.budget),
                                  inputs=case.inputs, **options, **kw)
    res = suite.decode(counting, dec, state)
    return res, counting.calls


@pytest.mark.parametrize("name", list(REGISTRY))
def test_budget_and_honest_counts(name):
    case = case_for(name)
    for budget in case.budgets + (case.budget,):
        res, calls = run(case, name, budget=budget)
        assert all(len(t) <= budget for t in res.new_tokens), budget
        assert res.stats.num_forwards == calls, "stats.num_forwards must count the adapter's real forwards"
        assert res.stats.num_new_tokens == sum(len(t) for t in res.new_tokens)
        assert len(res.stats.accepted_lengths) == res.stats.num_forwards
        assert sum(map(sum, res.stats.accepted_lengths)) <= res.stats.num_new_tokens


@pytest.mark.parametrize("name", [n for n, e in REGISTRY.items() if e.guarantee != "lossy" and e.reference == "ar"])
def test_exact_decoders_equal_ar_greedy(name):
    case = case_for(name)
    ar, _ = run(case, "ar")
    out, _ = run(case, name)
    assert out.new_tokens == ar.new_tokens


@pytest.mark.parametrize("name", list(REGISTRY))
def test_eos_ends_the_row(name):
    """A row's output holds EOS at most once, as its last token; exact decoders stop where ar stops."""
    case = case_for(name)
    if not case.eos_is_a_token:
        res, _ = run(case, name)
        eos = case.adapter.config.eos_token_ids
        assert all(all(t not in eos for t in row[:-1]) for row in res.new_tokens)
        return
    ar, _ = run(case, "ar", seed=0)       # seeded: a sampler that always draws (diffusion_gemma) repeats itself
    eos = ar.new_tokens[0][3]
    ar_eos, _ = run(case, "ar", eos_token_id=eos, seed=0)
    res, _ = run(case, name, eos_token_id=eos, seed=0)
    for row in res.new_tokens:
        assert eos not in row[:-1]
    if REGISTRY[name].guarantee != "lossy":
        assert res.new_tokens == ar_eos.new_tokens


@pytest.mark.parametrize("max_tokens", [512, 4], ids=["whole", "chunked"])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_scheduler_serves_each_request_as_decoded_alone(name, max_tokens):
    """Through suite.scheduler, a second request arriving while the first runs (joining its batch
    where the adapter and decoder move rows) with another budget (its rows leave at other steps):
    each request's greedy tokens equal the same request decoded alone; with max_tokens=4 the
    prompts are prefilled in chunks of 2 tokens a row between steps (where they can be)."""
    case = case_for(name)
    options = {} if name == "ar" else case.options
    budgets = (case.budget, case.budgets[-1] if case.budgets else case.budget)
    alone = [run(case, name, budget=b, seed=0)[0].new_tokens for b in budgets]   # seeded: lpd draws its order
    sched = Scheduler(case.adapter, max_rows=8, max_tokens=max_tokens)
    first = sched.submit(case.rows, decoder=name, max_new_tokens=budgets[0], inputs=case.inputs, stream=True,
                         seed=0, **options)
    steps = first.steps()
    next(steps, None)
    second = sched.submit(case.rows, decoder=name, max_new_tokens=budgets[1], inputs=case.inputs, seed=0, **options)
    list(steps)
    assert [first.result().new_tokens, second.result().new_tokens] == alone
    sched.close()

