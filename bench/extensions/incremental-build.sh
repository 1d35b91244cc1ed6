#!/usr/bin/env bash
# The incremental build a user of a setuptools extension would run, as the audit's --build:
# nothing when no C++ changed since the last build, `build_ext --inplace` when a .cpp/.cu
# did (setuptools rebuilds an extension whose listed sources are newer than its .so),
# `--force` when a header did (setuptools does not track headers; ccache keeps the
# unchanged translation units cheap). Run at the root of the built tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/build-env.sh"
stamp=build/.bench-built
if [ ! -e "$stamp" ]; then
  python setup.py -q build_ext --inplace
  touch "$stamp"; exit 0
fi
newer() { find . -path ./build -prune -o -path ./.git -prune -o -newer "$stamp" \( "$@" \) -print | head -1; }
if [ -n "$(newer -name '*.h' -o -name '*.hpp' -o -name '*.cuh')" ]; then
  python setup.py -q build_ext --inplace --force
elif [ -n "$(newer -name '*.cpp' -o -name '*.cu' -o -name '*.cc')" ]; then
  python setup.py -q build_ext --inplace
else
  exit 0
fi
touch "$stamp"
