"""String-keyed registries (docs/selection.md "Registries") on the regext fixture, laid out
like vLLM: architectures mapped to ("module", "Class") pairs and loaded lazily, a
quantization method table inside a function, an examples table of model ids, a
registering decorator, and tests that load models only by those strings (in a
subprocess, as vLLM's server tests do, so no import reaches them)."""

from __future__ import annotations

import pytest

from indexer.build import build_index
from indexer.query.modules import modules
from indexer.query.trace import trace
from indexer.update import update_index
from indexer.workspace import Workspace
from tests.helpers import make_fixture_repo
from tests.select_support import IndexedTree, chain_nodes, indexed_tree, selected
from tests.test_update_equals_rebuild import assert_same_graph, edit, graph_of, rebuild_copy


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> IndexedTree:
    return indexed_tree(tmp_path_factory, "regext")


@pytest.fixture
def tree(shared: IndexedTree, monkeypatch: pytest.MonkeyPatch):
    yield shared.use(monkeypatch)
    shared.reset()


def _registers(tree: IndexedTree) -> set[tuple[str, str, str, str]]:
    """(entry name, entry kind... as source, registered qualname, evidence) of every
    ``registers`` edge, read from the index's tables."""
    index = tree.index()
    rows = index.conn.execute(
        "SELECT s.name, s.kind, d.qualname, f.path || ':' || e.line FROM edges e"
        " JOIN nodes s ON s.id = e.src_id JOIN nodes d ON d.id = e.dst_id"
        " JOIN files f ON f.id = e.file_id WHERE e.kind = 'registers'"
    ).fetchall()
    return {tuple(row) for row in rows}


def test_registry_tables_and_decorators_are_entries_with_edges(tree: IndexedTree) -> None:
    registry = "regext/models/registry.py"
    quant = "regext/quantization/__init__.py"
    examples = "tests/models/registry.py"
    llama = tree.line(registry, '"LlamaForCausalLM": ("llama"')
    fp8 = tree.line(quant, '"fp8": Fp8Config')
    alias = tree.line(examples, '"LlamaForCausalLM": _HfExamplesInfo(')
    halving = tree.line("tests/quantization/test_custom.py", '@register_quantization_config("')
    edges = _registers(tree)
    entry = "registry_entry"
    assert (
        "LlamaForCausalLM", entry, "regext.models.llama.LlamaForCausalLM", f"{registry}:{llama}"
    ) in edges  # fmt: skip
    # Fp8Config is imported inside get_quantization_config, next to the table.
    assert ("fp8", entry, "regext.quantization.fp8.Fp8Config", f"{quant}:{fp8}") in edges
    # A model id of the examples table registers the architecture's entry.
    llama_entry = "regext.models.registry._TEXT_GENERATION_MODELS[LlamaForCausalLM]"
    assert ("org/tiny-llama", entry, llama_entry, f"{examples}:{alias}") in edges
    assert ("org/tiny-llama-chat", entry, llama_entry, f"{examples}:{alias}") in edges
    assert (
        "halving", entry, "tests.quantization.test_custom.HalvingConfig",
        f"tests/quantization/test_custom.py:{halving}",
    ) in edges  # fmt: skip
    # ``--quantization=awq`` is no name; the string spelled ``"awq"`` is.
    index = tree.index()
    covered = {
        (src, dst)
        for src, dst in index.conn.execute(
            "SELECT s.qualname, d.name FROM edges e JOIN nodes s ON s.id = e.src_id"
            " JOIN nodes d ON d.id = e.dst_id WHERE e.kind = 'covers'"
            " AND d.kind = 'registry_entry'"
        )
    }
    assert ("tests/quantization/test_awq_serve.py::test_awq", "awq") in covered
    assert ("tests/entrypoints/test_serve_llama.py::test_serve", "org/tiny-llama") in covered


