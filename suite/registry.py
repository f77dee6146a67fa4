"""The one registry of decoders: a static table, complete after `import suite`, resolved lazily.

Each entry names its class as "module:Class" (imported on first use, as transformers' auto
mappings do), the modalities it decodes ("any" for every causal LM) and its guarantee with its
default options: "exact" (greedy output equals the reference token for token), "in distribution"
(also lossless when sampling: the χ² test) or "lossy" (the bench reports the quality cost). The
CLIs' choices, the apps' dropdowns, the guarantee markers and the contract test read it.
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass

GUARANTEES = ("exact", "in distribution", "lossy")
MODALITIES = ("text", "image", "video", "document", "grounding", "speech", "asr")


@dataclass(frozen=True)
class DecoderEntry:
    name: str
    target: str                    # "package.module:Class"
    modalities: tuple[str, ...]    # "any": every causal LM (text, image priors, OCR, ASR decoders)
    guarantee: str                 # with the decoder's default options
    summary: str                   # one line for --help and the apps
    reference: str = "ar"          # what "exact" is measured against

    def load(self) -> type:
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)

    def decodes(self, modality: str) -> bool:
        return "any" in self.modalities or modality in self.modalities


_D = "suite.decoders."
_OWN = "the model's own factorisation"
ENTRIES: tuple[DecoderEntry, ...] = (
    DecoderEntry("ar", _D + "chain.ar:AR", ("any",), "exact", "one token per forward: the baseline and test oracle"),
    DecoderEntry("jacobi", _D + "chain.jacobi:Jacobi", ("any",), "exact",
                 "greedy fixed-point iteration over a window of guesses (greedy only)"),
    DecoderEntry("sjd", _D + "chain.sjd:SJD", ("any",), "in distribution",
                 "speculative Jacobi: drafts carry their q, min(1, p/q) acceptance"),
    DecoderEntry("mc_sjd", _D + "chain.mc_sjd:MCSJD", ("any",), "in distribution",
                 "SJD with maximally coupled redraws of the unaccepted drafts"),
    DecoderEntry("lookahead", _D + "chain.lookahead:Lookahead", ("any",), "in distribution",
                 "2-D Jacobi window + n-gram pool + verification branch in one forward"),
    DecoderEntry("ngram", _D + "chain.ngram:Ngram", ("any",), "in distribution",
                 "prompt lookup with an adaptive multi-level n-gram table"),
    DecoderEntry("speculative", _D + "chain.speculative:Speculative", ("any",), "in distribution",
                 "draft model (draft_model=) or layer-truncated self-draft (draft='self:N')"),
    DecoderEntry("eagle", _D + "chain.eagle:Eagle", ("text",), "in distribution",
                 "EAGLE-2 draft trees from a trained feature-level head (draft_head=; text.load() binds SmolLM2's)"),
    DecoderEntry("token_recycling", _D + "chain.token_recycling:TokenRecycling", ("any",), "in distribution",
                 "draft trees from an adjacency matrix of each token's recycled top-k candidates, tree-verified"),
    DecoderEntry("sam_decoding", _D + "chain.sam_decoding:SAMDecoding", ("any",), "in distribution",
                 "suffix-automaton drafts (the text so far + a static corpus=), with Token Recycling's tree"),
    DecoderEntry("suffix", _D + "chain.suffix:SuffixDecoding", ("any",), "in distribution",
                 "SuffixDecoding: frequency-scored trees from suffix trees over the request and over earlier "
                 "outputs (one global tree per model, optionally on disk), adaptive length, with Token Recycling's "
                 "tree, tree-verified"),
    DecoderEntry("auto", _D + "chain.auto:Auto", ("any",), "in distribution",
                 "every step, the lossless decoder expected to commit the most tokens per cost of its forward (on a fixed "
                 "step: the most tokens), learned from its steps (eagle, ngram, lookahead, token_recycling, sam_decoding, "
                 "suffix, ar)"),
    DecoderEntry("ngram_prior", _D + "chain.ngram_prior:NgramPrior", ("document",), "in distribution",
                 "drafts from a previous version of the text (prior_texts=), verified"),
    DecoderEntry("ctc_speculative", _D + "chain.ctc_speculative:CTCSpeculative", ("document", "asr"), "lossy",
                 "the CTC hypothesis drafts the decoder; confident ones skip it (exact with max_entropy=0)"),
    DecoderEntry("zipar", _D + "raster.zipar:ZipAR", ("image",), "lossy",
                 "next-set rows: row r+1 starts once row r has `window` tokens"),
    DecoderEntry("zipar_sjd", _D + "raster.zipar_sjd:ZipARSJD", ("image",), "lossy",
                 "ZipAR rows with speculative Jacobi inside each row"),
    DecoderEntry("lpd", _D + "raster.lpd:LPD", ("image",), "lossy",
                 "locality-aware parallel decoding with position queries (16x16 in 20 forwards)"),
    DecoderEntry("diagonal", _D + "raster.video_zipar:Diagonal", ("video",), "exact",
                 "frames pipelined: frame t+1's rows start before frame t ends, rows in raster order"),
    DecoderEntry("video_zipar", _D + "raster.video_zipar:VideoZipAR", ("video",), "lossy",
                 "ZipAR rows inside each frame, frames pipelined (3-D next-set decoding)"),
    DecoderEntry("video_zipar_sjd", _D + "raster.video_zipar_sjd:VideoZipARSJD", ("video",), "in distribution",
                 "diagonal frames with speculative drafts inside each row, drafted from the previous frame"),
    DecoderEntry("block_diffusion", _D + "blocks.block_diffusion:BlockDiffusion", ("document",), "lossy",
                 "masked blocks filled by confidence threshold, exact K/V for committed tokens"),
    DecoderEntry("fast_dllm_factor", _D + "blocks.fast_dllm_factor:FastDLLMFactor", ("document",), "lossy",
                 "Fast-dLLM factor rule: the n most confident slots while (n+1)(1-c_n) <= factor"),
    DecoderEntry("prophet", _D + "blocks.prophet:Prophet", ("document",), "lossy",
                 "early all-in commit of the block when the mean top-2 gap is large, else a threshold"),
    DecoderEntry("credit", _D + "blocks.credit:CreditDecoding", ("document",), "lossy",
                 "confidence fused with credit accumulated across forwards (CreditDecoding)"),
    DecoderEntry("entropy_bounded", _D + "blocks.entropy_bounded:EntropyBounded", ("document",), "lossy",
                 "lowest-entropy slots while their summed entropy minus the largest stays within gamma"),
    DecoderEntry("s2d2", _D + "blocks.s2d2:S2D2", ("document",), "in distribution",
                 "block-diffusion drafts verified by the causal model (self-speculative)"),
    DecoderEntry("diffusion_gemma", _D + "blocks.diffusion_gemma:DiffusionGemmaSampler", ("text",), "exact",
                 "DiffusionGemma's own sampler: entropy-bounded canvas denoising with adaptive stopping",
                 reference="DiffusionGemma's generate"),
    DecoderEntry("parallel_box", _D + "boxes.parallel_box:ParallelBox", ("grounding",), "lossy",
                 "a whole box block per forward"),
    DecoderEntry("hybrid", _D + "boxes.hybrid_box:HybridBox", ("grounding",), "lossy",
                 "parallel box blocks, validated; failing blocks re-decoded exactly as ar"),
    DecoderEntry("locus", _D + "boxes.locus:Locus", ("grounding",), "in distribution",
                 "parallel box drafts verified by Jacobi iteration on a draft tree: exactly ar's boxes"),
    DecoderEntry("delay", _D + "frames.delay:Delay", ("speech",), "exact",
                 "MusicGen delay pattern: all codebooks per forward, codebook k lags k frames", reference=_OWN),
    DecoderEntry("parallel", _D + "frames.parallel:Parallel", ("speech",), "lossy",
                 "all codebooks of a frame sampled independently per forward"),
    DecoderEntry("local_ar", _D + "frames.local_ar:LocalAR", ("speech",), "exact",
                 "one backbone forward per frame, codebooks by a local transformer", reference=_OWN),
    DecoderEntry("local_maskgit", _D + "frames.local_maskgit:LocalMaskGIT", ("speech",), "lossy",
                 "codebooks of a frame filled by a local transformer in a few MaskGIT steps"),
    DecoderEntry("stack", _D + "frames.stack:Stack", ("speech",), "lossy", "2 frames per forward, the second blind"),
    DecoderEntry("stack_local", _D + "frames.stack_local:StackLocal", ("speech",), "exact",
                 "2 frames per forward, their codes sampled by a local transformer", reference=_OWN),
)
REGISTRY: dict[str, DecoderEntry] = {e.name: e for e in ENTRIES}


class _LazyDecoders(Mapping):
    """name -> decoder class, importing each class on first access."""

    def __getitem__(self, name: str) -> type:
        return REGISTRY[name].load()

    def __iter__(self):
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)

    def __contains__(self, name) -> bool:
        return name in REGISTRY


DECODERS: Mapping[str, type] = _LazyDecoders()
TEXT_DECODERS: tuple[str, ...] = tuple(e.name for e in ENTRIES if e.modalities == ("any",))
# the decoders that drive a canvas model (an adapter with `capabilities.canvas`: DiffusionGemma): its own sampler and the
# block commit rules (s2d2 verifies with causal next-token predictions, which a canvas model does not make)
CANVAS_DECODERS: tuple[str, ...] = ("diffusion_gemma", "block_diffusion", "fast_dllm_factor", "prophet", "credit",
                                    "entropy_bounded")


def list_decoders(modality: str | None = None, adapter=None, guarantee: str | None = None,
                  chain: tuple[str, ...] | None = None) -> list[str]:
    """Registered decoder names: those for a modality (with every "any" decoder, or only the ones
    named in `chain` when a pipeline runs just those), those whose capability needs (`requires`)
    the adapter meets, those with a guarantee."""
    if modality is not None and modality not in MODALITIES:
        raise ValueError(f"unknown modality {modality!r}; choose one of: {', '.join(MODALITIES)}")

    def wanted(e: DecoderEntry) -> bool:
        if modality is not None and not e.decodes(modality):
            return False
        if chain is not None and e.modalities == ("any",) and e.name not in chain:
            return False
        return guarantee is None or e.guarantee == guarantee
    names = [e.name for e in ENTRIES if wanted(e)]
    if adapter is not None:
        names = [n for n in names if all(adapter.capabilities.has(c) for c in DECODERS[n].requires)]
    return names


def decoder_entry(name: str) -> DecoderEntry:
    if name not in REGISTRY:
        raise ValueError(f"unknown decoder {name!r}; choose one of: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def guarantee(name: str) -> str:
    return decoder_entry(name).guarantee


# The options a decoder runs with when a modality's CLI, Python API, app and bench name it without any:
# one table, so what the bench measured (and <domain>/quality.json quotes) is what every way in runs.
# A decoder absent here runs with its class's own defaults.
DEFAULTS: Mapping[str, Mapping[str, Mapping[str, object]]] = {
    "document": {
        # 3.1x fewer forwards than ar at +0.28 CER points on held-out lines (BENCHMARKS.md, Document)
        "block_diffusion": {"block_size": 8, "threshold": 0.95, "prefix_only": True},
        "s2d2": {"block_size": 8},
        # verify every CTC read (exact); the entropy gate, tuned for speech, costs CER on lines
        "ctc_speculative": {"max_entropy": 0.0},
    },
}


def default_options(name: str, modality: str | None = None) -> dict[str, object]:
    """The options `name` runs with in `modality` when none are given (DEFAULTS); {} when its class's own."""
    decoder_entry(name)
    return dict(DEFAULTS.get(modality, {}).get(name, {})) if modality else {}


