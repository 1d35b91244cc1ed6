#!/usr/bin/env bash
# Set up one real extension for `torchtalk audit`: fetch it as a git tree, keep build
# outputs out of the audited diff, build it CPU-only against the venv's torch.
# Usage: setup-extension.sh NAME DEST   (VENV defaults to /work/venv-ext-audit)
# Everything downloaded here (ccache, sdists) is bench set-up; the audit itself is offline.
set -euo pipefail
name=$1 dest=$2
venv=${VENV:-/work/venv-ext-audit}
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$venv/bin:$PATH"
[ -d "$dest/.git" ] || /work/shared/corpora/get-extension --git "$name" "$dest"
# Build outputs and vendored headers must not be part of any mutation's diff.
exclude=$dest/.git/info/exclude
grep -qx 'third_party/parallel-hashmap/' "$exclude" ||
  printf '%s\n' build/ '*.so' '*.egg-info/' __pycache__/ .pytest_cache/ \
    third_party/parallel-hashmap/ compile_commands.json >> "$exclude"
source "$here/build-env.sh"
if [ "$name" = pytorch_sparse ]; then
  # pytorch_sparse imports torch_scatter and includes parallel-hashmap (a git submodule
  # the archive lacks): both from PyPI sdists, built with the same flags.
  work=$(dirname "$dest")
  if ! python -c 'import torch_scatter' 2>/dev/null; then
    pip download -q --no-deps --no-build-isolation --no-binary :all: -d "$work/sdists" torch-scatter==2.1.2
    tar -xzf "$work/sdists"/torch_scatter-2.1.2.tar.gz -C "$work"
    pip install --no-build-isolation --no-deps -e "$work/torch_scatter-2.1.2"
  fi
  if [ ! -e "$dest/third_party/parallel-hashmap/parallel_hashmap/phmap.h" ]; then
    pip download -q --no-deps --no-build-isolation --no-binary :all: -d "$work/sdists" torch-sparse==0.6.18
    tar -xzf "$work/sdists"/torch_sparse-0.6.18.tar.gz -C "$work/sdists"
    mkdir -p "$dest/third_party"
    rm -rf "$dest/third_party/parallel-hashmap"
    cp -r "$work/sdists/torch_sparse-0.6.18/third_party/parallel-hashmap" "$dest/third_party/"
  fi
fi
cd "$dest"
start=$(date +%s)
/usr/bin/time -f '%e s wall, %U s user, %S s sys' -o "$dest.build.time" \
  python setup.py build_ext --inplace > "$dest.build.log" 2>&1
echo "built $name in $(cat "$dest.build.time")"
touch "$dest/build/.bench-built"   # incremental-build.sh compares sources against it
date -u +%FT%TZ > "$dest.built"
