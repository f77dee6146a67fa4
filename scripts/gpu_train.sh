#!/usr/bin/env bash
# Issue 41, second GPU run (the rest of the budget, about 8 minutes on one H200): the trainings the
# CPU cannot afford, each with a fixed time budget, most valuable first. Run scripts/gpu_prepare.sh
# here first (the carried .whl/ and the exact device `run` calls).
#
#   scripts/gpu_train.sh               on the GPU machine (the device tool sets $OUT)
#   scripts/gpu_train.sh collect N     page N (2, 3, ...) of the packed results into $OUT: call it at
#                                      once after the run (the machine stays warm 30 s), as its own
#                                      device run (the tool returns at most 8 files, 64 MiB, per call)
#   DEVICE=cpu scripts/gpu_train.sh    dry run on this CPU (QUICK=1: tiny data and budgets). Run it
#                                      in a copy of the checkout: the video step writes
#                                      vision/weights/video/prior (vision.video.train has no --out)
#
# Two lanes side by side, each step under `timeout` and everything under TOTAL_S:
#   lane A (CPU): 1. eagle   python3 -m text.train_draft: the EAGLE head of SmolLM2 on self-distilled
#                            prompts (up to PROMPTS, as many as DATA_MIN allows; the same 48 held-out
#                            prompts as the shipped head). text.train_draft has no --device (yet): it
#                            generates and trains on the CPU, with EAGLE_THREADS threads, so its
#                            budgets are CPU minutes = wall minutes x threads (passed when it has one)
#   lane B (GPU): 2. video   python3 -m vision.video.train prior (vision/video/train_gpu.sh's recipe,
#                            warm-started from the image prior) for VIDEO_MIN
#                 3. lpd     python3 -m vision.train lpd from the shipped prior (vision/train_gpu.sh's
#                            last stage: position queries + ZipAR views) for LPD_MIN
#                 4. grounding  vision/grounding/train_gpu.sh, the shipped size (160:3:5) from
#                            scratch, GROUNDING_MIN of training after rendering SCENES scenes
#                 5. asr     speech/train_gpu.sh: data without Piper (NUM_TRAIN utterances), then the
#                            recogniser from scratch for ASR_MIN
#                 6. ocr     python3 -m document.train from the shipped OCR weights (the weights README's
#                            GPU recipe: lines rendered by WORKERS processes) for OCR_MIN; not in the
#                            default STEPS (lane B has no time left for it): STEPS=ocr runs it alone
# Each finished step's folder is packed as NN_name.tar (split into NN_name.tar.partXX of at most 15
# MiB: the tool's limit is 16 MiB a file), pages of at most 8 files and 62 MiB with the logs:
# page 1 (eagle.log, train.log, summary.md and the first results, in the order above) comes back
# with this run; `collect 2` etc. bring the rest.
#
# Here, afterwards (W: the folder the device tool put the files in; V: vision/weights): unpack,
# evaluate against the shipped model, ship only what beats it on its held-out metric, then rerun the
# domain's bench for BENCHMARKS.md:
#   mkdir -p /tmp/gpu && (cd W && for t in *.tar *.tar.partaa; do [ -e "$t" ] && cat "${t%.partaa}"* |
#       tar -xf - -C /tmp/gpu; done)          # -> /tmp/gpu/{eagle,video_prior,lpd_prior,grounding,asr}
#   eagle      /tmp/gpu/eagle/metrics.json: .eval.mean_accepted_chain and .eval.acceptance_per_depth on the
#              same 48 held-out prompts as text/weights/eagle/metrics.json; if higher:
#              cp /tmp/gpu/eagle/* text/weights/eagle/ && python -m text.bench (eagle and auto on the
#              held-out group must get faster, else git checkout text/weights/eagle)
#   video      mkdir -p /tmp/gpu/v/video && ln -s $PWD/V/tokenizer $PWD/V/classifier /tmp/gpu/v/ &&
#              ln -s $PWD/V/video/motion /tmp/gpu/v/video/ && mv /tmp/gpu/video_prior /tmp/gpu/v/video/prior;
#              python -m vision.video.bench --weights /tmp/gpu/v --json /tmp/gpu/video_new.json against
#              python -m vision.video.bench --json /tmp/gpu/video_old.json: ship
#              (cp /tmp/gpu/v/video/prior/* V/video/prior/) only if ar's motion and class accuracy are
#              higher and its Frechet distance is not worse
#   lpd        mkdir -p /tmp/gpu/l && ln -s $PWD/V/tokenizer $PWD/V/classifier /tmp/gpu/l/ &&
#              mv /tmp/gpu/lpd_prior /tmp/gpu/l/prior; python -m vision.bench --weights /tmp/gpu/l
#              --decoders ar lpd:steps=20 --seeds 4 --json /tmp/gpu/lpd_new.json against the same without
#              --weights: ship (cp /tmp/gpu/l/prior/* V/prior/) only if lpd's class accuracy is higher
#              and ar's is not lower
#   grounding  python -m vision.bench grounding --weights /tmp/gpu/grounding/160x3 --json ... against
#              the shipped one (ar Acc@0.5 81.0%): ship into V/grounding/ only if ar's Acc@0.5 is higher
#   asr        python -m speech.train asr-lm / asr-gate --out /tmp/gpu/asr/asr (the character LM and the
#              gate the shipped folder has), then python -m speech.bench --tts 0 --asr-weights
#              /tmp/gpu/asr/asr --json ...: ship into speech/weights/asr/ only if ctc's held-out CER is
#              below the shipped one (0.212)
#   ocr        the shipping rule of document/weights/ocr-small/README.md: python -m document.devset --weights
#              document/weights/ocr-small /tmp/gpu/ocr --heldout 200, then python -m document.bench --real
#              --threads 1 --no-engines --weights /tmp/gpu/ocr against the same without --weights
#
# Environment: DEVICE (cuda), PYTHON (python3), OUT, WORK, TOTAL_S (450), QUICK (0; 1 when
# DEVICE=cpu), STEPS (all: "eagle video lpd grounding asr"), PARALLEL (1: lane A beside lane B; 0:
# one after the other), EAGLE_THREADS (8), PROMPTS (4000), DATA_MIN (2.5 wall minutes), EAGLE_MIN
# (2.5), VIDEO_MIN (1.5), LPD_MIN (1.25), PER_CLASS (3000), GROUNDING_MIN (0.75), SCENES (20000),
# OBB_SCENES (6000), ASR_MIN (1), NUM_TRAIN (3000), OCR_MIN (5), WORKERS (8: processes of the grounding,
# ASR and OCR data), PAGE_MIB (62), WHEELS, LIMIT_SCALE (scripts/gpu_env.sh). A step's limit is its budget plus
# its data and evaluation overhead; one that would get less than MIN_FRACTION (0.6) of it before
# the deadline is skipped rather than cut short (a cut training writes nothing).
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS_NAME="GPU training (scripts/gpu_train.sh)"
TOTAL_S=${TOTAL_S:-450}
PAGE_MIB=${PAGE_MIB:-62}
RESULTS=${WORK:-/tmp/parasuite_gpu}/results
PACK=${WORK:-/tmp/parasuite_gpu}/pack