def test_a_model_change_selects_the_tests_that_load_its_architecture(tree: IndexedTree) -> None:
    tree.replace("regext/models/llama.py", 'config.get("layers", 2)', 'config.get("layers", 3)')
    selection = tree.select()
    assert not selection.everything
    assert selected(selection) == {
        "tests/entrypoints/test_serve_llama.py",  # by the model id tests/models/registry.py maps
        "tests/entrypoints/test_serve_by_architecture.py",  # by the architecture's name
        "tests/entrypoints/test_serve_unlisted.py",  # a model id no table maps: any model
    }
    hops = selection.files["tests/entrypoints/test_serve_llama.py"].reasons[0].chain
    registry = tree.line("regext/models/registry.py", '"LlamaForCausalLM": ("llama"')
    examples = tree.line("tests/models/registry.py", '"LlamaForCausalLM": _HfExamplesInfo(')
    assert [(h.kind, h.evidence) for h in hops if h.kind == "registers"] == [
        ("registers", f"regext/models/registry.py:{registry}"),
        ("registers", f"tests/models/registry.py:{examples}"),
    ]
    assert chain_nodes(selection, "tests/entrypoints/test_serve_llama.py")[-1] == (
        "tests/entrypoints/test_serve_llama.py::test_serve"
    )
    # The selection keeps what fails: run every test on the changed tree.
    run = tree.pytest("-q", "-p", "no:cacheprovider", "tests")
    failed = {
        line.removeprefix("FAILED ").split("::")[0]
        for line in run.stdout.splitlines()
        if line.startswith("FAILED ")
    }
    assert failed == {
        "tests/entrypoints/test_serve_llama.py",
        "tests/entrypoints/test_serve_unlisted.py",
    }, run.stdout[-2000:]
    assert failed <= selected(selection)


def test_a_model_id_no_table_maps_may_load_any_architecture(tree: IndexedTree) -> None:
    """``org/unlisted-llama`` names no entry: its checkpoint decides the architecture, so
    the test is kept for a change to any architecture the examples table gives ids to,
    and the chain says which id it was."""
    tree.replace("regext/models/opt.py", 'config.get("layers", 1)', 'config.get("layers", 2)')
    selection = tree.select()
    assert selected(selection) == {
        "tests/entrypoints/test_serve_opt.py",
        "tests/entrypoints/test_serve_unlisted.py",
        "tests/quantization/test_fp8_serve.py",
        "tests/quantization/test_awq_serve.py",
    }
    hops = selection.files["tests/entrypoints/test_serve_unlisted.py"].reasons[0].chain
    assert hops[-1].dst == "tests.models.registry[any model id no table maps]"
    assert hops[-1].evidence.startswith("tests/entrypoints/test_serve_unlisted.py:")


@pytest.mark.parametrize(
    "path, old, new, expected",
    [
        (
            "regext/quantization/fp8.py",
            "self.bits = 8",
            "self.bits = 9",
            # "--quantization", "fp8"; "auto_fp8", whose config the table's function chooses
            {"tests/quantization/test_fp8_serve.py", "tests/quantization/test_auto_serve.py"},
        ),
        (
            "regext/quantization/awq.py",
            "self.bits = 4",
            "self.bits = 5",
            {"tests/quantization/test_awq_serve.py", "tests/quantization/test_auto_serve.py"},
        ),
    ],
)
def test_a_quantization_change_selects_the_tests_naming_its_method(
    tree: IndexedTree, path: str, old: str, new: str, expected: set[str]
) -> None:
    tree.replace(path, old, new)
    selection = tree.select()
    assert not selection.everything
    assert selected(selection) == expected
    for path in expected:
        kinds = [h.kind for h in selection.files[path].reasons[0].chain]
        assert "registers" in kinds


def test_modules_and_trace_answer_an_architecture(tree: IndexedTree) -> None:
    index = tree.index()
    answer = modules(index, "LlamaForCausalLM")
    text = answer.to_text()
    registry = tree.line("regext/models/registry.py", '"LlamaForCausalLM": ("llama"')
    where = f"regext/models/registry.py:{registry}"
    assert f"registry entry 'LlamaForCausalLM' [_TEXT_GENERATION_MODELS] @ {where}" in text
    assert "loads regext.models.llama.LlamaForCausalLM [module regext.models.llama]" in text
    assert "test tests/entrypoints/test_serve_llama.py::test_serve" in text
    assert "test tests/entrypoints/test_serve_by_architecture.py" in text
    assert "test_serve_opt" not in text
    traced = trace(index, "LlamaForCausalLM").to_text()
    assert "loads regext.models.llama.LlamaForCausalLM" in traced
    assert "tests/entrypoints/test_serve_llama.py::test_serve" in traced
    # A model id is answered with the architecture it is an example of.
    by_id = trace(index, "org/tiny-opt")
    assert by_id.found
    assert "loads regext.models.opt.OPTForCausalLM" in by_id.to_text()
    # A quantization method that is no Python name.
    method = modules(index, "awq").to_text()
    assert "loads regext.quantization.awq.AWQConfig" in method
    assert "test tests/quantization/test_awq_serve.py::test_awq" in method


