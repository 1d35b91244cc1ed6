#!/usr/bin/env bash
# `torchtalk audit` of PyTorch 2.6's Python against the 2.6.0 wheel (docs/audit.md,
# "PyTorch's Python"): torch/_numpy, distributions' constraints, torch/functional.py and
# the ao sparsifier mutated; six recorded test files as the suite (14 s a run).
# Usage: run-python-audit.sh [extra audit arguments, e.g. --resume]
# Env: SOURCE (a git checkout of the 2.6 tree, clean, indexed), VENV (torch==2.6.0),
#      RECORD (a record of these files at HEAD), OUT (reports, scratch),
#      TORCHTALK (the torchtalk to run; default: the one on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source=${SOURCE:?a PyTorch 2.6 checkout}; venv=${VENV:?a venv with torch==2.6.0}
record=${RECORD:?a record of the suite}; out=${OUT:?a directory for the report}
mkdir -p "$out"
export OMP_NUM_THREADS=1 SITE=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
export STATE=$out/synced.txt
suite="torch_np/test_basic.py torch_np/test_reductions.py torch_np/numpy_tests/lib/test_histograms.py"
suite+=" distributions/test_constraints.py test_spectral_ops.py ao/sparsity/test_parametrization.py"
cd "$source"
exec "${TORCHTALK:-torchtalk}" audit --source . --build "$here/sync-into-wheel.sh" \
  --test "cd test && PYTHONDONTWRITEBYTECODE=1 CUDA_VISIBLE_DEVICES= $venv/bin/python -m pytest $suite -q -p no:cacheprovider" \
  --mutations 40 --seed 1 --paths 'torch/_numpy/*' 'torch/distributions/constraints.py' \
  'torch/functional.py' 'torch/ao/pruning/sparsifier/*' \
  --record "$record" --budget 80 --report "$out/pt26-python.json" "$@"
