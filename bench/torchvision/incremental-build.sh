#!/usr/bin/env bash
# The incremental build of a torchvision tree, as the audit's --build, run at its root:
# nothing when no C/C++ file changed since the last build; else `build_ext --inplace
# --force`: --force because setuptools skips an extension whose listed sources are older
# than its .so (headers are not listed), and torch's ninja build recompiles only the
# translation units whose sources or headers changed (its depfiles), then links.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/build-env.sh"
stamp=build/.bench-built
newer() { find torchvision/csrc -newer "$stamp" \( "$@" \) -print | head -1; }
if [ -e "$stamp" ] && [ -z "$(newer -name '*.h' -o -name '*.cpp' -o -name '*.c' -o -name '*.cuh' -o -name '*.cu')" ]; then
  exit 0
fi
python setup.py -q build_ext --inplace --force > build/.bench-build.log 2>&1 || { tail -40 build/.bench-build.log >&2; exit 1; }
touch "$stamp"
