"""The ``torchtalk`` command line. Each command group is a module with ``register(subparsers)``.

Errors the user can act on are one line, ``torchtalk: error: ...``, with exit code 2 for
bad input (flags, paths, manifests) and 1 for failures.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
from collections.abc import Sequence
from importlib import import_module

from indexer.errors import TorchTalkError

# Command modules, in the order `torchtalk --help` lists them.
COMMAND_MODULES = (
    "pytest_torchtalk.cli.demo_cmd",
    "pytest_torchtalk.cli.init_cmd",
    "pytest_torchtalk.cli.status_cmd",
    "pytest_torchtalk.cli.index_cmd",
    "pytest_torchtalk.cli.snapshot_cmd",
    "pytest_torchtalk.cli.mcp_cmd",
    "pytest_torchtalk.cli.select_cmd",
    "pytest_torchtalk.cli.record_cmd",
    "pytest_torchtalk.cli.audit_cmd",
    "pytest_torchtalk.cli.harness_cmd",
)
# Commands other programs start, with the one module that defines each: an agent starts
# `torchtalk mcp-serve` at every session, a CI job `torchtalk select` on every change, and
# neither should wait for the other commands' imports (the build pipeline, snapshots:
# ~50 ms).
DIRECT_COMMANDS = {
    "mcp-serve": "pytest_torchtalk.cli.mcp_cmd",
    "select": "pytest_torchtalk.cli.select_cmd",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        self.exit(2, f"torchtalk: error: {message}\n")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """--source/--pytorch-source and --harness, shared by every command that reads a tree."""
    parser.add_argument(
        "--source",
        "--pytorch-source",
        dest="source",
        metavar="PATH",
        help="source tree (default: the one given to 'torchtalk init', else the git "
        "repository of the current directory)",
    )
    parser.add_argument("--harness", metavar="NAME", help="harness manifest to apply")


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torchtalk",
        description="Index PyTorch-style code across Python, C++ and CUDA; select the tests "
        "a change can break; serve the index to coding agents.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for module_name in modules:
        import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # A file name that is not UTF-8 reaches output as surrogates: shown escaped, not a crash.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if argv is None and sys.argv[1:2] != ["mcp-serve"] and hasattr(signal, "SIGPIPE"):
        # A command run from a shell whose output is piped to `head` ends quietly, as git's
        # or ls's does, instead of with a BrokenPipeError traceback (Python ignores
        # SIGPIPE). Every write to the cache is a temporary file renamed into place, so
        # dying here corrupts nothing.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    argv = list(sys.argv[1:] if argv is None else argv)
    direct = DIRECT_COMMANDS.get(argv[0]) if argv else None
    parser = build_parser((direct,) if direct else COMMAND_MODULES)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except TorchTalkError as exc:
        print(f"torchtalk: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a path the file system refuses: unwritable, a file, full
        print(f"torchtalk: error: {exc}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:  # a full disk under an index update; the index is kept
        print(f"torchtalk: error: the index database failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("torchtalk: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
