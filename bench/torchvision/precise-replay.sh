#!/usr/bin/env bash
# Replay a C++ audit report of torchvision (or a sample of it, sample_report.py) with precise
# C++ mode and with the fast graph, each with and without the record (docs/audit.md,
# "torchvision 0.21: precise mode"). Run at the root of the audited tree (clean, at the
# report's HEAD; nothing is built: a replay only selects).
# Usage: precise-replay.sh REPORT COMPDB OUTDIR
#   COMPDB: the compile database of torchvision._C (bench/compdb_from_build_log.py over the
#   build's log, the 26 commands with -DTORCH_EXTENSION_NAME=_C)
set -euo pipefail
report=$1 compdb=$2 out=$3
venv=${VENV:-/work/venv-tv}
export PATH="$venv/bin:$PATH" OMP_NUM_THREADS=1
mkdir -p "$out"
name=$(basename "$report" .json)
time_it() { /usr/bin/time -f "%e s wall, %U s user" "$@"; }
# precise first: its build parses every TU of COMPDB; the replay with the record reads that index
time_it torchtalk audit --source . --harness torchvision --replay "$report" --no-record --precise --compile-commands "$compdb" \
  --report "$out/$name-precise-static.json" > "$out/$name-precise-static.log" 2>&1
time_it torchtalk audit --source . --harness torchvision --replay "$report" \
  --report "$out/$name-precise-record.json" > "$out/$name-precise-record.log" 2>&1
time_it torchtalk audit --source . --harness torchvision --replay "$report" --no-record --no-precise \
  --report "$out/$name-fast-static.json" > "$out/$name-fast-static.log" 2>&1
time_it torchtalk audit --source . --harness torchvision --replay "$report" --no-precise \
  --report "$out/$name-fast-record.json" > "$out/$name-fast-record.log" 2>&1
