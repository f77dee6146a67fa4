"""Device discipline (issue 30): every tensor of a request lives on the adapter's device.

An AST scan of suite/ and of the domain modules that run decoding (adapters, pipelines, decoders,
box decoders; not training, data, benchmarks or apps) fails on a tensor constructor called without
an explicit `device=`. Exempt: `*_like` and `Tensor.new_*` (they inherit a device), constructors in
the `__init__` of an nn.Module (parameters and buffers move with `module.to(device)`), and a line
marked `# host: <why>` for a tensor that is on the CPU on purpose (the allowlist: keep it short).
Also here: a request's random streams on the adapter's device, inputs on another device moved once at
`suite.prepare`, and the static cache's fallback to the dynamic one."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import torch

import suite

ROOT = Path(__file__).resolve().parents[2]
CONSTRUCTORS = {"tensor", "zeros", "ones", "full", "empty", "arange", "randint", "rand", "randn", "randperm",
                "eye", "linspace", "logspace", "Generator"}
SUITE_CONSTRUCTORS = {"KVCache", "StaticKVCache"}     # the cache's validity and positions live on `device`
MODULE_BASES = {"Module", "ModuleList", "ModuleDict", "Sequential", "ConfigModule"}
HOST = re.compile(r"#\s*host:\s*\S")                  # "# host: <reason>", the reason required
# the domain modules a request runs through; not scanned: training, data, benchmarks, apps, and the
# host-side preparation of inputs (speech/alignment.py, vision/position_queries.py, vision/zipar_views.py:
# conditioning tables and training layouts, moved once when a request binds them)
DOMAIN_MODULES = [
    "text/generator.py", "text/model.py",
    "vision/prior.py", "vision/pipeline.py", "vision/hf_image.py", "vision/hf_grounding.py",
    "vision/video/prior.py", "vision/video/pipeline.py",
    "vision/grounding/pipeline.py", "vision/grounding/model.py", "suite/decoders/boxes/parallel_box.py",
    "suite/decoders/boxes/hybrid_box.py", "suite/decoders/boxes/locus.py", "vision/grounding/grammar.py",
    "document/ocr.py", "document/model.py", "document/ved.py", "document/hf_reader.py", "document/reader.py",
    "speech/tts.py", "speech/tts_model.py", "speech/asr.py", "speech/asr_model.py", "speech/ctc_lm.py",
    "speech/duration.py", "speech/local_head.py", "speech/hf_asr.py", "speech/hf_tts.py", "speech/codec.py",
]


def _is_module_class(node: ast.ClassDef) -> bool:
    return any((b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")) in MODULE_BASES for b in node.bases)


def _module_inits(tree: ast.AST) -> set[int]:
    """ids of the constructor calls inside the __init__ of an nn.Module subclass."""
    inside = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and _is_module_class(cls):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    inside |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    return inside


def _constructor(call: ast.Call) -> str | None:
    """`torch.<name>` for a tensor constructor, `<name>` for suite's caches; else None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in CONSTRUCTORS and getattr(f.value, "id", None) == "torch":
        return f"torch.{f.attr}"
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return name if name in SUITE_CONSTRUCTORS else None


