#!/usr/bin/env bash
# What speech/data.py needs on a machine without it (the GPU machine: Python 3.12, no flite, no
# espeak-ng, no soundfile, no apt, no network), copied into OUTDIR: the flite and espeak-ng
# binaries, the shared libraries they load (their ldd closure minus glibc's own), espeak-ng's data
# (English dictionary only: every other language's *_dict is left out), cp312 wheels of soundfile
# and its cffi and pycparser, and this machine's sentence splits (sentences.json: another Python's
# docstrings give other sentences, see speech/data.py); writes OUTDIR/env.sh and prints the size.
# Used by speech/train_gpu.sh (speech/weights/README.md, "GPU recipe"); put OUTDIR under the
# ignored .whl/ so that it can be carried.
#
#   speech/gpu_bundle.sh OUTDIR           then, on the other machine: source OUTDIR/env.sh
#
# Needs here: flite, espeak-ng, ldd, and a Python with this repo's requirements (PYTHON, default
# /work/main/.venv/bin/python) whose pip reaches PyPI for the wheels (WHEELS: pip requirements;
# one already in OUTDIR is not fetched again).
set -euo pipefail
OUT=${1:?usage: speech/gpu_bundle.sh OUTDIR}
PY=${PYTHON:-/work/main/.venv/bin/python}
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/share"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
for exe in flite espeak-ng; do cp -L "$(command -v "$exe")" "$OUT/bin/"; done
# every library either binary loads, by the name it asks for (libfoo.so.1), minus glibc's own
ldd "$OUT/bin/flite" "$OUT/bin/espeak-ng" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    grep -Ev '^(libc|libm|libpthread|libdl|librt|ld-linux[^ ]*)\.so' | while read -r name path; do
        cp -L "$path" "$OUT/lib/$name"
    done
data=$(espeak-ng --version | sed -n 's/.*Data at: *//p')
rm -rf "$OUT/share/espeak-ng-data"
cp -r "$data" "$OUT/share/espeak-ng-data"
find "$OUT/share/espeak-ng-data" -maxdepth 1 -name '*_dict' ! -name en_dict -delete
for pkg in ${WHEELS:-soundfile==0.14.0 cffi==2.1.1 pycparser==3.12}; do
    ls "$OUT/${pkg%%=*}"-*.whl > /dev/null 2>&1 || "$PY" -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux2014_x86_64 -d "$OUT" "$pkg"
done
PYTHONPATH=. "$PY" -m speech.data --save-sentences "$OUT/sentences.json"
cat > "$OUT/env.sh" <<'EOF'
# source this: the bundled flite / espeak-ng first on PATH, their libraries and data, soundfile
# (installed from the wheels on first use), the sentence splits
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$B/bin:$PATH" LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ESPEAK_DATA_PATH="$B/share"
export PARASUITE_SPEECH_SENTENCES="$B/sentences.json"
[ -d "$B/site" ] || python3 -m pip install -q --no-index --no-deps --target "$B/site" "$B"/*.whl
export PYTHONPATH="$B/site${PYTHONPATH:+:$PYTHONPATH}"
EOF
du -sh "$OUT" | awk '{print "bundle: " $1 " in " $2}'