def test_an_update_links_registry_names_as_a_rebuild_does(tmp_path) -> None:
    """A model id first unmapped (the wildcard entry), then given to an architecture by
    the examples table, then a quantization method removed: after each, the updated
    index's entries, refs and edges equal a fresh build's, row for row."""
    repo = make_fixture_repo("regext", tmp_path / "regext")
    workspace = Workspace.resolve(repo)
    build_index(workspace, jobs=1, show_progress=False)
    steps = [
        (
            "tests/entrypoints/test_serve_opt_v2.py",
            None,
            'def test_v2():\n    assert "org/tiny-opt-v2"\n',
        ),
        (
            "tests/models/registry.py",
            '_HfExamplesInfo("org/tiny-opt")',
            '_HfExamplesInfo("org/tiny-opt", extras={"v2": "org/tiny-opt-v2"})',
        ),
        ("regext/quantization/__init__.py", '        "awq": AWQConfig,\n', ""),
    ]
    for number, (rel, old, new) in enumerate(steps):
        path = repo / rel
        if old is None:
            path.write_text(new, encoding="utf-8")
        else:
            edit(path, old, new)
        update_index(workspace, jobs=1, show_progress=False)
        assert_same_graph(workspace.db_path, rebuild_copy(repo, tmp_path / f"r{number}"), rel)
    edges = graph_of(workspace.db_path)["edges"]
    assert any("org/tiny-opt-v2" in repr(row) and "registers" in repr(row) for row in edges)


def test_a_method_whose_config_is_chosen_at_run_time_is_an_entry(tree: IndexedTree) -> None:
    """``"auto_fp8": auto_config`` (a local the function sets): no class to resolve, so the
    entry registers the function holding the table, and a test naming the method is kept
    for a change to any config that function may choose."""
    quant = "regext/quantization/__init__.py"
    line = tree.line(quant, '"auto_fp8": auto_config')
    edges = _registers(tree)
    owner = "regext.quantization.get_quantization_config"
    assert ("auto_fp8", "registry_entry", owner, f"{quant}:{line}") in edges
    # describe()'s {"width": width} holds no class: it is no registry.
    assert not [edge for edge in edges if edge[0] == "width"]
    for path, old, new in (
        ("regext/quantization/fp8.py", "self.bits = 8", "self.bits = 9"),
        ("regext/quantization/awq.py", "self.bits = 4", "self.bits = 5"),
    ):
        tree.replace(path, old, new)
        selection = tree.select()
        assert "tests/quantization/test_auto_serve.py" in selected(selection), path
        kinds = [h.kind for h in selection.files["tests/quantization/test_auto_serve.py"]
                 .reasons[0].chain]  # fmt: skip
        assert "registers" in kinds
        tree.reset()


def test_an_org_name_string_that_is_no_model_id_loads_no_architecture(tree: IndexedTree) -> None:
    """``"application/json"`` (a media type) and ``"examples/template_chatml.jinja"`` (a
    file) have the shape of a model id but cannot name a checkpoint: they link to no entry,
    not to the wildcard of unmapped ids; ``org/unlisted-llama`` still does."""
    tree.replace("regext/models/llama.py", 'config.get("layers", 2)', 'config.get("layers", 3)')
    chosen = selected(tree.select())
    assert "tests/entrypoints/test_headers.py" not in chosen
    assert "tests/entrypoints/test_serve_unlisted.py" in chosen
    index = tree.index()
    linked = {
        target
        for (target,) in index.conn.execute(
            "SELECT r.target FROM refs r JOIN edges e ON e.ref_id = r.id"
            " WHERE r.scheme = 'registry'"
        )
    }
    assert "org/unlisted-llama" in linked
    assert not linked & {"application/json", "examples/template_chatml.jinja"}


def test_modules_shows_the_python_definitions_beside_a_registry_name(tree: IndexedTree) -> None:
    """``awq`` is a quantization method, a module and a function: the answer leads with
    the registry entry and lists the definitions, with a note, instead of dropping them."""
    answer = modules(tree.index(), "awq")
    text = answer.to_text()
    assert "loads regext.quantization.awq.AWQConfig" in text
    assert "regext.kernels.awq" in text
    assert "regext.quantization.awq" in text.replace("regext.quantization.awq.AWQConfig", "")
    assert any("Python definitions also match 'awq'" in note for note in answer.notes)
