"""Who depends on a module's import work: what its body ran while it was imported.

A module body runs once per process, in whichever test or collection imports the module
first, and it runs the same way for every importer (PyTorch's
``torch/_dynamo/variables/torch_function.py`` calls every binary operator on dummy
tensors at import, so every test file that imports torch._dynamo "runs" aten::matmul).
A change to what a body runs can then matter in two ways: it breaks the import, which
any one importer shows, or it changes what the body left behind, which matters to the
code that reads it. So, for each module whose import work ran a changed op or function,
the record selects:

- every test of that module, when the module is a test file (its tests read what its
  body made: parametrizations, module-level tensors);
- every test that entered a function of the module (it uses the module's state);
- else one importer standing for all: a test already selected that imports the module,
  or else the quickest recorded test that does.

What this does not see: a value the body computed that is read by name only from other
modules (``from m import TABLE`` used outside ``m``). docs/selection.md says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from indexer.query.recorded import RecordedRuns
from indexer.select.model import IMPORTED, USES, WITNESS


@dataclass(frozen=True)
class ImportUse:
    """One test selected because a module's import work ran a changed name."""

    module: str  # the module's path
    test: int  # index into the record's tests
    role: str  # IMPORTED, USES or WITNESS (indexer.select.model)
    name: int  # the id of a changed name the import work ran
    entered: str = ""  # for USES: the function of the module the test entered


def import_uses(
    runs: RecordedRuns,
    work: dict[str, set[int]],
    trusted: set[int],
    selected: set[int],
) -> list[ImportUse]:
    """The tests to select for ``work`` (module path -> ids of changed names its import
    ran), among the ``trusted`` test indexes; ``selected`` (test indexes already chosen,
    by any change) is where an importer to stand for all is looked for first, and grows
    with what this chooses."""
    test_files = runs.test_files()
    uses: list[ImportUse] = []
    for module, hits in sorted(work.items()):
        name = min(hits)
        if module in test_files:
            chosen = [ImportUse(module, i, IMPORTED, name)
                      for i in sorted(runs.tests_of_file(module)) if i in trusted]  # fmt: skip
        else:
            chosen = _users(runs, module, trusted, name)
            if not chosen:
                chosen = _witness(runs, module, trusted, selected, name)
        uses.extend(chosen)
        selected.update(use.test for use in chosen)
    return uses


def _users(runs: RecordedRuns, module: str, trusted: set[int], name: int) -> list[ImportUse]:
    functions = runs.functions_of(module)
    if not functions:
        return []
    out = []
    for index, entered in sorted(runs.tests_executing(functions).items()):
        if index in trusted:
            function = runs.record.names[min(entered)][1]
            out.append(ImportUse(module, index, USES, name, function))
    return out


def _witness(
    runs: RecordedRuns, module: str, trusted: set[int], selected: set[int], name: int
) -> list[ImportUse]:
    importers = runs.importers([module]) & trusted
    if not importers or importers & selected:
        # None recorded whole (the static walk decides those), or one already runs.
        return []
    tests = runs.record.tests
    quickest = min(importers, key=lambda i: (tests[i].duration, tests[i].nodeid))
    return [ImportUse(module, quickest, WITNESS, name)]
