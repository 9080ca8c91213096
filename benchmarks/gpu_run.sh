#!/usr/bin/env bash
# On the GPU host, from the repository root: the Python packages it lacks (carried as wheels in .whl/),
# hetc importable as a link tree of the repository's folders (what an install maps), then every check
# of benchmarks/gpu_serve.py into $OUT. Usage: bash benchmarks/gpu_run.sh WORK [BUDGET_S] [CHECK...]
# The wheels (benchmarks/gpu_wheels.txt; .whl/ is ignored, carried with the call): here, once,
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform any -d .whl -r benchmarks/gpu_wheels.txt
set -u
work=${1:?WORK: the folder gpu_serve.py prepare wrote}
budget=${2:-420}
shift $(( $# < 2 ? $# : 2 ))
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/pkg/hetc
for f in hetc/*; do ln -sfn "$PWD/$f" "/tmp/pkg/hetc/$(basename "$f")"; done
for d in partitioner backends runtime hardware_profiles capacity; do ln -sfn "$PWD/$d" "/tmp/pkg/hetc/$d"; done
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 benchmarks/gpu_serve.py check "$work" -o "${OUT:-gpu-out}" --budget "$budget" ${1:+--only "$@"}
