#!/usr/bin/env bash
# Run `torchtalk audit` on a tree built by setup-extension.sh, with the plan of
# docs/audit.md for that extension.
# NAME is the tree's directory under $EXT; NAME-python is a copy of NAME's built tree
# (cp -a), audited on its Python sources only.
# Usage: [PLAN=headers] run-audit.sh NAME static|record [extra audit arguments, e.g. --budget 20]
# PLAN names another plan for the same tree (its report NAME-MODE-PLAN.json).
# Trees under $EXT (/work/ext), reports $EXT/reports/NAME-MODE.json and .md.
set -euo pipefail
name=$1 mode=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
ext=${EXT:-/work/ext}
venv=${VENV:-/work/venv-ext-audit}
export PATH="$venv/bin:$PATH" OMP_NUM_THREADS=1
export TORCHTALK_CACHE_DIR=${TORCHTALK_CACHE_DIR:-/work/cache-ext-audit}
source "$here/build-env.sh"
cd "$ext/$name"
test_cmd="python -m pytest test -q --no-header -p no:cacheprovider"
plan_name=$name${PLAN:+:$PLAN}
case $plan_name in
  pytorch_spline_conv)
    plan=(--mutations 45 --seed 1 --paths 'csrc/*.cpp' 'csrc/*.h' 'csrc/cpu/*' 'torch_spline_conv/*') ;;
  pytorch_spline_conv-python)  # Python only, in a copy of the built tree (C++ builds are slow here)
    plan=(--mutations 45 --seed 2 --paths 'torch_spline_conv/*') ;;
  pytorch_sparse)  # seed 1 of the "before" run: C++ sources (no headers: each forces 20 compiles) and Python
    plan=(--mutations 80 --seed 1 --paths 'csrc/*.cpp' 'csrc/cpu/*.cpp' 'torch_sparse/*') ;;
  pytorch_sparse:headers)  # the header functions whose callers precise mode tells apart (issue 19):
    # the two Reducers (CPU reducer.h, CUDA reducer.cuh) and the from_vector overloads
    plan=(--mutations 14 --seed 1 --paths 'csrc/cpu/reducer.h' 'csrc/cuda/reducer.cuh' 'csrc/cpu/utils.h:20-37') ;;
  pytorch_sparse:map-overload)  # the from_vector overload only the compiler tells apart
    plan=(--mutations 3 --seed 1 --paths 'csrc/cpu/utils.h:29-37') ;;
  pytorch_sparse-python)  # seed 2 of the "before" run, Python only, in a copy of the built tree
    plan=(--mutations 80 --seed 2 --paths 'torch_sparse/*') ;;
  extension-cpp)
    plan=(--mutations 10 --seed 1 --paths 'extension_cpp/*') ;;  # fnmatch: * spans /, csrc/ too
  *) echo "no plan for $plan_name" >&2; exit 2 ;;
esac
torchtalk index build > "$ext/reports/$name-index.log" 2>&1
record_args=()
if [ "$mode" = record ]; then
  record=$ext/reports/$name.record.ttr
  if [ ! -e "$record" ]; then   # the suite's own record, at HEAD, in the built tree
    $test_cmd --torchtalk-record-to="$record" > "$ext/reports/$name.record.log" 2>&1
  fi
  record_args=(--record "$record")
fi
set -x
torchtalk audit --source . --build "$here/incremental-build.sh" --test "$test_cmd" \
  "${plan[@]}" "${record_args[@]}" --report "$ext/reports/$name-$mode${PLAN:+-$PLAN}.json" "$@"