def violations(source: str, filename: str = "<source>") -> list[str]:
    """'file:line: constructor' for each constructor without device= (exemptions above)."""
    tree = ast.parse(source, filename=filename)
    lines = source.splitlines()
    exempt = _module_inits(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in exempt:
            continue
        name = _constructor(node)
        if name is None or any(k.arg == "device" for k in node.keywords):
            continue
        span = lines[node.lineno - 1:(node.end_lineno or node.lineno)]
        if not any(HOST.search(line) for line in span):
            out.append(f"{filename}:{node.lineno}: {name}(...) without device=")
    return sorted(out, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def scanned_files() -> list[Path]:
    return sorted((ROOT / "suite").rglob("*.py")) + [ROOT / m for m in DOMAIN_MODULES]


def test_scanner_finds_a_constructor_without_device():
    src = '''
import torch
from torch import nn

def f(x, n):
    a = torch.zeros(n, dtype=torch.long)                 # violation
    b = torch.arange(n, device=x.device)                 # fine
    c = torch.zeros_like(x)                              # fine: inherits
    g = torch.Generator()                                # violation
    h = torch.tensor([1, 2])  # host: a CPU-side list on purpose
    k = torch.tensor([1,
                      2])  # host: the comment may sit on any line of the call
    m = torch.ones(2,
                   3)                                    # violation (no reason given below)
    return KVCache(1, None)                              # violation: suite's cache

class Head(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))             # fine: module state
        self.register_buffer("ids", torch.arange(d))     # fine: module state

    def forward(self, x):
        return x + torch.ones(x.shape[-1])               # violation
'''
    found = violations(src)
    assert [v.split(":")[1] for v in found] == ["6", "9", "13", "15", "24"], found
    assert "torch.Generator" in found[1] and "KVCache" in found[3]
    assert violations("import torch\nx = torch.ones(3)  # host:\n"), "a host mark needs its reason"


def test_domain_module_list_exists():
    missing = [m for m in DOMAIN_MODULES if not (ROOT / m).is_file()]
    assert not missing, f"DOMAIN_MODULES names files that are gone: {missing}; update the list"


def test_every_tensor_constructor_names_its_device():
    found = []
    for path in scanned_files():
        found += violations(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, ("tensor constructors without device= (pass the adapter's / state's device, or mark a "
                       "deliberate CPU tensor `# host: <why>`):\n" + "\n".join(found))


def test_host_allowlist_stays_short():
    marked = [f"{p.relative_to(ROOT)}:{i}" for p in scanned_files()
              for i, line in enumerate(p.read_text().splitlines(), 1) if HOST.search(line)]
    assert len(marked) <= 8, f"the '# host:' allowlist grew to {len(marked)} entries: {marked}"


# ---------------------------------------------------------------- behaviour on the CPU

def test_request_streams_live_on_the_adapter_device():
    from tinymodels import tiny_model
    _, _, state = suite.prepare(tiny_model("llama"), [[5, 6, 7]], max_new_tokens=2, seed=3)
    assert state.streams.keys.device == state.device == state.cache.valid.device
    state.cache.valid = state.cache.valid.to("meta")
    assert state.device.type == "meta"


def test_inputs_on_another_device_are_read_once_at_the_boundary(monkeypatch):
    """Prompts and masks given as tensors are turned into host rows once in prepare; the drafts the
    loop builds from them are on the adapter's device."""
    from tinymodels import tiny_model
    from suite.loop import Draft
    model = tiny_model("llama")
    ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    made = []
    real = Draft.from_rows

    def spy(*args, **kw):
        made.append(kw["device"])
        return real(*args, **kw)
    monkeypatch.setattr(Draft, "from_rows", staticmethod(spy))
    out = suite.generate(model, ids, mask, decoder="jacobi", max_new_tokens=4)
    monkeypatch.undo()
    ref = suite.generate(model, ids, mask, decoder="ar", max_new_tokens=4)
    assert out.new_tokens == ref.new_tokens
    assert made and all(torch.device(d) == next(model.parameters()).device for d in made)
    assert out.sequences.device == ids.device and out.sequences.shape == (2, 8)


class _OwnCacheOnly(torch.nn.Module):
    """A causal LM whose forward refuses a StaticCache (as families with their own cache type do)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, cache=None, **kwargs):
        from transformers import StaticCache
        if isinstance(cache, StaticCache):
            raise TypeError("this family keeps its own cache type")
        return self.inner(cache=cache, **kwargs)


def test_a_model_without_a_static_cache_falls_back_to_the_dynamic_one():
    from tinymodels import tiny_model
    from suite.cache import KVCache
    from suite.models.static_cache import StaticHFCausalLM, StaticKVCache
    model = tiny_model("llama")
    assert StaticHFCausalLM(model, 64, compiled_widths=()).static
    adapter = StaticHFCausalLM(_OwnCacheOnly(model), 64, compiled_widths=(1,))
    assert not adapter.static and adapter._compiled is None
    _, _, state = suite.prepare(adapter, [[5, 6, 7, 8]], max_new_tokens=2)
    assert type(state.cache) is KVCache and not isinstance(state.cache, StaticKVCache)
    for name in ("ar", "jacobi"):
        out = suite.generate(adapter, [[5, 6, 7, 8]], decoder=name, max_new_tokens=6)
        ref = suite.generate(model, [[5, 6, 7, 8]], decoder="ar", max_new_tokens=6)
        assert out.new_tokens == ref.new_tokens, name
