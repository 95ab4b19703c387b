"""Seconds from `qwen-ui serve` process start until /healthz answers, and until the full
app (the login page) answers; a fresh QWEN_UI_HOME per run.

    .venv/bin/python bench/bench_startup.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.server import ServerProcess


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.runs):
        server = ServerProcess(Path(tempfile.mkdtemp(prefix="qwen-ui-bench-")))
        try:
            healthz, app = server.wait_for("/healthz"), server.wait_for("/login")
        finally:
            server.stop()
        print(json.dumps({"healthz_s": round(healthz, 3), "app_ready_s": round(app, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
