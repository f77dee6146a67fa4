"""docs/DESIGN.md section 1: imports run kernels -> suite -> {text, vision, document, speech} -> apps,
with no exemptions, without cycles between the project's modules and without private names taken from another module."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["kernels", "suite", "text", "vision", "document", "speech", "apps"]
ALLOWED = {
    "kernels": set(),
    "suite": {"kernels"},
    "text": {"kernels", "suite"},
    "vision": {"kernels", "suite"},
    "document": {"kernels", "suite"},
    "speech": {"kernels", "suite"},
    "apps": {"kernels", "suite", "text", "vision", "document", "speech"},
}



def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package):
    bad = []
    for path in (ROOT / package).rglob("*.py"):
        wrong = imported_packages(path) - ALLOWED[package] - {package}
        bad += [f"{path.relative_to(ROOT)} imports {w}" for w in sorted(wrong)]
    assert not bad, "wrong-way imports:\n" + "\n".join(bad)


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_targets(module: str, path: Path, node: ast.ImportFrom) -> tuple[str, list[str]]:
    """The absolute module an ImportFrom reads from, and the names it takes."""
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    return base, [a.name for a in node.names]


def imported_modules(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports, at the top or inside functions. `from p import m`
    counts the submodule p.m (and p itself only when some name is not a submodule); a package
    that contains `module` is already loading when it runs, so it does not count."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base, names = import_targets(module, path, node)
            subs = {f"{base}.{n}" for n in names if f"{base}.{n}" in modules}
            out |= subs if len(subs) == len(names) else subs | {base}
    return {m for m in out if m in modules and m != module and not module.startswith(m + ".")}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle a depth-first search over `graph` closes, as [a, b, ..., a]."""
    state, path, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_import_cycle_detector_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    modules = project_modules()
    graph = {m: imported_modules(m, path, modules) for m, path in modules.items()}
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (top-level or in functions):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_private_names_imported_across_modules():
    modules = project_modules()
    bad = []
    for module, path in sorted(modules.items()):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base, names = import_targets(module, path, node)
            if base not in modules:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")
                       and f"{base}.{n}" not in modules]        # a package's private submodule is its own
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n} from {base}" for n in private]
    assert not bad, "private names imported from another module (make them public there):\n" + "\n".join(bad)


def test_import_suite_stays_light():
    code = "import sys, suite; print('transformers' in sys.modules, 'gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_our_kernels_package_does_not_look_like_hub_kernels():
    from transformers.utils import is_kernels_available
    assert not is_kernels_available()
