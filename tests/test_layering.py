"""DESIGN.md section 1: imports run kernels -> suite -> {text, vision, document, speech} -> apps."""
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


# entry points that exercise the whole stack on purpose (not imported by any package)
ENTRY_POINTS = {"kernels/check.py": {"suite", "text", "vision"}}


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
        exempt = ENTRY_POINTS.get(str(path.relative_to(ROOT)), set())
        wrong = imported_packages(path) - ALLOWED[package] - {package} - exempt
        bad += [f"{path.relative_to(ROOT)} imports {w}" for w in sorted(wrong)]
    assert not bad, "wrong-way imports:\n" + "\n".join(bad)


def test_import_suite_stays_light():
    code = "import sys, suite; print('transformers' in sys.modules, 'gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_our_kernels_package_does_not_look_like_hub_kernels():
    from transformers.utils import is_kernels_available
    assert not is_kernels_available()
