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
set -uo pipefail
minutes=$1
shift
if [[ " $* " != *" --seed "* && " $* " != *" --seed="* ]]; then
    echo "pass --seed N, a new one for each run (it picks the training samples)" >&2
    exit 2
fi
init=(--init qwen_ui/demo/weights/bf16)
args=()
for a in "$@"; do
    if [[ $a == --from-scratch ]]; then init=(); else args+=("$a"); fi
done
out=${OUT:-/tmp/out}
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
    "$run"/heads.pt "$out"/
grep '"eval"' "$run"/metrics.jsonl | tail -n 3
