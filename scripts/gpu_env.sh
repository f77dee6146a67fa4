# Sourced by scripts/gpu_check.sh and scripts/gpu_train.sh (issue 41): the environment of a GPU
# run and its step runner. Needs, before sourcing: LOGS_NAME (the summary's title).
#
# Sets: PY (PYTHON, default python3), DEV (DEVICE, default cuda), OUT (the device tool's $OUT, else
# out/<script>: the at most 8 files that come back), WORK (scratch, default /tmp/parasuite_gpu),
# PYTHONPATH (this repo first), PYTHONUNBUFFERED, a deadline of TOTAL_S seconds from the start.
# Brings what scripts/gpu_prepare.sh put in the carried .whl/ (only where it applies: WHEELS=auto
# installs cp312 wheels only under Python 3.12, the GPU machine's; WHEELS=0 never, 1 always):
#   .whl/*.whl        pip-installed once (--no-deps, offline) into $WORK/site, first on PYTHONPATH
#   .whl/fonts/       copied into /usr/share/fonts/truetype/ when DejaVuSans-Bold.ttf is not there
#                     (the image classes, grounding scenes and OCR lines are drawn in these fonts)
#   .whl/speech/      speech/gpu_bundle.sh's flite, espeak-ng and soundfile (its env.sh, sourced)
# step LOG NAME SECONDS CMD...: runs CMD under `timeout` (SECONDS x LIMIT_SCALE, default 1: a dry run
# on a slow CPU raises it; at most what is left before the deadline, less RESERVE_S), its output appended to $OUT/LOG.log, and one row in the summary; a failing or
# timed-out step is recorded and the script goes on. finish: writes $OUT/summary.md, exit status 1
# when a step failed.
PY=${PYTHON:-python3}
DEV=${DEVICE:-cuda}
OUT=${OUT:-$PWD/out/$(basename "$0" .sh)}
WORK=${WORK:-/tmp/parasuite_gpu}
TOTAL_S=${TOTAL_S:-540}
RESERVE_S=${RESERVE_S:-10}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
_START=$SECONDS
_FAILED=0
_ROWS=()

_py312() { "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
_wheels=${WHEELS:-auto}
if [ "$_wheels" = auto ]; then _py312 && _wheels=1 || _wheels=0; fi
if [ "$_wheels" = 1 ] && compgen -G ".whl/*.whl" > /dev/null; then
    if [ ! -f "$WORK/site/.done" ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$WORK/site" .whl/*.whl && touch "$WORK/site/.done" \
            || echo "gpu_env: installing .whl/*.whl failed" >&2
    fi
    export PYTHONPATH="$PWD:$WORK/site${PYTHONPATH#"$PWD"}"
fi
if [ -d .whl/fonts ] && [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf ]; then
    mkdir -p /usr/share/fonts/truetype && cp -rn .whl/fonts/. /usr/share/fonts/truetype/ \
        || echo "gpu_env: could not copy .whl/fonts into /usr/share/fonts/truetype" >&2
fi
if [ "$_wheels" = 1 ] && [ -f .whl/speech/env.sh ]; then
    # shellcheck disable=SC1091
    source .whl/speech/env.sh || echo "gpu_env: .whl/speech/env.sh failed" >&2
fi

left_s() { echo $((_START + TOTAL_S - RESERVE_S - SECONDS)); }

step() {
    local log=$1 name=$2 limit=$3 rc t0 left status planned
    shift 3
    limit=$((limit * ${LIMIT_SCALE:-1}))
    planned=$limit
    left=$(left_s)
    if [ "$limit" -gt "$left" ]; then limit=$left; fi
    if [ "$limit" -lt 5 ] || [ "$limit" -lt "$(awk -v f="${MIN_FRACTION:-0}" -v p="$planned" 'BEGIN {print int(f * p)}')" ]; then
        _ROWS+=("| $name | skipped: ${limit} s left of ${planned} s planned | 0 | |")
        echo "=== $name: skipped (no time left)" >> "$OUT/$log.log"
        return 0
    fi
    {
        echo
        echo "=== $name (limit ${limit} s, at +$((SECONDS - _START)) s)"
        echo "\$ $(printf "%q " "$@")"
    } >> "$OUT/$log.log"
    t0=$SECONDS
    timeout -k 15 "$limit" "$@" >> "$OUT/$log.log" 2>&1
    rc=$?
    case $rc in
        0) status=ok ;;
        124|137) status="TIMEOUT after ${limit} s"; _FAILED=1 ;;
        *) status="FAILED (exit $rc)"; _FAILED=1 ;;
    esac
    echo "=== $name: $status in $((SECONDS - t0)) s" >> "$OUT/$log.log"
    _ROWS+=("| $name | $status | $((SECONDS - t0)) | $log.log |")
    return 0
}

finish() {
    {
        echo "# $LOGS_NAME: DEVICE=$DEV, $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - _START)) s"
        echo
        "$PY" - <<'EOF' 2>&1
import platform, sys
try:
    import torch
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
    print(f"python {platform.python_version()}, torch {torch.__version__}, {gpu}", end="")
    import transformers
    print(f", transformers {transformers.__version__}", end="")
except Exception as e:                      # the summary is written whatever is missing
    print(f"({type(e).__name__}: {e})", end="")
print()
EOF
        echo
        echo "| step | result | seconds | log |"
        echo "|---|---|---|---|"
        printf '%s\n' "${_ROWS[@]}"
    } > "$OUT/summary.md"
    cat "$OUT/summary.md"
    return $_FAILED
}
