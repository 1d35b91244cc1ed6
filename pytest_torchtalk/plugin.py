"""The pytest entry point (``pytest11: torchtalk``): options, and the features behind them.

This module only declares options; each feature is its own plugin object registered in
``pytest_configure`` when its option is on, keeping its state in ``config.stash``.
"""

from __future__ import annotations

import pytest

GROUP = "torchtalk"
SELECTION_KEY = pytest.StashKey[object]()  # the AffectedSelection plugin, when selection is on
RECORD_KEY = pytest.StashKey[object]()  # the RecordRun plugin, when recording is on


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "torchtalk: run only the tests a change can break")
    group.addoption(
        "--torchtalk-affected",
        action="store_true",
        default=None,
        help="deselect tests the git diff cannot affect (ini: torchtalk_affected)",
    )
    group.addoption(
        "--no-torchtalk",
        action="store_true",
        default=False,
        help="turn test selection off, overriding addopts and ini",
    )
    group.addoption(
        "--torchtalk-base",
        metavar="REV",
        default=None,
        help="diff against the merge-base with REV (default: origin/HEAD, main, master; "
        "ini: torchtalk_base)",
    )
    group.addoption(
        "--torchtalk-report",
        metavar="PATH",
        default=None,
        help="write the selection and its reasons as JSON (ini: torchtalk_report)",
    )
    group.addoption(
        "--torchtalk-report-tests",
        action="store_true",
        default=None,
        help="name in the report every test the record decides and selects, not only "
        "those of the files it narrows (ini: torchtalk_report_tests)",
    )
    group.addoption(
        "--torchtalk-source",
        metavar="PATH",
        default=None,
        help="indexed source tree (default: the rootdir; ini: torchtalk_source)",
    )
    group.addoption(
        "--torchtalk-harness",
        metavar="NAME",
        default=None,
        help="harness manifest (default: detected; ini: torchtalk_harness)",
    )
    # A flag that takes no value, and the path apart: an optional value would take the
    # test path that follows it (docs/recording.md#the-options).
    group.addoption(
        "--torchtalk-record",
        action="store_true",
        default=None,
        help="record the ops, Python functions and bindings each test executes, beside "
        "the index (ini: torchtalk_record = true or a path)",
    )
    group.addoption(
        "--torchtalk-record-to",
        metavar="PATH",
        default=None,
        help="record, to PATH instead (a record TorchTalk wrote, or a new file)",
    )
    group.addoption(
        "--torchtalk-record-missing",
        metavar="BASE",
        default=None,
        help="with recording: run and record only the tests the record BASE lacks "
        "(after a timeout); merge them with 'torchtalk record merge BASE NEW'",
    )
    parser.addini("torchtalk_affected", "turn test selection on", type="bool", default=False)
    parser.addini("torchtalk_base", "base revision for the diff", default="")
    parser.addini("torchtalk_report", "path of the JSON selection report", default="")
    parser.addini(
        "torchtalk_report_tests", "name every recorded test in the report", type="bool",
        default=False,
    )  # fmt: skip
    parser.addini("torchtalk_source", "indexed source tree", default="")
    parser.addini("torchtalk_harness", "harness manifest name", default="")
    parser.addini("torchtalk_record", "record each test's execution: true, or a path", default="")


SELECTION_PLUGIN = "torchtalk-affected"
RECORD_PLUGIN = "torchtalk-record"
MISSING_PLUGIN = "torchtalk-record-missing"


def workspace_of(config: pytest.Config):
    """The indexed tree and harness this run works on (--torchtalk-source, ini, rootdir)."""
    from indexer.workspace import Workspace

    # --torchtalk-source is relative to where pytest runs, the ini value to the rootdir.
    option = config.getoption("--torchtalk-source")
    if option:
        source = str(config.invocation_params.dir / option)
    else:
        source = str(config.rootpath / (config.getini("torchtalk_source") or "."))
    harness = config.getoption("--torchtalk-harness") or config.getini("torchtalk_harness")
    return Workspace.resolve(source, harness or None)


def _configure_recording(config: pytest.Config) -> None:
    from indexer.errors import TorchTalkError
    from pytest_torchtalk.recording import (
        RecordRun,
        default_record_path,
        record_path_option,
        refuse_record_path,
        tree_state,
    )

    wanted = record_path_option(config)
    if wanted is None and config.getoption("--torchtalk-record-missing"):
        raise pytest.UsageError(
            "torchtalk: --torchtalk-record-missing needs --torchtalk-record or "
            "--torchtalk-record-to=PATH (the run records what BASE lacks)"
        )
    if wanted is None or config.getoption("collectonly"):
        return
    try:
        workspace = workspace_of(config)
    except TorchTalkError as exc:
        raise pytest.UsageError(f"torchtalk: {exc}") from None
    path = config.invocation_params.dir / wanted if wanted else default_record_path(workspace)
    base = config.getoption("--torchtalk-record-missing")
    tree = None
    if base:
        from pytest_torchtalk.record_missing import load_missing

        try:
            tree = tree_state(config, workspace.source)
            missing = load_missing(config.invocation_params.dir / base, path, tree)
        except TorchTalkError as exc:
            raise pytest.UsageError(f"torchtalk: {exc}") from None
        config.pluginmanager.register(missing, MISSING_PLUGIN)
    if not hasattr(config, "workerinput"):  # an xdist worker records where it is told
        problem = refuse_record_path(path)
        if problem:
            raise pytest.UsageError(f"torchtalk: {problem}")
    plugin = RecordRun(config, workspace, path, tree)
    config.stash[RECORD_KEY] = plugin
    config.pluginmanager.register(plugin, RECORD_PLUGIN)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--no-torchtalk"):
        return
    _configure_recording(config)
    if not (config.getoption("--torchtalk-affected") or config.getini("torchtalk_affected")):
        return
    from pytest_torchtalk.selection import AffectedSelection

    plugin = AffectedSelection(config)
    config.stash[SELECTION_KEY] = plugin
    config.pluginmanager.register(plugin, SELECTION_PLUGIN)
