#!/usr/bin/env bash
# One demo-model training run on the device GPU, inside one call (training/NOTES.md,
# "Training"). Continues from the shipped bf16 weights unless --init is given again.
#
#   bash training/train_demo_on_device.sh MINUTES --seed N [train.py options...]
#
# --seed is required: it picks the training samples, and a run continuing another with
# the seed it had trains on the same samples again (every run up to run 14 had the
# default, 1).
# To spread one learning-rate schedule over several calls, add --schedule-span 0,0.5 to
# the first and --schedule-span 0.5,1 to the next.
#
# Writes under $OUT at most 6 files (the device returns 8): the model's shards, the
# shard index, heads.pt (the training-only heads, for --init-heads in a next call) and
# metrics.jsonl; the log (warnings dropped) goes to /tmp/train.log.
# Uses the device's preinstalled torch and transformers: keep PYTHONPATH clear of the
# benches' unpacked site folder.
#
# --eval (anywhere among the options) then scores the saved bf16 model on the GPU in the
# same call with `qwen-ui demo eval`'s code (training/eval_demo.py; greedy, fp32, set 0):
# the grammar's 2,000 questions and 400 off-grammar ones, as eval-bf16-n2000-seed0.json
# and eval-bf16-off_grammar-n400-seed0.json under $OUT, with run.log (the training log
# and the evaluation's) in place of heads.pt: 8 files with the 3 shards. The evaluation
# imports pydantic, pydantic-settings and redis, which the device lacks: carry their
# wheels in .whl (training/NOTES.md, "Refusals in one call"); they go to a folder of their own, on
# PYTHONPATH for the evaluation only. It stops at DEADLINE_S (default 570) seconds after
# the script started. EVAL_DEVICE, EVAL_N, EVAL_OFF_N and WHEELS change the device
# (cuda), the two sets' sizes (2000, 400) and the wheels' folder (.whl): a CPU smoke test.
# EVAL_EXTRA_KINDS (default off_grammar) names the second set's kinds, comma-separated
# (e.g. off_grammar,grounding: one file, eval-bf16-off_grammar-grounding-n400-seed0.json).
set -uo pipefail
minutes=$1
shift
if [[ " $* " != *" --seed "* && " $* " != *" --seed="* ]]; then
    echo "pass --seed N, a new one for each run (it picks the training samples)" >&2
    exit 2
fi
init=(--init qwen_ui/demo/weights/bf16)
args=()
evaluate=false
for a in "$@"; do
    case $a in
    --from-scratch) init=() ;;
    --eval) evaluate=true ;;
    *) args+=("$a") ;;
    esac
done
out=${OUT:-/tmp/out}
mkdir -p "$out"
site=/tmp/demo-eval-site
if $evaluate && [[ -d ${WHEELS:-.whl} ]]; then
    rm -rf "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$site" "${WHEELS:-.whl}"/*.whl || echo "wheels not installed" >&2
fi
run=/tmp/demo-run
# a warm machine keeps the last call's run: move it aside (its metrics must not run on in
# this call's file); on a warm machine the next call of one schedule can take its weights
# from there instead of carrying them: --init /tmp/demo-prev/model --init-heads
# /tmp/demo-prev/heads.pt
rm -rf /tmp/demo-prev
if [[ -d $run ]]; then mv "$run" /tmp/demo-prev; fi
export PYTHONUNBUFFERED=1
unset PYTHONPATH
# the wall limit leaves a minute for start-up, the last evaluation and the save
limit=$(python3 -c "print(int($minutes * 60 + 60))")
timeout "$limit" python3 -m training.train --out "$run" "${init[@]}" \
    --steps 100000 --max-minutes "$minutes" --save-every-s 60 "${args[@]}" 2>&1 |
    grep -v "Warning\|Writing model" >/tmp/train.log
cp "$run"/model/*.safetensors "$run"/model/model.safetensors.index.json "$run"/metrics.jsonl \
    "$out"/
$evaluate || cp "$run"/heads.pt "$out"/
grep '"eval"' "$run"/metrics.jsonl | tail -n 3
$evaluate || exit 0
[[ -f $run/model/model.safetensors.index.json ]] || { cp /tmp/train.log "$out"/run.log; exit 1; }

# the package's config and processor files (what ships) around the run's shards
weights=/tmp/demo-eval/bf16
rm -rf /tmp/demo-eval && mkdir -p "$weights"
find qwen_ui/demo/weights/bf16 -maxdepth 1 -type f ! -name '*.safetensors*' \
    -exec cp {} "$weights"/ \;
cp "$run"/model/*.safetensors "$run"/model/model.safetensors.index.json "$weights"/
left=$((${DEADLINE_S:-570} - SECONDS))
echo "evaluating, ${left}s left" | tee -a /tmp/train.log
extra=${EVAL_EXTRA_KINDS:-off_grammar}
extra_args=$(printf -- '--kind %s ' ${extra//,/ })
common="--weights $weights --device ${EVAL_DEVICE:-cuda} --batch-size 64 --seed 0"
if [[ $left -gt 20 ]]; then
    PYTHONPATH=$site HF_HUB_OFFLINE=1 timeout "$left" python3 -m training.eval_demo "$out" \
        "eval-bf16-n${EVAL_N:-2000}-seed0.json=$common --n ${EVAL_N:-2000}" \
        "eval-bf16-${extra//,/-}-n${EVAL_OFF_N:-400}-seed0.json=$common $extra_args --n ${EVAL_OFF_N:-400}" \
        >>/tmp/train.log 2>&1
    echo "evaluation: exit $?" | tee -a /tmp/train.log
fi
cp /tmp/train.log "$out"/run.log
for f in "$out"/eval-*.json; do
    [[ -s $f ]] && python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(sys.argv[1], r['overall'], {k: v['accuracy'] for k, v in r['by_kind'].items()})" "$f"
done
