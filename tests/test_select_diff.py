"""Reading the change: the base, the four kinds of change, both sides of every hunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.diff import Hunk, read_diff, resolve_base
from indexer.errors import UsageError
from indexer.select.source_text import cpp_tokens, hunk_changes_code, python_tokens
from tests.helpers import commit_all, git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.cpp").write_text("int f() {\n  return 1;\n}\n\nint g() {\n  return 2;\n}\n")
    (root / "b.py").write_text("def h():\n    return 3\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "moved.txt").write_text("".join(f"line {i}\n" for i in range(20)))
    commit_all(root, "base")
    return root


def test_default_base_is_main_then_master_and_origin_head_first(repo: Path) -> None:
    assert resolve_base(repo).rev == "main"
    git(repo, "branch", "-m", "main", "master")
    assert resolve_base(repo).rev == "master"
    git(repo, "update-ref", "refs/remotes/origin/trunk", "HEAD")
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/trunk")
    base = resolve_base(repo)
    assert (base.rev, base.chosen_by) == ("origin/HEAD", "default branch")


def test_merge_base_excludes_changes_on_the_base_branch(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "b.py").write_text("def h():\n    return 4\n")
    commit_all(repo, "feature work")
    git(repo, "checkout", "-q", "main")
    (repo / "a.cpp").write_text("int f() {\n  return 9;\n}\n")
    commit_all(repo, "main moved on")
    git(repo, "checkout", "-q", "feature")
    diff = read_diff(repo)
    assert [change.path for change in diff.files] == ["b.py"]  # not main's own a.cpp edit
    assert diff.base.merge_base != diff.base.commit


def test_committed_staged_unstaged_untracked_deleted_renamed(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "b.py").write_text("def h():\n    return 30\n")
    commit_all(repo, "committed")
    (repo / "a.cpp").write_text("int f() {\n  return 10;\n}\n\nint g() {\n  return 2;\n}\n")
    git(repo, "add", "a.cpp")  # staged
    (repo / "a.cpp").write_text("int f() {\n  return 10;\n}\n\nint g() {\n  return 20;\n}\n")
    (repo / "new file.py").write_text("x = 1\n")  # untracked, with a space
    (repo / "gone.txt").unlink()
    git(repo, "mv", "moved.txt", "renamed.txt")
    diff = read_diff(repo)
    by_path = {change.path: change for change in diff.files}
    assert set(by_path) == {"a.cpp", "b.py", "new file.py", "gone.txt", "renamed.txt"}
    assert by_path["a.cpp"].hunks == [Hunk(2, 1, 2, 1), Hunk(6, 1, 6, 1)]
    assert by_path["new file.py"].status == "untracked"
    assert by_path["new file.py"].hunks == [Hunk(0, 0, 1, 1)]
    gone = by_path["gone.txt"]
    assert (gone.status, gone.old_path, gone.hunks) == ("deleted", "gone.txt", [Hunk(1, 1, 0, 0)])
    assert diff.old_side(gone) == b"bye\n" and diff.new_side(gone) is None
    renamed = by_path["renamed.txt"]
    assert (renamed.status, renamed.old_path) == ("renamed", "moved.txt")
    assert diff.old_side(renamed) == (repo / "renamed.txt").read_bytes()


def test_explicit_base_and_errors(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "b.py").write_text("def h():\n    return 5\n")
    second = commit_all(repo, "second")
    assert resolve_base(repo, first).merge_base == first
    assert [c.path for c in read_diff(repo, first).files] == ["b.py"]
    assert read_diff(repo, second).files == []
    with pytest.raises(UsageError, match="unknown base revision 'nope'"):
        resolve_base(repo, "nope")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UsageError, match="not inside a git repository"):
        resolve_base(plain)
    git(repo, "branch", "-m", "main", "work")
    with pytest.raises(UsageError, match="none of origin/HEAD, main, master"):
        resolve_base(repo)


def _changes_code(kind: str, old: str, new: str) -> bool:
    """Whether a single-hunk edit of ``old`` into ``new`` changes code, as git hunks it."""
    import difflib

    tokens = cpp_tokens if kind == "cpp" else python_tokens
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    codes = difflib.SequenceMatcher(None, a, b).get_opcodes()
    hunks = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal":
            continue
        hunks.append(Hunk(i1 + 1 if i2 > i1 else i1, i2 - i1, j1 + 1 if j2 > j1 else j1, j2 - j1))
    old_t, new_t = tokens(old.encode()), tokens(new.encode())
    return any(hunk_changes_code(old_t, new_t, hunk) for hunk in hunks)


CPP = "int f(int a) {\n  return a + 1;\n}\n"


@pytest.mark.parametrize(
    ("new", "changes"),
    [
        ("int f(int a) {\n  // add one\n  return a + 1;  /* why */\n}\n", False),
        ("int f(int a)\n{\n    return a+1;\n}\n", False),  # layout only
        ("int f(int a) {\n  return a + 2;\n}\n", True),
        ("int f(int a) {\n  /*\n  return a + 1;\n  */\n}\n", True),  # code commented out
        ('int f(int a) {\n  return a + 1;\n}\n#define X "a // b"\n', True),
    ],
)
def test_cpp_comment_and_whitespace_hunks(new: str, changes: bool) -> None:
    assert _changes_code("cpp", CPP, new) is changes


PY = "def f(a):\n    return a + 1\n"


@pytest.mark.parametrize(
    ("new", "changes"),
    [
        ("def f(a):\n    # add one\n    return a + 1  # why\n", False),
        ("def f(a):\n  return a+1\n", False),  # consistent re-indentation, spacing
        ("def f(a):\n    '''Add one.'''\n    return a + 1\n", True),  # a docstring is code
        ("def f(a):\n    return a + 2\n", True),
        ("def f(a):\n    pass\nreturn_value = a + 1\n", True),  # dedented out of the body
    ],
)
def test_python_comment_and_whitespace_hunks(new: str, changes: bool) -> None:
    assert _changes_code("py", PY, new) is changes
