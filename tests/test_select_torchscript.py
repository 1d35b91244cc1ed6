"""``@torch.jit.script`` compiles the body it decorates when its module is imported, so a
change to that body can fail the import of every module importing it (pytorch_sparse's
audit: a removed assignment in ``SparseStorage.clone``, a method of a scripted class,
failed the collection of all 20 test files). Such a change is the module's import-time
code as well as the function's; a plain function's body is not."""

from __future__ import annotations

import pytest

from tests.select_support import IndexedTree, labels, selected, tree_fixtures

FILES = {
    "scriptpkg/__init__.py": 'from scriptpkg import storage\n\nVERSION = "1"\n',
    "scriptpkg/storage.py": (
        "import torch\n\n\n"
        "@torch.jit.script\n"
        "class Storage(object):\n"
        "    def __init__(self, n: int):\n"
        "        self.n = n\n\n"
        "    def twice(self) -> int:\n"
        "        doubled = self.n * 2\n"
        "        return doubled\n\n\n"
        "@torch.jit.script\n"
        "def scripted_add(a: int, b: int) -> int:\n"
        "    total = a + b\n"
        "    return total\n\n\n"
        "def plain(n: int) -> int:\n"
        "    bumped = n + 1\n"
        "    return bumped\n"
    ),
    "test/test_twice.py": (
        "from scriptpkg.storage import Storage\n\n\n"
        "def test_twice():\n"
        "    assert Storage(2).twice() == 4\n"
    ),
    "test/test_add.py": (
        "from scriptpkg.storage import scripted_add\n\n\n"
        "def test_add():\n"
        "    assert scripted_add(1, 2) == 3\n"
    ),
    "test/test_plain.py": (
        "from scriptpkg.storage import plain\n\n\ndef test_plain():\n    assert plain(1) == 2\n"
    ),
    "test/test_version.py": (
        "import scriptpkg\n\n\ndef test_version():\n    assert scriptpkg.VERSION\n"
    ),
}


shared, tree = tree_fixtures("scriptpkg-tree", FILES)


EVERY_IMPORTER = {
    "test/test_twice.py",
    "test/test_add.py",
    "test/test_plain.py",
    "test/test_version.py",
}


@pytest.mark.parametrize(
    "old, new, compiled",
    [
        (  # a method of a scripted class
            "        doubled = self.n * 2\n",
            "        doubled = self.n * 3\n",
            "scriptpkg.storage.Storage",
        ),
        (  # a scripted function
            "    total = a + b\n",
            "    total = a - b\n",
            "scriptpkg.storage.scripted_add",
        ),
        (  # a statement removed (replaced) in a scripted body, as the audit's mutation
            "        doubled = self.n * 2\n",
            "        pass\n",
            "scriptpkg.storage.Storage",
        ),
    ],
)
def test_a_scripted_body_change_reaches_the_modules_importers(
    tree: IndexedTree, old: str, new: str, compiled: str
) -> None:
    tree.replace("scriptpkg/storage.py", old, new)
    selection = tree.select("HEAD")
    assert selection.everything == []
    assert selected(selection) == EVERY_IMPORTER
    module = [e for e in selection.entities if e.label == "scriptpkg.storage"]
    assert module, labels(selection)
    assert f"is in {compiled}, which @torch.jit.script compiles" in module[0].reason
    assert module[0].evidence.startswith("scriptpkg/storage.py:")


def test_a_plain_body_change_is_not_import_time_code(tree: IndexedTree) -> None:
    tree.replace("scriptpkg/storage.py", "    bumped = n + 1\n", "    bumped = n + 2\n")
    selection = tree.select("HEAD")
    assert selected(selection) == {"test/test_plain.py"}
    assert "scriptpkg.storage" not in labels(selection)


def test_a_deleted_line_in_a_scripted_body_reaches_the_importers(tree: IndexedTree) -> None:
    """Valid Python still (``doubled`` is then unbound), but no longer TorchScript."""
    tree.replace("scriptpkg/storage.py", "        doubled = self.n * 2\n", "")
    selection = tree.select("HEAD")
    assert selected(selection) == EVERY_IMPORTER
    assert "scriptpkg.storage" in labels(selection)
