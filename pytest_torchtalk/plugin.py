"""The pytest entry point (``pytest11: torchtalk``): options, and the features behind them.

This module only declares options; each feature is its own plugin object registered in
``pytest_configure`` when its option is on, keeping its state in ``config.stash``.
"""

from __future__ import annotations

import pytest

GROUP = "torchtalk"
SELECTION_KEY = pytest.StashKey[object]()  # the AffectedSelection plugin, when selection is on


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
    parser.addini("torchtalk_affected", "turn test selection on", type="bool", default=False)
    parser.addini("torchtalk_base", "base revision for the diff", default="")
    parser.addini("torchtalk_report", "path of the JSON selection report", default="")
    parser.addini("torchtalk_source", "indexed source tree", default="")
    parser.addini("torchtalk_harness", "harness manifest name", default="")


SELECTION_PLUGIN = "torchtalk-affected"


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--no-torchtalk"):
        return
    if not (config.getoption("--torchtalk-affected") or config.getini("torchtalk_affected")):
        return
    from pytest_torchtalk.selection import AffectedSelection

    plugin = AffectedSelection(config)
    config.stash[SELECTION_KEY] = plugin
    config.pluginmanager.register(plugin, SELECTION_PLUGIN)