if [ "${1:-}" = collect ]; then                      # a later page, from the same (warm) machine
    page=${2:?usage: scripts/gpu_train.sh collect N}
    OUT=${OUT:-$PWD/out/gpu_train}
    mkdir -p "$OUT"
    if [ ! -d "$PACK/page$page" ]; then echo "no page $page in $PACK (a fresh machine?)" >&2; exit 1; fi
    cp "$PACK/page$page"/* "$OUT"/ && ls -l "$OUT"
    exit 0
fi

MIN_FRACTION=${MIN_FRACTION:-0.6}
source scripts/gpu_env.sh
QUICK=${QUICK:-$([ "$DEV" = cpu ] && echo 1 || echo 0)}
STEPS=${STEPS:-"eagle video lpd grounding asr"}
PARALLEL=${PARALLEL:-1}
if [ "$QUICK" = 1 ]; then
    EAGLE_THREADS=${EAGLE_THREADS:-1}; PROMPTS=${PROMPTS:-6}; HELD=3; DATA_MIN=${DATA_MIN:-0.3}
    EAGLE_MIN=${EAGLE_MIN:-0.1}; EAGLE_EXTRA=(--max-new-tokens 8 --gen-batch 3 --batch-tokens 64 --draft-vocab 1024)
    VIDEO_MIN=${VIDEO_MIN:-0.05}; VIDEO_EXTRA=(--per-pair 1 --test-per-pair 1 --batch 2 --frames 2)
    LPD_MIN=${LPD_MIN:-0.05}; PER_CLASS=${PER_CLASS:-4}; LPD_EXTRA=(--batch 4 --lpd-batch 2 --zipar-batch 4)
    GROUNDING_MIN=${GROUNDING_MIN:-0.05}; SCENES=${SCENES:-100}; OBB_SCENES=${OBB_SCENES:-50}; G_BATCH=16
    ASR_MIN=${ASR_MIN:-0.05}; NUM_TRAIN=${NUM_TRAIN:-16}; WORKERS=${WORKERS:-1}; A_BATCH=4
    ASR_CONFIG='{"d_model": 64, "enc_layers": 2, "dec_hidden": 64, "conv_kernel": 15}'
    OCR_MIN=${OCR_MIN:-0.05}; O_BATCH=4
else
    EAGLE_THREADS=${EAGLE_THREADS:-8}; PROMPTS=${PROMPTS:-4000}; HELD=48; DATA_MIN=${DATA_MIN:-2.5}
    EAGLE_MIN=${EAGLE_MIN:-2.5}; EAGLE_EXTRA=()
    VIDEO_MIN=${VIDEO_MIN:-1.5}; VIDEO_EXTRA=(--per-pair 200 --test-per-pair 2 --batch 16)
    LPD_MIN=${LPD_MIN:-1.25}; PER_CLASS=${PER_CLASS:-3000}; LPD_EXTRA=(--batch 64 --lpd-batch 32 --zipar-batch 64)
    GROUNDING_MIN=${GROUNDING_MIN:-0.75}; SCENES=${SCENES:-20000}; OBB_SCENES=${OBB_SCENES:-6000}; G_BATCH=256
    ASR_MIN=${ASR_MIN:-1}; NUM_TRAIN=${NUM_TRAIN:-3000}; WORKERS=${WORKERS:-8}; A_BATCH=64
    ASR_CONFIG=''                                    # speech/train_gpu.sh's default (8.55M parameters)
    OCR_MIN=${OCR_MIN:-5}; O_BATCH=256
fi
wants() { [[ " $STEPS " == *" $1 "* ]]; }
cpu_min() { "$PY" -c "import sys; print(round(float(sys.argv[1]) * int(sys.argv[2]), 3))" "$1" "$2"; }
secs() { "$PY" -c "import sys; print(int(eval(sys.argv[1]) * 60 + int(sys.argv[2])))" "$1" "$2"; }   # minutes + s
rm -rf "$RESULTS" "$PACK"
mkdir -p "$RESULTS" "$PACK"

pack() {                                             # pack NN name folder: NN_name.tar(.partXX)
    local nn=$1 name=$2 folder=$3
    if [ ! -d "$folder" ] || [ -z "$(ls -A "$folder")" ]; then
        echo "=== pack $name: nothing in $folder" >> "$OUT/train.log"; return 0
    fi
    tar -cf "$PACK/${nn}_$name.tar" -C "$(dirname "$folder")" --transform "s|^$(basename "$folder")|$name|" \
        "$(basename "$folder")"
    if [ "$(stat -c %s "$PACK/${nn}_$name.tar")" -gt $((15 * 1048576)) ]; then
        split -b 15M "$PACK/${nn}_$name.tar" "$PACK/${nn}_$name.tar.part" && rm "$PACK/${nn}_$name.tar"
    fi
    echo "=== pack $name: $(cd "$PACK" && du -ch "${nn}_$name".tar* | tail -n 1 | cut -f1) in $(cd "$PACK" && ls "${nn}_$name".tar* | wc -l) file(s)" >> "$OUT/train.log"
}

lane_a() {                                           # 1. the EAGLE head (CPU)
    local dev_flag=()
    if "$PY" -m text.train_draft --help 2>/dev/null | grep -q -- '--device'; then dev_flag=(--device "$DEV"); fi
    step eagle "1. eagle head ($PROMPTS prompts at most, ${EAGLE_THREADS} threads)" \
        "$(secs "$DATA_MIN + $EAGLE_MIN" 150)" "$PY" -m text.train_draft "${dev_flag[@]}" --prompts "$PROMPTS" \
        --held-out "$HELD" --data-minutes "$(cpu_min "$DATA_MIN" "$EAGLE_THREADS")" \
        --minutes "$(cpu_min "$EAGLE_MIN" "$EAGLE_THREADS")" --threads "$EAGLE_THREADS" "${EAGLE_EXTRA[@]}" \
        --work "$WORK/eagle-work" --out "$RESULTS/eagle" --fresh
}

lane_b() {
    if wants video; then
        touch "$WORK/video.start"
        step train "2. video prior (${VIDEO_MIN} min)" "$(secs "$VIDEO_MIN" 90)" "$PY" -m vision.video.train prior \
            --device "$DEV" "${VIDEO_EXTRA[@]}" --lr 3e-4 --minutes "$VIDEO_MIN" --save-every 5 \
            --checkpoint "$WORK/video-checkpoint"
        # it swaps its folder in only when complete: the shipped one stays unless a new one was written
        if [ -n "$(find vision/weights/video/prior -name '*.safetensors' -newer "$WORK/video.start")" ]; then
            cp -r vision/weights/video/prior "$RESULTS/video_prior"
        fi
        pack 02 video_prior "$RESULTS/video_prior"
    fi
    if wants lpd; then
        step train "3. lpd position queries (${LPD_MIN} min)" "$(secs "$LPD_MIN" 75)" "$PY" -m vision.train lpd \
            --device "$DEV" --per-class "$PER_CLASS" "${LPD_EXTRA[@]}" --zipar-window 3 --lr 4e-4 --steps 100000 \
            --save-every 0 --minutes "$LPD_MIN" --init vision/weights/prior --out "$RESULTS/lpd_prior"
        pack 03 lpd_prior "$RESULTS/lpd_prior"
    fi
    if wants grounding; then
        step train "4. grounding 160:3:5 (${GROUNDING_MIN} min)" "$(secs "$GROUNDING_MIN" 120)" \
            env DEVICE="$DEV" PYTHON="$PY" MINUTES="$GROUNDING_MIN" SCENES="$SCENES" OBB_SCENES="$OBB_SCENES" \
            BATCH="$G_BATCH" SIZES=160:3:5 WORKERS="$WORKERS" PARASUITE_CACHE="$WORK/grounding-cache" \
            vision/grounding/train_gpu.sh "$RESULTS/grounding"
        pack 04 grounding "$RESULTS/grounding"
    fi
    if wants asr; then
        local bundle="" config=()
        if [ -n "$ASR_CONFIG" ]; then config=(CONFIG="$ASR_CONFIG"); fi
        if [ "$_wheels" = 1 ] && [ -f .whl/speech/env.sh ]; then bundle=.whl/speech; fi
        step train "5. asr (${ASR_MIN} min, $NUM_TRAIN utterances)" "$(secs "$ASR_MIN" 120)" \
            env DEVICE="$DEV" PYTHON="$PY" BUNDLE="$bundle" MINUTES="$ASR_MIN" NUM_TRAIN="$NUM_TRAIN" \
            WORKERS="$WORKERS" BATCH="$A_BATCH" THREADS="$([ "$QUICK" = 1 ] && echo 1 || echo 8)" \
            "${config[@]}" speech/train_gpu.sh "$RESULTS/asr"
        rm -rf "$RESULTS/asr/cache"                  # the generated data set: not brought back
        pack 05 asr "$RESULTS/asr"
    fi
    if wants ocr; then
        step train "6. ocr recogniser (${OCR_MIN} min, batch $O_BATCH)" "$(secs "$OCR_MIN" 90)" "$PY" -m document.train \
            --resume document/weights/ocr-small --data typeset --typeset-share 0.5 --device "$DEV" \
            --workers "$WORKERS" --batch "$O_BATCH" --lr 1e-3 --warmup 100 --minutes "$OCR_MIN" \
            --out "$RESULTS/ocr" --state "$WORK/ocr-state.pt"
        pack 06 ocr "$RESULTS/ocr"
    fi
}

if wants eagle && [ "$PARALLEL" = 1 ]; then
    ( lane_a; printf '%s\n' "${_ROWS[@]}" > "$WORK/lane_a.rows"; pack 01 eagle "$RESULTS/eagle" ) &
    lane_a_pid=$!
    lane_b
    wait "$lane_a_pid"
    mapfile -t rows_a < "$WORK/lane_a.rows"
    _ROWS=("${rows_a[@]}" "${_ROWS[@]}")
    grep -q 'FAILED\|TIMEOUT' "$WORK/lane_a.rows" && _FAILED=1
else
    if wants eagle; then lane_a; pack 01 eagle "$RESULTS/eagle"; fi
    lane_b
fi
[ -f "$RESULTS/eagle/metrics.json" ] && { echo "--- eagle metrics.json"; cat "$RESULTS/eagle/metrics.json"; } >> "$OUT/eagle.log"

# pages: at most 8 files and PAGE_MIB per call; page 1 holds the logs and summary.md too
"$PY" - "$PACK" "$OUT" "$PAGE_MIB" <<'EOF' > "$WORK/pages.txt"
import os, sys
pack, out, page_mib = sys.argv[1], sys.argv[2], float(sys.argv[3])
groups = {}
for f in sorted(os.listdir(pack)):
    if ".tar" in f:
        groups.setdefault(f.split(".tar")[0], []).append(f)
logs = [f for f in os.listdir(out)] + ["summary.md"]
pages, files, size = [], list(logs), sum(os.path.getsize(os.path.join(out, f)) for f in logs
                                         if os.path.exists(os.path.join(out, f)))
for name, parts in groups.items():
    s = sum(os.path.getsize(os.path.join(pack, p)) for p in parts)
    if files and (len(files) + len(parts) > 8 or (size + s) / 2**20 > page_mib):
        pages.append(files)
        files, size = [], 0
    files, size = files + parts, size + s
pages.append(files)
for i, page in enumerate(pages, 1):
    print(i, *[f for f in page if f not in logs])
EOF
while read -r page files; do
    if [ "$page" = 1 ]; then
        for f in $files; do mv "$PACK/$f" "$OUT/"; done
        _ROWS+=("| results page 1 | in \$OUT: $files | | |")
    else
        mkdir -p "$PACK/page$page"
        for f in $files; do mv "$PACK/$f" "$PACK/page$page/"; done
        _ROWS+=("| results page $page | scripts/gpu_train.sh collect $page: $files | | |")
    fi
done < "$WORK/pages.txt"
finish