def effective_options(name: str, modality: str | None = None, options: Mapping[str, object] | None = None) -> dict:
    """Every option of `name` as it runs: its class's defaults, then the modality's DEFAULTS, then `options`."""
    return {**decoder_options(name), **default_options(name, modality), **(options or {})}


def decoder_options(name: str) -> dict[str, object]:
    """The options a decoder takes, with their defaults."""
    return {f.name: f.default for f in dataclasses.fields(get_decoder_class(name))}


def parse_option(item: str) -> tuple[str, object]:
    """'window=3' -> ('window', 3): a CLI's decoder option, typed as bool, None, int, float or str."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ValueError(f"decoder option {item!r} is not KEY=VALUE: write e.g. window=3")
    low = raw.lower()
    if low in ("true", "false"):
        return key, low == "true"
    if low in ("none", "null"):
        return key, None
    for kind in (int, float):
        try:
            return key, kind(raw)
        except ValueError:
            pass
    return key, raw


def get_decoder_class(name: str) -> type:
    return decoder_entry(name).load()


def make_decoder(name: str, **options):
    """Build a decoder by name; an option it does not take is a ValueError naming the valid ones."""
    cls = get_decoder_class(name)
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(f"decoder {name!r} does not take {', '.join(unknown)}; "
                         f"its options are: {', '.join(sorted(valid)) or '(none)'}")
    from .decoders.options import check_option
    for key, value in options.items():
        check_option(cls, key, value)
    return cls(**options)
