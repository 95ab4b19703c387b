#!/usr/bin/env bash
# Rebuild the demo model's `awq` revision from its `bf16` revision (offline, CPU) with a
# maintained quantizer, gptqmodel, in its own environment (.venv-quantize, git-ignored;
# the runtime never imports it). See training/NOTES.md, "AWQ".
#
#   training/quantize_demo.sh [SRC] [OUT] [SAMPLES]
#
# gptqmodel 7.7.0 asks for torch >= 2.14.1, which pip here only has as a multi-GB CUDA
# build; its AWQ path runs on the CPU build of torch 2.13.0 that this machine keeps on
# disk, so gptqmodel is installed without its dependencies and those are pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-qwen_ui/demo/weights/bf16}
OUT=${2:-qwen_ui/demo/weights/awq}
SAMPLES=${3:-128}
PY=${PYTHON:-.venv/bin/python}
QENV=${QUANT_VENV:-.venv-quantize}
BASE_PY=${QUANT_BASE_PYTHON:-python3.11}

if [ ! -x "$QENV/bin/python" ]; then
    "$BASE_PY" -m venv "$QENV"
    "$QENV/bin/pip" install -q torch==2.13.0
    "$QENV/bin/pip" install -q --no-deps gptqmodel==7.7.0
    echo "torch==2.13.0" >"$QENV/constraints.txt"
    "$QENV/bin/pip" install -q -c "$QENV/constraints.txt" transformers==5.24.0 \
        "accelerate>=1.15.0" "numpy>=2.4.6" "safetensors>=0.8.0" "threadpoolctl>=3.7.0" \
        "packaging>=26.3" "device-smi>=0.5.7" "protobuf>=7.36.2" "pillow>=13.0.0" \
        "requests>=2.34.2" "pypcre>=0.6.4" "tokenicer>=0.0.14" "logbar>=0.4.15" \
        "jinja2>=3.1.6" "ninja>=1.13.2" "datasets>=5.1.0" "pyarrow>=26.0.0" "dill>=0.4.1" \
        "torchao>=0.18.0" "defuser>=0.0.28"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PY" -m training.quantize calibration --out "$WORK/calib" --samples "$SAMPLES"
# in the work folder: gptqmodel writes a logs/ folder where it runs
GPTQ=("$(realpath "$QENV")/bin/python" "$(realpath training/gptq_awq.py)")
SRC_DIR=$(realpath "$SRC")
(cd "$WORK" && "${GPTQ[@]}" --src "$SRC_DIR" --calib calib/calib.json --out gptq)
"$PY" -m training.quantize official --gptq "$WORK/gptq" --src "$SRC" --out "$OUT"
"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
files = [p for p in out.iterdir() if p.is_file()]
total = sum(p.stat().st_size for p in files)
print(f"{out}: {len(files)} files, {total / 1e6:.1f} MB, largest {max(p.stat().st_size for p in files) / 2**20:.1f} MiB")
print(json.loads((out / "config.json").read_text())["quantization_config"])
PY
