"""Harness manifests: loading, extends/depends_on, selection order, and every error case."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.errors import ManifestError
from indexer.harness import builtin_harnesses, load_harness, load_manifest_file, select_manifest
from pytest_torchtalk.cli import main


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_harnesses_load_and_validate() -> None:
    assert {"pytorch", "torch-extension"} <= set(builtin_harnesses())
    pytorch = load_harness("pytorch")
    assert pytorch.list("tests", "dirs") == ["test"]
    assert pytorch.expected_minimums["cpp_function"] >= 60000


def test_extends_merges_tables_and_child_wins(tmp_path: Path) -> None:
    manifest = load_manifest_file(
        write(
            tmp_path / ".torchtalk.toml",
            (
                '[harness]\nextends = "pytorch"\n'
                '[python]\npackages = ["minitorch"]\n'
                '[selection]\nnever_affects = ["notes/"]\n'
            ),
        )
    )
    assert manifest.name == "pytorch"
    assert manifest.python_packages == ["minitorch"]
    assert manifest.list("selection", "never_affects") == ["notes/"]
    # Untouched keys of the same table come from the parent.
    assert "CMakeLists.txt" in manifest.list("selection", "run_everything")
    assert manifest.origins[-1].endswith(".torchtalk.toml")


def test_depends_on_is_kept(tmp_path: Path) -> None:
    manifest = load_manifest_file(
        write(
            tmp_path / "m.toml",
            ('[harness]\nextends = "torch-extension"\ndepends_on = ["pytorch"]\n'),
        )
    )
    assert manifest.depends_on == ("pytorch",)


def test_selection_order(tmp_path: Path) -> None:
    (tmp_path / "aten/src/ATen/native").mkdir(parents=True)
    (tmp_path / "aten/src/ATen/native/native_functions.yaml").write_text("[]\n")
    assert select_manifest(tmp_path)[1] == "detected"
    assert select_manifest(tmp_path)[0].name == "pytorch"
    assert select_manifest(tmp_path, configured="torch-extension")[0].name == "torch-extension"
    write(tmp_path / ".torchtalk.toml", '[harness]\nextends = "torch-extension"\n')
    manifest, how = select_manifest(tmp_path, configured="pytorch")
    assert (manifest.name, how) == ("torch-extension", ".torchtalk.toml")
    manifest, how = select_manifest(tmp_path, explicit="pytorch")
    assert (manifest.name, how) == ("pytorch", "--harness")
    assert select_manifest(tmp_path / "nowhere")[0].name == "torch-extension"


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('[harness\nname = "x"\n', None, "invalid TOML"),
        ('[harness]\nnmae = "x"\n', "[harness].nmae", "unknown key"),
        ('[sauces]\ncpp = ["a"]\n', "[sauces]", "unknown section"),
        ('[sources]\ncpp = "aten"\n', "[sources].cpp", "must be list[str]"),
        ('[sources]\nmax_file_bytes = "big"\n', "[sources].max_file_bytes", "must be"),
        ('[expected_minimums]\nop = "many"\n', "[expected_minimums].op", "must be an integer"),
        ('[harness]\nextends = "no-such-harness"\n', "[harness].extends", "unknown harness"),
        ('[harness]\ndepends_on = ["no-such"]\n', "[harness].depends_on", "unknown harness"),
        ("[bindings.namespace_aliases]\nX = 3\n", "[bindings].namespace_aliases", "must be"),
    ],
)
def test_malformed_manifest_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, key: str | None, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "tree"
    source.mkdir()
    manifest_path = write(source / ".torchtalk.toml", text)
    with pytest.raises(ManifestError) as info:
        load_manifest_file(manifest_path)
    assert info.value.key == key
    assert problem in info.value.problem
    # The CLI says it on one line with exit code 2.
    assert main(["index", "build", "--source", str(source), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"torchtalk: error: {manifest_path}")
    assert problem in err
    if key:
        assert key in err


def test_extends_cycle_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write(manifests / "a.toml", '[harness]\nextends = "b"\n')
    write(manifests / "b.toml", '[harness]\nextends = "a"\n')
    monkeypatch.setattr("indexer.harness.builtin_manifest_dir", lambda: manifests)
    with pytest.raises(ManifestError) as info:
        load_harness("a")
    assert info.value.key == "[harness].extends"
    assert "extends cycle: a -> b -> a" in str(info.value)


def test_unknown_harness_name_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["index", "build", "--source", str(tmp_path), "--harness", "nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("torchtalk: error: unknown harness 'nope' (known: ")
    assert "pytorch" in err


def test_expected_minimums_are_replaced_not_merged(tmp_path: Path) -> None:
    manifest = load_manifest_file(
        write(tmp_path / "m.toml", '[harness]\nextends = "pytorch"\n[expected_minimums]\nop = 3\n')
    )
    assert manifest.expected_minimums == {"op": 3}
    inherited = load_manifest_file(write(tmp_path / "n.toml", '[harness]\nextends = "pytorch"\n'))
    assert inherited.expected_minimums["cpp_function"] >= 60000
