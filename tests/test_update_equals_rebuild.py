"""`index update` must leave exactly the graph a full rebuild of the same tree gives.

A sequence of changes of every kind is applied to the minitorch fixture, committed or not;
after each, the updated index is compared, row by row on stable identities (never row
ids), with a fresh build of a copy of the tree: files, nodes, refs, edges and evidence,
and the rows the C++ symbol table is built from.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.build import build_index
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import commit_all, git


def graph_of(db: Path) -> dict[str, Counter]:
    """The whole graph as multisets of rows keyed by stable identities."""
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        paths = dict(conn.execute("SELECT id, path FROM files"))
        ident: dict[int, tuple] = {}
        rows = conn.execute(
            "SELECT id, file_id, kind, name, qualname, line, end_line, parent_id, attrs FROM nodes"
        ).fetchall()
        for node_id, file_id, kind, name, qualname, line, end_line, _, _ in rows:
            ident[node_id] = (kind, qualname, name, paths[file_id], line, end_line)
        nodes = Counter((*ident[row[0]], ident.get(row[7]), row[8]) for row in rows)
        refs = Counter(
            (
                paths[file_id],
                ident[src],
                kind,
                scheme,
                target,
                key,
                ident.get(target_id),
                line,
                attrs,
            )
            for file_id, src, kind, scheme, target, key, target_id, line, attrs in conn.execute(
                "SELECT file_id, src_id, kind, scheme, target, target_key, target_id, line, attrs"
                " FROM refs"
            )
        )
        ref_ident = {
            ref_id: (paths[file_id], ident[src], kind, target, line, attrs)
            for ref_id, file_id, src, kind, target, line, attrs in conn.execute(
                "SELECT id, file_id, src_id, kind, target, line, attrs FROM refs"
            )
        }
        edges = Counter(
            (kind, ident[src], ident[dst], paths[file_id], line, attrs, ref_ident.get(ref_id))
            for kind, src, dst, file_id, line, attrs, ref_id in conn.execute(
                "SELECT kind, src_id, dst_id, file_id, line, attrs, ref_id FROM edges"
            )
        )
        files = Counter(
            conn.execute("SELECT path, language, sha, size, parse_errors, error FROM files")
        )
        # What the C++ lookups are built from, kept per file by an update: a row left of an
        # evicted node (ident None) or missing for a new one differs from the build's.
        cpp_symbols = Counter(
            (ident.get(node_id), paths.get(file_id), *rest)
            for node_id, file_id, *rest in conn.execute("SELECT * FROM cpp_symbols")
        )
        meta = dict(conn.execute("SELECT key, value FROM meta"))
    finally:
        conn.close()
    summary = Counter(
        {key: meta.get(key) for key in ("counts", "link_stats", "files_fingerprint", "files")}
    )
    return {
        "files": files,
        "nodes": nodes,
        "refs": refs,
        "edges": edges,
        "cpp_symbols": cpp_symbols,
        "meta": summary,
    }


def assert_same_graph(updated: Path, rebuilt: Path, step: str) -> None:
    got, want = graph_of(updated), graph_of(rebuilt)
    problems = []
    for section in ("files", "nodes", "refs", "edges", "cpp_symbols"):
        extra = got[section] - want[section]
        missing = want[section] - got[section]
        for label, rows in (("only after update", extra), ("only in rebuild", missing)):
            for row in list(rows)[:8]:
                problems.append(f"{section} {label}: {row}")
    for key in ("counts", "link_stats", "files_fingerprint", "files"):
        if got["meta"][key] != want["meta"][key]:
            problems.append(f"meta {key}: update {got['meta'][key]} != rebuild {want['meta'][key]}")
    assert not problems, f"after step {step!r}:\n" + "\n".join(problems)


def rebuild_copy(repo: Path, dest: Path) -> Path:
    shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(".git"))
    return build_index(Workspace.resolve(dest), jobs=1, show_progress=False).db_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


NATIVE = "aten/src/ATen/native"


def _cpp_edit(repo: Path) -> None:
    ops = repo / NATIVE / "BinaryOps.cpp"
    edit(ops, "void check_add_alpha(", "void check_add_alpha_v2(")
    edit(ops, "  check_add_alpha(*this, alpha);", "  check_add_alpha_v2(*this, alpha);")
    edit(
        ops,
        "TORCH_IMPL_FUNC(mul_out)",
        "Tensor add_twice(const Tensor& self) {\n  return at::native::mm_cpu(self, self);\n}\n\n"
        # Names the op the YAML edit adds, in ATen's SymInt spelling: that edit must
        # re-link this call (indexer/cpp/aten_api.py, api_spellings).
        "Tensor relu_twice(const Tensor& self) {\n  return at::extra_relu_symint(self);\n}\n\n"
        "TORCH_IMPL_FUNC(mul_out)",
    )


def _add_file(repo: Path) -> None:
    # A second scale_ makes Activation.cpp's unqualified call ambiguous: an unchanged file's
    # edge must change.
    (repo / NATIVE / "Extra.cpp").write_text(
        '#include "BinaryOps.h"\n#include <ATen/native/CPUBlas.h>\n\n'
        "namespace at::native {\n\n"
        "void scale_(int64_t n, double alpha, double* x) {\n  alpha_check(x, alpha);\n}\n\n"
        "Tensor extra_relu(const Tensor& self) {\n  return relu_quantized_cpu(self);\n}\n\n"
        "Tensor use_derived(const Tensor& self) {\n  Derived d;\n  return d.run(self);\n}\n\n"
        "} // namespace at::native\n",
        encoding="utf-8",
    )
    # A class hierarchy over two headers that Extra.cpp does not include: a member call
    # resolved through a base class defined in another file than the derived class.
    (repo / NATIVE / "Helpers.h").write_text(
        "#pragma once\nnamespace at::native {\n"
        "struct BaseA {\n  Tensor run(const Tensor& x) const { return x; }\n};\n"
        "struct BaseB {\n  Tensor run(const Tensor& x) const { return x; }\n};\n"
        "} // namespace at::native\n",
        encoding="utf-8",
    )
    (repo / NATIVE / "Derived.h").write_text(
        '#pragma once\n#include "Helpers.h"\nnamespace at::native {\n'
        "struct Derived : public BaseA {};\n} // namespace at::native\n",
        encoding="utf-8",
    )


def _delete_file(repo: Path) -> None:
    (repo / NATIVE / "CPUBlas.cpp").unlink()


def _rename_file(repo: Path) -> None:
    git(repo, "mv", f"{NATIVE}/ReduceOps.cpp", f"{NATIVE}/Reductions.cpp")


def _header_edit(repo: Path) -> None:
    header = repo / NATIVE / "BinaryOps.h"
    edit(header, "inline void alpha_check(", "inline void alpha_check_strict(")
    edit(
        header,
        "using binary_fn",
        "inline void alpha_check(const ScalarType dtype, const Scalar& alpha) {\n"
        "  alpha_check_strict(dtype, alpha);\n}\n\nusing binary_fn",
    )
    cuh = repo / NATIVE / "cuda" / "Relu.cuh"
    edit(cuh, "relu_threshold(", "relu_threshold_v2(")


def _bases_edit(repo: Path) -> None:
    edit(
        repo / NATIVE / "Derived.h",
        "struct Derived : public BaseA",
        "struct Derived : public BaseB",
    )


def _yaml_edit(repo: Path) -> None:
    yaml = repo / NATIVE / "native_functions.yaml"
    edit(yaml, "    CPU: mm_cpu\n", "    CPU: mm_cpu_v2\n")
    text = yaml.read_text(encoding="utf-8")
    yaml.write_text(
        text + "\n- func: extra_relu(Tensor self) -> Tensor\n  dispatch:\n    CPU: extra_relu\n",
        encoding="utf-8",
    )
    derivatives = repo / "tools" / "autograd" / "derivatives.yaml"
    if derivatives.is_file():
        derivatives.write_text(
            derivatives.read_text(encoding="utf-8")
            + "\n- name: extra_relu(Tensor self) -> Tensor\n  self: grad\n",
            encoding="utf-8",
        )


def _python_edit(repo: Path) -> None:
    functional = repo / "minitorch" / "functional.py"
    edit(functional, "def addmm(", "def addmm_v2(")
    functional.write_text(
        functional.read_text(encoding="utf-8")
        + "\n\ndef addmm(input, mat1, mat2):\n    return addmm_v2(input, mat1, mat2)\n",
        encoding="utf-8",
    )
    init = repo / "minitorch" / "__init__.py"
    edit(init, "from .functional import add, addmm,", "from .functional import add, addmm_v2,")


def _test_edit(repo: Path) -> None:
    tests = repo / "test" / "test_tensor.py"
    tests.write_text(
        tests.read_text(encoding="utf-8")
        + "\n\ndef test_addmm_v2():\n    assert minitorch.addmm_v2 is not None\n",
        encoding="utf-8",
    )
    (repo / "test" / "test_unrelated.py").unlink()


STEPS: list[tuple[str, Callable[[Path], None], bool]] = [
    # (name, change, commit it?)
    ("C++ edit", _cpp_edit, True),
    ("add a file (untracked)", _add_file, False),
    ("delete a file", _delete_file, True),
    ("rename a file (staged)", _rename_file, False),
    ("header edit", _header_edit, True),
    ("base class edit", _bases_edit, False),
    ("YAML edit", _yaml_edit, False),
    ("Python edit", _python_edit, True),
    ("test edit", _test_edit, False),
]


def test_builds_are_reproducible(minitorch_repo: Path, tmp_path: Path) -> None:
    """The premise of the comparison below: two builds of one tree agree row for row (an
    extractor whose output depends on anything but the file breaks this, not the update)."""
    first = build_index(Workspace.resolve(minitorch_repo), show_progress=False).db_path
    assert_same_graph(first, rebuild_copy(minitorch_repo, tmp_path / "again"), "two builds")


def test_update_equals_rebuild_over_every_kind_of_change(
    minitorch_repo: Path, tmp_path: Path
) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)
    for number, (name, change, commit) in enumerate(STEPS):
        change(minitorch_repo)
        if commit:
            commit_all(minitorch_repo, name)
        result = update_index(workspace, jobs=1, show_progress=False)
        assert not result.full_build and not result.up_to_date, name
        assert result.reextracted + len(result.removed) > 0, name
        assert_same_graph(
            workspace.db_path, rebuild_copy(minitorch_repo, tmp_path / f"r{number}"), name
        )
    meta = dict(sqlite3.connect(workspace.db_path).execute("SELECT key, value FROM meta"))
    assert meta["git_commit"] == git(minitorch_repo, "rev-parse", "HEAD").strip()
    assert json.loads(meta["updated_from"])["base"] == "index"


def test_update_of_an_index_without_cpp_symbol_rows_derives_them(
    minitorch_repo: Path, tmp_path: Path
) -> None:
    """An index written before the rows were kept gets them from its first update."""
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)
    conn = sqlite3.connect(workspace.db_path)
    conn.execute("DROP TABLE cpp_symbols")
    conn.commit()
    conn.close()
    _cpp_edit(minitorch_repo)
    result = update_index(workspace, jobs=1, show_progress=False)
    assert not result.full_build and not result.up_to_date
    assert_same_graph(workspace.db_path, rebuild_copy(minitorch_repo, tmp_path / "r"), "old index")


def test_header_change_reextracts_its_includers(minitorch_repo: Path) -> None:
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, show_progress=False)
    includes = (
        sqlite3.connect(workspace.db_path)
        .execute("SELECT COUNT(*) FROM edges WHERE kind = 'includes'")
        .fetchone()[0]
    )
    if not includes:
        pytest.skip("no C++ extractor with includes edges is registered yet")
    _header_edit(minitorch_repo)
    result = update_index(workspace, show_progress=False)
    assert f"{NATIVE}/BinaryOps.cpp" in result.dependents
    assert f"{NATIVE}/cuda/BinaryAddKernel.cu" in result.dependents
    assert f"{NATIVE}/cuda/Relu.cu" in result.dependents
    assert f"{NATIVE}/LinearAlgebra.cpp" not in result.dependents
    assert not result.warnings


def test_header_included_by_nothing_is_a_warning(
    minitorch_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_torchtalk.cli import main

    assert main(["index", "build", "--source", str(minitorch_repo), "-q"]) == 0
    for number in range(7):
        (minitorch_repo / NATIVE / f"Orphan{number}.h").write_text(
            f"#pragma once\ninline int orphan{number}() {{ return {number}; }}\n"
        )
    capsys.readouterr()
    assert main(["index", "update", "--source", str(minitorch_repo), "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    warning = [line for line in err if "included by no indexed file" in line]
    assert len(warning) == 1
    assert warning[0].startswith("warning: 7 changed header(s)")
    assert warning[0].count("Orphan") == 5 and "(and 2 more)" in warning[0]


def test_a_python_edit_that_only_moves_lines_relinks_no_scheme_whole(
    minitorch_repo: Path, tmp_path: Path
) -> None:
    # Every node of the file moves (a nested function's span with it): no identity came
    # or went, so no ref elsewhere can resolve otherwise (on PyTorch, re-linking the
    # ``py`` scheme whole is ~356,000 refs).
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)
    refs = minitorch_repo / "minitorch/_refs.py"
    text = refs.read_text()
    refs.write_text(text.replace("import minitorch._ops\n", "# moved\nimport minitorch._ops\n", 1))
    nested = sqlite3.connect(workspace.db_path).execute(
        "SELECT attrs FROM nodes WHERE qualname = 'minitorch._refs.register_decomposition'"
    )
    assert '"nested"' in nested.fetchone()[0]
    result = update_index(workspace, jobs=1, show_progress=False)
    assert result.modified == ["minitorch/_refs.py"]
    assert result.full_relink_schemes == []
    assert_same_graph(workspace.db_path, rebuild_copy(minitorch_repo, tmp_path / "r"), "moved")


def test_a_docstring_edit_relinks_no_scheme_whole(minitorch_repo: Path, tmp_path: Path) -> None:
    # No resolver reads a docstring; the function's identity stays (a statement put
    # before it, as bench/sampled_changes.py's edit does, leaves the function without one).
    workspace = Workspace.resolve(minitorch_repo)
    build_index(workspace, jobs=1, show_progress=False)
    functional = minitorch_repo / "minitorch/functional.py"
    text = functional.read_text()
    old = '    """Applies the rectified linear unit element-wise."""\n'
    functional.write_text(text.replace(old, "    probe = 0\n" + old, 1))
    result = update_index(workspace, jobs=1, show_progress=False)
    assert result.modified == ["minitorch/functional.py"]
    assert result.full_relink_schemes == []
    assert_same_graph(workspace.db_path, rebuild_copy(minitorch_repo, tmp_path / "r"), "doc")
