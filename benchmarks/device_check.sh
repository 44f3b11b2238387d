#!/usr/bin/env bash
# The GPU device check of issue 18, one command, meant to finish in under 8 minutes on one H200:
#   bash benchmarks/device_check.sh
# The GPU machine reaches no registry: vllm (CUDA build) and its requirements must lie as wheels in
# .whl/ (ignored by git; fill it with `pip download vllm==<version> -d .whl` where a registry is reached).
# What is missing is skipped and said. Random-weight Qwen3-0.6B and 1.7B, a voting rollout step shared
# and isolated at 16 prompts x 8 rollouts x 1024 tokens with each backend; step time, tokens/s, peak GPU
# memory (the vllm runs verify every sync), extrapolated to 64 x 8 x 5120 and 300 steps vs time_min.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import vllm' 2>/dev/null; then
  if ls .whl/vllm-*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --find-links .whl vllm || echo "device_check: vllm wheels in .whl/ did not install"
  else
    echo "device_check: no vllm wheel in .whl/: the vllm backend is SKIPPED (hf only)"
  fi
fi
BACKENDS=hf
"$PY" -c 'import vllm' 2>/dev/null && BACKENDS=hf,vllm
for size in 0.6b 1.7b; do
  timeout 200 "$PY" -m benchmarks.bench_rollout --size "$size" --prompts 16 --generations 8 --tokens 1024 \
    --steps 1 --backends "$BACKENDS" --extrapolate || echo "device_check: $size failed or ran out of its 200 s"
done
