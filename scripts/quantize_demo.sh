#!/usr/bin/env bash
# Rebuild the demo model's `awq` revision from its `bf16` revision (offline, CPU).
#
#   scripts/quantize_demo.sh [SRC] [OUT] [SAMPLES]
#
# The AWQ algorithm (activation-aware scale search, clipping, group-128 asymmetric 4-bit,
# AutoAWQ GEMM packing) is implemented in qwen_ui/demo/quantize.py with torch alone, so it
# runs in the project's own environment; no quantizer package (autoawq, gptqmodel) is
# installed or imported. See docs/demo-model.md, "AWQ".
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-qwen_ui/demo/weights/bf16}
OUT=${2:-qwen_ui/demo/weights/awq}
SAMPLES=${3:-32}
PY=${PYTHON:-.venv/bin/python}
"$PY" -m qwen_ui.demo.quantize --src "$SRC" --out "$OUT" --samples "$SAMPLES"
"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
files = [p for p in out.iterdir() if p.is_file()]
total = sum(p.stat().st_size for p in files)
print(f"{out}: {len(files)} files, {total / 1e6:.1f} MB, largest {max(p.stat().st_size for p in files) / 2**20:.1f} MiB")
print(json.loads((out / "config.json").read_text())["quantization_config"])
PY
