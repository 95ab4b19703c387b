#!/usr/bin/env bash
# Fetch a model from ModelScope into this host's model store (the ESSD data disk) and
# install it. See docs/store.md.
#
#   scripts/cache_model.sh [options] [MODEL_ID [REVISION]]
#
# Steps: (1) ask ModelScope for the file list (one request, --timeout seconds) and check
# the free space of the store's file system; (2) download with the ModelScope SDK into
# QWEN_UI_MODEL_DIR/staging/<owner>--<name>/<revision> (a re-run resumes); (3) run
# `qwen-ui models install` on it (copy, hash, manifest, atomic ref); (4) delete staging.
# With --from-dir DIR, steps 1, 2 and 4 are skipped and DIR is installed.
# Step 2 first downloads config.json alone: a checkpoint the engine cannot run (FP8, GPTQ,
# compressed-tensors, MoE, another architecture) is refused there (exit 7), and install
# checks again with the weights' tensor headers (exit 2). docs/store.md, "Checkpoint layouts".
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/cache_model.sh [options] [MODEL_ID [REVISION]]

Download MODEL_ID (default Qwen/Qwen2.5-VL-7B-Instruct-AWQ) at REVISION (default master)
from ModelScope into the model store, then install it.

Checkpoints that run: Qwen2-VL, Qwen2.5-VL and Qwen3-VL dense models, unquantized
(e.g. Qwen/Qwen3-VL-8B-Instruct, Qwen/Qwen3-VL-4B-Instruct) or AutoAWQ GEMM 4-bit
(e.g. Qwen/Qwen2.5-VL-7B-Instruct-AWQ). Refused before the weights are downloaded
(exit 7): FP8, GPTQ, compressed-tensors, other quantizations, MoE and other
architectures (see docs/store.md, "Checkpoint layouts").

options:
  --from-dir DIR     install the model files in DIR instead of downloading
  --endpoint URL     ModelScope endpoint (default: $MODELSCOPE_ENDPOINT, else https://modelscope.cn)
  --timeout S        seconds to wait for ModelScope's first answer (default 5)
  --min-free-gb N    free space required when the repository size cannot be listed (default 16)
  --keep-staging     keep the downloaded files after installing them
  --force            download and install even when the store already holds identical
                     files (repairs a snapshot that `qwen-ui models verify --full` reported)
  --skip-layout-check  install even a checkpoint the engine cannot run
  -h, --help         this text

environment:
  QWEN_UI_MODEL_DIR  store root, e.g. /data/qwen-ui/models on the ESSD disk
                     (default: $QWEN_UI_HOME/models, QWEN_UI_HOME default ~/.local/share/qwen-ui)
  QWEN_UI_PYTHON     the python that has qwen_ui installed (default: python3, else ./.venv/bin/python)
  MODELSCOPE_ENDPOINT, MODELSCOPE_API_TOKEN   read by the ModelScope SDK
EOF
}

model_id="Qwen/Qwen2.5-VL-7B-Instruct-AWQ"
revision="master"
from_dir=""
fetch_args=()
install_args=()
keep_staging=0
positional=()

while [ $# -gt 0 ]; do
  case "$1" in
    --from-dir) from_dir="${2:?--from-dir needs a directory}"; shift 2 ;;
    --from-dir=*) from_dir="${1#*=}"; shift ;;
    --endpoint|--timeout|--min-free-gb)
      fetch_args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --endpoint=*|--timeout=*|--min-free-gb=*) fetch_args+=("$1"); shift ;;
    --keep-staging) keep_staging=1; shift ;;
    --force) fetch_args+=("--force"); shift ;;
    --skip-layout-check) fetch_args+=("$1"); install_args+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; positional+=("$@"); break ;;
    -*) echo "cache_model.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [ ${#positional[@]} -gt 2 ]; then
  echo "cache_model.sh: too many arguments (see --help)" >&2; exit 2
fi
[ ${#positional[@]} -ge 1 ] && model_id="${positional[0]}"
[ ${#positional[@]} -ge 2 ] && revision="${positional[1]}"

# The python that has qwen_ui: $QWEN_UI_PYTHON, else python3, else the checkout's .venv.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${QWEN_UI_PYTHON:-}"
if [ -z "$py" ]; then
  for candidate in python3 "$here/../.venv/bin/python"; do
    if "$candidate" -c 'import qwen_ui' >/dev/null 2>&1; then py="$candidate"; break; fi
  done
fi
if [ -z "$py" ] || ! "$py" -c 'import qwen_ui' >/dev/null 2>&1; then
  echo "cache_model.sh: no python with qwen_ui found; set QWEN_UI_PYTHON to it" \
       "(e.g. QWEN_UI_PYTHON=/opt/qwen-ui/.venv/bin/python)" >&2
  exit 2
fi
qwen_ui() { "$py" -m qwen_ui.cli "$@"; }

store="$(qwen_ui models root)"
echo "model store: $store"

if [ -n "$from_dir" ]; then
  qwen_ui models install "$from_dir" --model-id "$model_id" --revision "$revision" \
    "${install_args[@]}"
  exit 0
fi

# (1) + (2): check ModelScope and the disk, then download into staging.
status=0
qwen_ui models fetch "$model_id" --revision "$revision" "${fetch_args[@]}" || status=$?
case "$status" in
  0) ;;
  10) qwen_ui models resolve "$model_id" --revision "$revision"; exit 0 ;;  # up to date
  *) exit "$status" ;;
esac

# (3) install, (4) drop the staging copy.
staging="$store/staging/${model_id/\//--}/$revision"
qwen_ui models install "$staging" --model-id "$model_id" --revision "$revision" \
  "${install_args[@]}"
if [ "$keep_staging" = 0 ]; then
  rm -rf -- "$staging"
  echo "removed the staging copy $staging (use --keep-staging to keep it)"
fi
