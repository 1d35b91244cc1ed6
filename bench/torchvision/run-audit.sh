#!/usr/bin/env bash
# Run `torchtalk audit` on a torchvision 0.21 tree built in place (docs/audit.md,
# "torchvision 0.21"): index it with the torchvision harness, record the suite at HEAD
# (once), then audit PLAN with the record. The static figures come from replaying the
# report with --no-record.
# Usage: [BUILD=CMD] run-audit.sh TREE PLAN [extra audit arguments, e.g. --budget 40 or --resume]
#   PLAN cpp: the compiled CPU ops (csrc/ops, cpu/, autograd/, autocast/, quantized/cpu/)
#   PLAN python: the Python ops (torchvision/ops), for a `cp -a` copy of the built tree
# Reports under $REPORTS (/work/tv-reports): TREE's basename-PLAN.json and .md.
set -euo pipefail
tree=$1 plan_name=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
venv=${VENV:-/work/venv-tv}
reports=${REPORTS:-/work/tv-reports}
export PATH="$venv/bin:$PATH" OMP_NUM_THREADS=1
export TORCHTALK_CACHE_DIR=${TORCHTALK_CACHE_DIR:-/work/tv-cache}
# The fast graph: the build's build.ninja would turn on precise mode, whose libclang parse of
# each TU (torch's headers) takes minutes on the shared cores (docs/audit.md, "torchvision 0.21").
export TORCHTALK_PRECISE=${TORCHTALK_PRECISE:-off}
mkdir -p "$reports"
cd "$tree"
name=$(basename "$tree")
test_cmd=$(cat "$here/suite.txt")   # one line: the suite (docs/audit.md says why these tests)
build=${BUILD:-$here/incremental-build.sh}   # BUILD=true for a copy whose ops come from elsewhere
case $plan_name in
  cpp)  # only what a CPU build compiles (setup.py's make_C_extension): cuda/ and mps/ are not built here
    # (fnmatch: * spans /, so 'ops/*.cpp' is every .cpp under ops/, none of them in cuda/ or
    # mps/; the headers are named so that cuda/cuda_helpers.h and mps/*.h stay out)
    plan=(--mutations 30 --seed 1 --paths 'torchvision/csrc/ops/*.cpp'
          'torchvision/csrc/ops/[dnopr]*.h' 'torchvision/csrc/ops/cpu/*.h') ;;
  python)
    plan=(--mutations 30 --seed 2 --paths 'torchvision/ops/*') ;;
  *) echo "no plan $plan_name (cpp or python)" >&2; exit 2 ;;
esac
torchtalk index build --source . --harness torchvision > "$reports/$name-index.log" 2>&1
record=$reports/$name.record.ttr
if [ ! -e "$record" ]; then   # the suite's own record, at HEAD, in the built tree
  eval "$test_cmd --torchtalk-record-to=$record" > "$reports/$name.record.log" 2>&1 || true
fi
set -x
torchtalk audit --source . --harness torchvision --build "$build" \
  --test "$test_cmd" "${plan[@]}" --record "$record" --report "$reports/$name-$plan_name.json" "$@"
