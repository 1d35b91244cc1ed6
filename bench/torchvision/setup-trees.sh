#!/usr/bin/env bash
# The two torchvision 0.21 trees of docs/audit.md ("torchvision 0.21"), the commands as run
# there gathered into one script: VENV (python3.11 -m venv; pip install torch==2.6.0
# 'pytest>=8,<9' pillow scipy numpy; pip install -e THIS_REPO), then
#   TREE      a git clone of get-torchvision's tree, its ops built CPU-only in place
#             (43 translation units: 26 of torchvision._C, 17 of torchvision.image);
#   TREE-py   a second clone at the same commit whose _C.so/image.so come from the
#             torchvision 0.21.0 wheel (no build): the Python-only audit runs there
#             while TREE builds, and its suite's record serves both (same commit).
# Usage: setup-trees.sh TREE        (e.g. /work/tv; writes TREE.built when the build ends)
set -euo pipefail
tree=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VENV:-/work/venv-tv}
corpus=$("$repo/../shared/corpora/get-torchvision" --git)   # ~/.cache/torchtalk-corpora/torchvision-0.21
ignored() { printf '%s\n' build/ '*.so' '*.egg-info/' __pycache__/ .pytest_cache/ \
  torchvision/version.py compile_commands.json torchvision.libs/ >> "$1/.git/info/exclude"; }
[ -d "$tree" ] || { git clone -q "$corpus" "$tree"; ignored "$tree"; }
[ -d "$tree-py" ] || {
  git clone -q "$corpus" "$tree-py"; ignored "$tree-py"
  wheel=$(mktemp -d)
  "$venv/bin/pip" download -q --no-deps torchvision==0.21.0 -d "$wheel"
  (cd "$tree-py" && unzip -q -o "$wheel"/torchvision-*.whl 'torchvision/_C.so' 'torchvision/image.so' 'torchvision.libs/*')
  sha=$(git -C "$tree-py" rev-parse HEAD)   # what setup.py's write_version_file writes
  printf "__version__ = '0.21.0+%s'\ngit_version = '%s'\nfrom torchvision.extension import _check_cuda_version\nif _check_cuda_version() > 0:\n    cuda = _check_cuda_version()\n" \
    "${sha:0:7}" "$sha" \
    > "$tree-py/torchvision/version.py"
}
cd "$tree"
source "$here/build-env.sh"
"$venv/bin/python" setup.py -q build_ext --inplace --force > "$tree.build.log" 2>&1
mkdir -p build && touch build/.bench-built && touch "$tree.built"
