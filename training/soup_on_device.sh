#!/usr/bin/env bash
# Averages of the shipped bf16 weights and another run's, chosen on one held-out set and
# scored on another, in one device call (training/NOTES.md, "Weight averages").
#
#   bash training/soup_on_device.sh B ALPHA [ALPHA...]
#
# For each ALPHA, (1 - ALPHA) * shipped + ALPHA * B (training/soup.py) is scored greedy on
# the GPU on set SELECT_SEED (default 7): the grammar's 2,000 questions and 400 refusals.
# The one whose weakest type is best (ALPHA 0 is the shipped model) is then scored on
# set 0. $OUT gets its shards, the index and evals.tar (every evaluation's JSON): 5 files.
# Carry .whl (the evaluation's pydantic and redis, as train_demo_on_device.sh --eval) and B.
set -uo pipefail
b=$1
shift
out=${OUT:-/tmp/out}
ev=/tmp/soup-evals
rm -rf "$ev"
mkdir -p "$out" "$ev"
site=/tmp/demo-eval-site
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" "${WHEELS:-.whl}"/*.whl || echo "wheels not installed" >&2
select=${SELECT_SEED:-7}
shipped=qwen_ui/demo/weights/bf16
rm -rf /tmp/soup && mkdir -p /tmp/soup
runs=()
candidates=()
for alpha in "$@"; do
    w=/tmp/soup/$alpha
    python3 -m training.soup average "$shipped" "$b" "$alpha" "$w" || exit 1
    common="--weights $w --device cuda --batch-size 64 --seed $select"
    grammar=soup$alpha-n2000-seed$select.json
    refusals=soup$alpha-off_grammar-n400-seed$select.json
    runs+=("$grammar=$common --n 2000" "$refusals=$common --kind off_grammar --n 400")
    candidates+=("$alpha=$ev/$grammar,$ev/$refusals")
done
export HF_HUB_OFFLINE=1
PYTHONPATH=$site python3 -m training.eval_demo "$ev" "${runs[@]}" || exit 1
best=$(PYTHONPATH=$site python3 -m training.soup choose "${candidates[@]}") || exit 1
echo "chosen on set $select: alpha $best"
w=/tmp/soup/$best
common="--weights $w --device cuda --batch-size 64 --seed 0"
PYTHONPATH=$site python3 -m training.eval_demo "$ev" \
    "soup$best-n2000-seed0.json=$common --n 2000" \
    "soup$best-off_grammar-n400-seed0.json=$common --kind off_grammar --n 400" || exit 1
cp "$w"/model*.safetensors* "$out"/
tar -cf "$out"/evals.tar -C "$ev" .
for f in "$ev"/soup*.json; do
    python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(sys.argv[1].rsplit('/', 1)[1], r['overall']['accuracy'], {k: v['accuracy'] for k, v in r['by_kind'].items()})" "$f"
done
