"""A compile database from the log of a setuptools build that did not use ninja.

    python bench/compdb_from_build_log.py LOG ROOT --write PATH

A torch extension built without ninja (pytorch_spline_conv's ``setup.py``) leaves no
``build.ninja`` for ``ninja -t compdb``; its build log has each compile command, one line
each (``g++ ... -c csrc/basis.cpp -o build/....o ...``), run in the tree's root. This
writes those commands as ``compile_commands.json`` entries (directory ROOT), for
``--compile-commands PATH``. Prints the number of commands.

A build through ninja (pytorch_sparse: torch's ``BuildExtension`` writes one ``build.ninja``
per extension into the same directory, so ``ninja -t compdb`` there names the last one's
TUs only) logs its commands too, as ``[1/2] ccache c++ ... -c -c /abs/csrc/x.cpp -o ...``:
the progress prefix is dropped, a compiler launcher (``ccache``) is kept in the arguments
(the precise step skips it), and the source is the first word after a ``-c`` that is not
itself an option.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

COMPILERS = ("g++", "c++", "gcc", "cc", "clang++", "clang", "x86_64-linux-gnu-g++")
LAUNCHERS = ("ccache", "sccache")
NINJA_PROGRESS = re.compile(r"\[\d+/\d+\] ")


def _compiler_words(line: str) -> list[str]:
    """The words of a compile line (its ninja progress prefix dropped), or [] if it is not one."""
    line = NINJA_PROGRESS.sub("", line, count=1) if NINJA_PROGRESS.match(line) else line
    first = line.split(" ", 2)
    compiler = first[1] if first[0] in LAUNCHERS and len(first) > 1 else first[0]
    return shlex.split(line) if compiler in COMPILERS else []


def _source(words: list[str]) -> str | None:
    for at, word in enumerate(words[:-1]):
        if word == "-c" and not words[at + 1].startswith("-"):
            return words[at + 1]
    return None


def compile_commands(log: str, root: Path) -> list[dict]:
    """The compile commands of a build log, as compile database entries."""
    entries = []
    for line in log.splitlines():
        words = _compiler_words(line)
        source = _source(words) if "-c" in words else None
        if source is None:
            continue
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
