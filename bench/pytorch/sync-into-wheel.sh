#!/usr/bin/env bash
# The audit's --build for PyTorch's Python run against a wheel of the same version:
# copy each torch/**.py the working tree changes (and those the last call copied, since
# restored) over the wheel's, dropping their bytecode, so that a rewrite of the same size
# within the same second is not served from a stale .pyc. A file the wheel does not
# ship fails the build: nothing would test it. Run at the root of the PyTorch tree.
# Env: SITE (the venv's site-packages), STATE (a file this script keeps between calls).
set -euo pipefail
site=${SITE:?the site-packages of the venv holding the wheel}
state=${STATE:?a file remembering what the last call copied}
touch "$state"
changed=$(git diff --name-only HEAD -- 'torch/*.py')
for f in $(cat "$state") $changed; do
  [ -e "$site/$f" ] || { echo "the wheel has no $f" >&2; exit 1; }
  cp "$f" "$site/$f"
  rm -f "$site/$(dirname "$f")/__pycache__/$(basename "$f" .py)".*.pyc
done
printf '%s\n' $changed > "$state"
