"""What libclang needs besides a compile command: its compiler headers, and arguments it reads.

The ``libclang`` wheel bundles ``libclang.so`` but not clang's resource directory (the
``include/`` of ``stddef.h``, ``stdarg.h``, the intrinsics). libclang looks for it beside
the library, finds nothing, and every TU that includes a standard header stops with a
fatal "'stddef.h' file not found". So we name one with ``-resource-dir``, the first of:

1. ``TORCHTALK_CLANG_RESOURCE_DIR``;
2. ``clang -print-resource-dir`` of a clang on PATH;
3. the newest ``/usr/lib/llvm-*/lib/clang/*`` (Debian's libclang-common-N-dev);
4. GCC's own directory (``gcc -print-file-name=include``, its parent): clang places its
   ``include/`` where its own would go, after libstdc++ and before /usr/include. GCC's
   intrinsics headers use builtins clang lacks, which gives errors inside those headers
   only: they are counted apart from the tree's own errors.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

RESOURCE_ENV = "TORCHTALK_CLANG_RESOURCE_DIR"
_LAUNCHERS = frozenset({"ccache", "sccache", "distcc", "icecc"})
# Flags that only the build needs (outputs, dependency files) or that clang rejects.
_DROP_WITH_VALUE = frozenset({"-o", "-MF", "-MT", "-MQ", "--param", "-Xcompiler"})
_DROP = frozenset(
    {"-c", "-M", "-MM", "-MD", "-MMD", "-MP", "-fno-gnu-unique", "-fconcepts", "-pipe"}
)
_DROP_PREFIXES = ("-fdump-", "-fplugin", "-Werror", "-fcf-protection=", "--generate-")
CUDA_SUFFIXES = (".cu", ".cuh")


@dataclass(frozen=True)
class ResourceDir:
    path: str | None
    how: str  # where it came from, or why there is none


@cache
def find_resource_dir() -> ResourceDir:
    override = os.environ.get(RESOURCE_ENV)
    if override:
        return ResourceDir(override, f"${RESOURCE_ENV}")
    clang = shutil.which("clang")
    if clang:
        found = _ask([clang, "-print-resource-dir"])
        if found and Path(found, "include", "stddef.h").is_file():
            return ResourceDir(found, f"{clang} -print-resource-dir")
    installed = sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include/stddef.h"), key=_version_key)
    if installed:
        return ResourceDir(str(Path(installed[-1]).parent.parent), "an installed LLVM")
    for gcc in ("gcc", "cc"):
        compiler = shutil.which(gcc)
        found = _ask([compiler, "-print-file-name=include"]) if compiler else None
        if found and Path(found, "stddef.h").is_file():
            return ResourceDir(str(Path(found).parent), f"{compiler}'s headers")
    return ResourceDir(None, "no clang resource directory, clang or gcc found")


def _ask(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path))


def clang_arguments(arguments: tuple[str, ...], file: str, directory: str) -> list[str]:
    """The command's arguments as libclang takes them: no launcher, compiler, source file
    or outputs; relative paths read from the command's directory; errors unlimited."""
    args = list(arguments)
    while args and Path(args[0]).name in _LAUNCHERS:
        args.pop(0)
    args = args[1:]  # the compiler
    source = os.path.realpath(file)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _DROP_WITH_VALUE:
            skip = True
            continue
        if arg in _DROP or arg.startswith(_DROP_PREFIXES):
            continue
        if not arg.startswith("-") and os.path.realpath(os.path.join(directory, arg)) == source:
            continue
        kept.append(arg)
    resource = find_resource_dir()
    if resource.path and not any(arg.startswith("-resource-dir") for arg in kept):
        kept += ["-resource-dir", resource.path]
    # -w: warnings are not wanted; the AST is the same without them.
    return [*kept, f"-working-directory={directory}", "-ferror-limit=0", "-w"]


def is_cuda(file: str, arguments: tuple[str, ...]) -> bool:
    compiler = Path(arguments[0]).name if arguments else ""
    return file.endswith(CUDA_SUFFIXES) or compiler == "nvcc" or "cuda" in arguments[:3]
