"""A compile database from the log of a setuptools build that did not use ninja.

    python bench/compdb_from_build_log.py LOG ROOT --write PATH

A torch extension built without ninja (pytorch_spline_conv's ``setup.py``) leaves no
``build.ninja`` for ``ninja -t compdb``; its build log has each compile command, one line
each (``g++ ... -c csrc/basis.cpp -o build/....o ...``), run in the tree's root. This
writes those commands as ``compile_commands.json`` entries (directory ROOT), for
``--compile-commands PATH``. Prints the number of commands.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

COMPILERS = ("g++", "c++", "gcc", "cc", "clang++", "clang", "x86_64-linux-gnu-g++")


def compile_commands(log: str, root: Path) -> list[dict]:
    """The compile commands of a build log, as compile database entries."""
    entries = []
    for line in log.splitlines():
        words = shlex.split(line) if line.split(" ", 1)[0] in COMPILERS else []
        if "-c" not in words:
            continue
        source = words[words.index("-c") + 1]
        entries.append({"directory": str(root), "file": source, "arguments": words})
    return entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("root", type=Path)
    parser.add_argument("--write", type=Path, required=True)
    args = parser.parse_args()
    entries = compile_commands(args.log.read_text(errors="replace"), args.root.resolve())
    args.write.write_text(json.dumps(entries, indent=1) + "\n")
    print(len(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
