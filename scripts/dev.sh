#!/usr/bin/env bash
# Set everything up in ./.venv, then serve or test.
#   scripts/dev.sh serve [qwen-ui serve flags...]   embedded defaults on 127.0.0.1:7860
#   scripts/dev.sh test  [pytest args...]           lint, types and the whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${QWEN_UI_VENV:-.venv}
PY=${PYTHON:-python3}

log() { printf '\033[1m[qwen-ui]\033[0m %s\n' "$*" >&2; }

setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  # torch + torchvision as a matching pair (PyPI's torchvision does not import beside
  # older CPU-only torch wheels); keep a torch that is already there.
  if ! "$VENV/bin/python" -c 'import torch, torchvision' 2>/dev/null; then
    log "installing torch 2.14.1 + torchvision 0.29.1"
    "$VENV/bin/python" -m pip install -q torch==2.14.1 torchvision==0.29.1
  fi
  log "installing qwen-ui ($1)"
  "$VENV/bin/python" -m pip install -q -e ".[$1]"
}

need_debian() {  # need_debian BINARY PACKAGE...
  local binary=$1; shift
  command -v "$binary" >/dev/null 2>&1 && return 0
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing Debian packages: $*"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

cmd_serve() {
  setup_python test
  exec "$VENV/bin/qwen-ui" serve "$@"
}

cmd_test() {
  setup_python test
  need_debian redis-server redis-server
  need_debian chromium chromium fonts-noto-cjk
  log "ruff"
  "$VENV/bin/ruff" check qwen_ui tests bench training app.py
  "$VENV/bin/ruff" format --check qwen_ui tests bench training app.py
  log "mypy"
  "$VENV/bin/mypy"
  log "pytest"
  local rc=0
  "$VENV/bin/pytest" "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    log "pytest collected no tests: failing"
    return 1
  fi
  return "$rc"
}

case "${1:-}" in
  serve) shift; cmd_serve "$@" ;;
  test) shift; cmd_test "$@" ;;
  *) echo "usage: scripts/dev.sh serve|test [args...]" >&2; exit 2 ;;
esac
