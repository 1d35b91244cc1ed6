"""The walk past the hub (indexer.select.hub): a selection whose walk makes the root
package live takes what the package's import reaches from the walk kept in the index,
walked once per index by the refresh that made it (indexer.select.derived), and reaches
exactly what walking it again would, with chains from the change. Selections write none
of it."""

from __future__ import annotations

from array import array
from contextlib import closing
from itertools import pairwise

from indexer.query.index import Index
from indexer.select import hub, hub_chains
from indexer.select.impact import ImpactWalker
from tests.select_support import (
    IndexedTree,
    derived_rows,
    forget_derived,
    put_derived_rows,
    rederive,
    store_derived,
    tree_fixtures,
)

OPS = "minitorch/ops.py"
# ops.py builds its namespaces at import (``minitorch = _OpNamespace(...)``), and the
# package imports ops: a change to _OpNamespace.__init__ runs whenever minitorch is imported.
AT_IMPORT = ("        self.name = name\n", "        self.name = name\n        self.kind = 'ns'\n")
# A kernel some ops reach, and no code run at import.
LINALG = "aten/src/ATen/native/LinearAlgebra.cpp"
NOT_AT_IMPORT = (
    "check_dim_size(m1, 2);",
    "check_dim_size(m1, 2);\n  check_dim_size(m1.sizes(), 2);",
)


shared, tree = tree_fixtures("minitorch")


READ = "read from the walk kept in the index"
# The package imports one module more: an edge of the hub itself.
IMPORTS_MORE = (
    "minitorch/__init__.py",
    "from . import fused\n",
    "from . import fused\nfrom . import _refs\n",
)


def test_the_hub_is_the_package_the_tests_import(tree: IndexedTree) -> None:
    with closing(tree.index()) as index:
        assert index.node(hub.find_hub(index)).qualname == "minitorch"


def _files(tree: IndexedTree) -> dict[str, bytes]:
    folder = tree.workspace.db_path.parent
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def test_a_change_run_at_import_splices_the_hubs_walk_kept_once(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    first = tree.select()  # the update before it walks from the hub and keeps that walk
    assert READ in first.index["hub_walk"]
    again = tree.select()
    assert READ in again.index["hub_walk"]
    assert set(again.files) == set(first.files)
    assert {"test/test_ops.py", "test/test_nn.py"} <= set(again.files)
    # Every chain starts at the change and ends in its test file, through the hub.
    for selected in again.files.values():
        reason = selected.reasons[0]
        assert reason.entity == "minitorch.ops._OpNamespace.__init__"
        assert reason.chain[-1].evidence.startswith(selected.path + ":")
        assert any(hop.src == "minitorch" for hop in reason.chain), reason.chain


def _reach(index: Index, tree: IndexedTree, splice: bool, qualname: str):
    walker = ImpactWalker(index, splice_hub=splice)
    start = index.conn.execute("SELECT id FROM nodes WHERE qualname = ?", (qualname,)).fetchone()
    return walker, walker.walk({start[0]: 0})


def test_spliced_walk_reaches_what_walking_reaches(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    tree.select()  # brings the index up to date with the change
    with closing(tree.index()) as index:
        _, walked = _reach(index, tree, False, "minitorch.ops._OpNamespace.__init__")
        walker, spliced = _reach(index, tree, True, "minitorch.ops._OpNamespace.__init__")
        assert walker.hub_use is not None
        assert set(spliced.steps) == set(walked.steps)
        assert spliced.import_live == walked.import_live
        assert spliced.module_names == walked.module_names
        # minitorch.fused is reached first for a name it binds (``_ops``); importing it
        # runs the package's changed import all the same: it goes live when that does.
        fused = index.conn.execute("SELECT id FROM nodes WHERE qualname = 'minitorch.fused'")
        assert fused.fetchone()[0] in walked.import_live
        start = next(n for n, step in spliced.steps.items() if step is None)
        for node_id in spliced.steps:
            chain = spliced.chain(node_id)
            if chain:  # real steps, each from the node the one before reached
                assert chain[0].prev == start and node_id in (chain[-1].src, chain[-1].dst)
                assert all(b.prev in (a.src, a.dst) for a, b in pairwise(chain))


def test_a_change_not_reaching_the_hub_walks_alone(tree: IndexedTree) -> None:
    forget_derived(tree.workspace, hub.NAME)
    tree.replace(LINALG, *NOT_AT_IMPORT)
    selection = tree.select()
    assert "hub_walk" not in selection.index
    assert "test/test_linalg.py" in selection.files
    assert len(selection.files) < selection.test_files_total


def test_a_damaged_walk_is_walked_again(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    first = tree.select()
    head, arrays = derived_rows(tree.workspace, hub.NAME)
    damaged = [(*row[:-1], row[-1][:-1]) if row[-3] == "node" else row for row in arrays]
    put_derived_rows(tree.workspace, hub.NAME, (head, damaged))  # not whole values
    before = _files(tree)
    again = tree.select()
    assert "walked; no walk was kept" in again.index["hub_walk"]
    assert set(again.files) == set(first.files)
    assert _files(tree) == before  # walked in memory: a selection writes nothing
    # Index maintenance (here as `torchtalk index build` on an up-to-date index) keeps it.
    assert "walked, and kept" in str(rederive(tree.workspace, hub.NAME))
    assert READ in tree.select().index["hub_walk"]


def test_a_walk_kept_for_another_index_is_not_read(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    tree.select()
    kept = derived_rows(tree.workspace, hub.NAME)
    tree.reset()
    tree.replace(OPS, *AT_IMPORT)
    tree.replace(*IMPORTS_MORE)
    tree.select()  # the index is updated for the new change: a new index file
    put_derived_rows(tree.workspace, hub.NAME, kept)
    with closing(tree.index()) as index:
        assert hub.load(index) is None


def _kept(tree: IndexedTree) -> tuple[dict, dict]:
    with closing(tree.index()) as index:
        walk = hub.load(index)
    assert walk is not None
    header = (walk.hub, walk.node_kinds, walk.step_kinds, walk.import_live, walk.module_names,
              walk.deferred_calls)  # fmt: skip
    return header, {name: list(values) for name, values in walk.arrays.items()}


def _updated(tree: IndexedTree) -> None:
    from indexer.update import update_index

    assert not update_index(tree.workspace, show_progress=False).full_build


def test_an_update_that_changed_nothing_the_walk_met_keeps_the_walk(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    tree.select()  # walks from the hub, kept for this index
    tree.replace(LINALG, *NOT_AT_IMPORT)  # a kernel: nothing the hub's walk meets
    _updated(tree)  # a new index file
    with closing(tree.index()) as index:
        assert hub._kept_across_update(index) is not None
    taken_over = _kept(tree)
    assert "walked, and kept" in str(rederive(tree.workspace, hub.NAME))
    assert _kept(tree) == taken_over


def test_an_update_that_changed_what_the_walk_met_walks_again(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    tree.select()
    tree.replace(*IMPORTS_MORE)
    _updated(tree)  # the hub's own edges are rewritten
    with closing(tree.index()) as index:
        assert hub._kept_across_update(index) is None
        assert hub.load(index) is None


ACTIVATION = "aten/src/ATen/native/Activation.cpp"


def _hub_meets_cpp(tree: IndexedTree) -> None:
    """Make the hub's walk meet C++, as PyTorch's does: the package imports a module
    registering a decomposition of aten::relu whose body imports the package, and a
    kernel calls at::relu (so the hub's walk goes op -> C++ caller)."""
    tree.replace(
        "minitorch/__init__.py",
        "from . import fused\n",
        "from . import fused\nfrom . import _refs\n",
    )
    tree.replace(
        "minitorch/_refs.py",
        "    return [max(x, 0.0) for x in a]",
        "    from minitorch import functional  # noqa: F401\n    return [max(x, 0.0) for x in a]",
    )
    tree.replace(
        ACTIVATION,
        "Tensor& relu_scaled_(Tensor& self, double scale) {",
        "Tensor relu_twice(const Tensor& self) {\n  return at::relu(at::relu(self));\n}\n\n"
        "Tensor& relu_scaled_(Tensor& self, double scale) {",
    )
    tree.commit("the hub's walk meets at::native::relu_twice")
    tree.replace(OPS, *AT_IMPORT)
    tree.select()  # walks from the hub, kept for this index
    with closing(tree.index()) as index:
        met = [index.node(node).qualname for node in hub.load(index).arrays["node"]]
    assert "at::native::relu_twice" in met


def _step_into(tree: IndexedTree, qualname: str) -> tuple[int, int]:
    """The kept hub walk's step by which it reached ``qualname``: its evidence line, and
    the line of the edge that step names, as the index now has it."""
    with closing(tree.index()) as index:
        walk = hub.load(index)
        (node,) = index.conn.execute("SELECT id FROM nodes WHERE qualname = ?", (qualname,))
        row = walk.rows[node[0]]
        a = walk.arrays
        (line,) = index.conn.execute(
            "SELECT line FROM edges WHERE src_id = ? AND dst_id = ?", (a["src"][row], a["dst"][row])
        ).fetchone()
        return a["line"][row], line


def test_an_update_that_only_moved_what_the_walk_met_moves_the_walk(tree: IndexedTree) -> None:
    _hub_meets_cpp(tree)
    with closing(tree.index()) as index:
        (before,) = index.conn.execute(
            "SELECT id FROM nodes WHERE qualname = 'at::native::relu_twice'"
        ).fetchone()
    # Two lines above relu_twice, in a function the hub's walk does not meet.
    tree.replace(
        ACTIVATION, "  ReluHelper h(0.0);\n", "  ReluHelper h(0.0);\n  (void)0;\n  (void)1;\n"
    )
    _updated(tree)
    with closing(tree.index()) as index:
        (after,) = index.conn.execute(
            "SELECT id FROM nodes WHERE qualname = 'at::native::relu_twice'"
        ).fetchone()
        assert after == before  # an update keeps the ids of what it re-extracts unchanged
        assert hub._kept_across_update(index) is not None
    kept_line, edge_line = _step_into(tree, "at::native::relu_twice")
    assert kept_line == edge_line == tree.line(ACTIVATION, "return at::relu(at::relu(self));")
    taken_over = _kept(tree)
    assert "walked, and kept" in str(rederive(tree.workspace, hub.NAME))
    assert _kept(tree) == taken_over  # what walking again gives, lines and all


def test_an_update_adding_a_call_to_what_the_walk_met_walks_again(tree: IndexedTree) -> None:
    _hub_meets_cpp(tree)
    tree.replace(
        ACTIVATION,
        "  return at::relu(at::relu(self));",
        "  return at::relu(at::clamp_min(self, 0));",
    )
    _updated(tree)
    with closing(tree.index()) as index:
        assert hub._kept_across_update(index) is None


REFS = "minitorch/_refs.py"


def test_an_update_that_only_moved_a_python_file_the_walk_met_moves_the_walk(
    tree: IndexedTree,
) -> None:
    # The walk reads a Python file through its facts (indexer.python.source_facts): a
    # line added above them all moves every one, the nested function's span and the
    # module variables' lines included, and changes none.
    _hub_meets_cpp(tree)
    tree.replace(REFS, "import minitorch._ops\n", "# moved\nimport minitorch._ops\n")
    _updated(tree)
    with closing(tree.index()) as index:
        assert hub._kept_across_update(index) is not None
        (relu,) = index.conn.execute(
            "SELECT attrs FROM nodes WHERE qualname = 'minitorch._refs.register_decomposition'"
        ).fetchone()
        assert '"nested"' in relu  # what a moved span has to be mapped for
    taken_over = _kept(tree)
    assert "walked, and kept" in str(rederive(tree.workspace, hub.NAME))
    assert _kept(tree) == taken_over  # what walking again gives, lines and all


def test_an_update_that_dropped_a_docstring_the_walk_met_keeps_the_walk(
    tree: IndexedTree,
) -> None:
    # The bench's edit (bench/sampled_changes.py): a statement before the docstring,
    # which is then none; no walk reads one.
    _hub_meets_cpp(tree)
    doc = '    """Applies the rectified linear unit element-wise."""\n'
    tree.replace("minitorch/functional.py", doc, "    probe = 0\n" + doc)
    _updated(tree)
    with closing(tree.index()) as index:
        (attrs,) = index.conn.execute(
            "SELECT attrs FROM nodes WHERE qualname = 'minitorch.functional.relu'"
        ).fetchone()
        assert '"doc"' not in attrs
        assert hub._kept_across_update(index) is not None
    taken_over = _steps(tree)
    assert "walked, and kept" in str(rederive(tree.workspace, hub.NAME))
    # Each node reached by the same step; the order of one depth's rows follows the edges'
    # row ids, which the update gave the re-extracted file's edges anew.
    assert _steps(tree) == taken_over


def _steps(tree: IndexedTree) -> tuple[tuple, set[tuple]]:
    header, arrays = _kept(tree)
    columns = ("node", "prev", "src", "dst", "step_kind", "file", "line", "depth")
    return header, set(zip(*(arrays[name] for name in columns), strict=True))


def test_an_update_changing_the_statement_facts_of_a_module_the_walk_met_walks_again(
    tree: IndexedTree,
) -> None:
    # The same rows; only what the statement does differs: it reads a name more (the
    # walk follows module names through what later statements read).
    _hub_meets_cpp(tree)
    tree.replace(REFS, "decomposition_table = {}\n", "decomposition_table = {len: 0}\n")
    _updated(tree)
    with closing(tree.index()) as index:
        assert hub._kept_across_update(index) is None


def test_an_update_moving_a_statement_out_of_a_nested_function_walks_again(
    tree: IndexedTree,
) -> None:
    # Every row the same and every line mapped one to one, but the statement is now
    # outside the nested function (whose body calling the outer one does not run): the
    # lines changed order, which the walk compares (indexer.select.deferral).
    _hub_meets_cpp(tree)
    tree.replace(
        REFS,
        "    def register(fn):\n        decomposition_table[op] = fn\n        return fn\n",
        "    decomposition_table[op] = None\n\n    def register(fn):\n        return fn\n",
    )
    _updated(tree)
    with closing(tree.index()) as index:
        assert hub._kept_across_update(index) is None


def _node(index, qualname: str) -> int:
    (found,) = index.conn.execute("SELECT id FROM nodes WHERE qualname = ?", (qualname,))
    return found[0]


def _keep_chain_from(tree: IndexedTree, qualname: str) -> ImpactWalker:
    """Keep the chain to the hub from ``qualname``, as the refresh keeps the most used
    ops' (``hub_chains.derive``); the walker that derived it."""
    with closing(tree.index()) as index:
        walker = ImpactWalker(index, splice_hub=True, keep=True)
        hub_node = hub.find_hub(index)
        derivation = hub_chains.derive(index, walker, hub_node, [_node(index, qualname)])
        assert derivation.chains()
    store_derived(tree.workspace, lambda conn, index: hub_chains.store(conn, index, derivation))
    return walker


def _kept_chains(tree: IndexedTree) -> list:
    with closing(tree.index()) as index:
        return [[list(key) for key in chain] for chain in hub_chains.load(index).chains()]


def test_a_kept_chain_leads_the_next_walk_to_the_hub(tree: IndexedTree) -> None:
    forget_derived(tree.workspace, hub_chains.NAME)
    tree.replace(OPS, *AT_IMPORT)
    first = tree.select()
    assert "kept chain" not in first.index["hub_walk"]
    # No op reaches the hub here: the refresh derived no chain, and the selection kept
    # the one it found in memory only.
    assert _kept_chains(tree) == []
    _keep_chain_from(tree, "minitorch.ops._OpNamespace.__init__")
    kept = _kept_chains(tree)
    assert kept[0][0][1] == "minitorch.ops._OpNamespace.__init__"
    assert kept[0][-1][1] == "minitorch"
    again = tree.select()
    assert "reached by a kept chain" in again.index["hub_walk"]
    assert set(again.files) == set(first.files)
    for selected in again.files.values():
        assert selected.reasons[0].entity == "minitorch.ops._OpNamespace.__init__"


def test_a_kept_chain_that_leads_nowhere_is_dropped(tree: IndexedTree) -> None:
    tree.replace(OPS, *AT_IMPORT)
    plain = tree.select()
    # A chain from the change through a node it does not reach first: it cannot be
    # followed, so the walk finds its own way.
    bogus = (
        ("python_function", "minitorch.ops._OpNamespace.__init__", OPS),
        ("python_function", "minitorch.ops._fused_gelu", OPS),
        ("python_module", "minitorch", "minitorch/__init__.py"),
    )
    with closing(tree.index()) as index:
        start = _node(index, "minitorch.ops._OpNamespace.__init__")
        empty = hub_chains.OpChain(start, bogus, array("i"), array("i"), array("i"), array("q"))
        ids = hub_chains.resolve(index, [bogus])
        derivation = hub_chains.Derivation(hub.find_hub(index), [empty], ids)
    store_derived(tree.workspace, lambda conn, index: hub_chains.store(conn, index, derivation))
    assert _kept_chains(tree) == [[list(key) for key in bogus]]
    again = tree.select()
    assert "kept chain" not in again.index["hub_walk"]
    assert set(again.files) == set(plain.files)
    # The refresh derives the walk's own chain instead.
    _keep_chain_from(tree, "minitorch.ops._OpNamespace.__init__")
    kept = _kept_chains(tree)
    assert kept and [list(key) for key in bogus] not in kept


def test_a_chain_to_the_hub_is_kept_without_walking_past_it(tree: IndexedTree) -> None:
    """How the refresh keeps chains from the most used ops: a walk that stops once the
    hub is live, and keeps the chain that got there."""
    forget_derived(tree.workspace, hub_chains.NAME)
    tree.replace(OPS, *AT_IMPORT)
    tree.select()  # the index is brought up to date with the change
    forget_derived(tree.workspace, hub_chains.NAME)
    walker = _keep_chain_from(tree, "minitorch.ops._OpNamespace.__init__")
    assert walker.hub_use is None  # stopped at the hub: nothing past it was spliced
    kept = _kept_chains(tree)
    assert [chain[0][1] for chain in kept] == ["minitorch.ops._OpNamespace.__init__"]
    assert kept[0][-1][1] == "minitorch"


def _plain(reach):
    """The same reach with every Overlay made a dict: what merging reads eagerly."""
    from indexer.select.reach import Reach

    return Reach(
        dict(reach.steps.items()),
        dict(reach.origin.items()),
        dict(reach.kind.items()),
        dict(reach.file_id.items()),
        set(reach.import_live),
        dict(reach.module_names),
        dict(reach.depth.items()),
        list(reach.deferred_calls),
    )


def test_merging_a_walk_that_spliced_the_hub_equals_merging_it_whole(tree: IndexedTree) -> None:
    # The fallback merges a widened entity's walk into the selection's: when that walk
    # spliced the hub's, its rows are laid over the selection's reach, made when read.
    tree.replace(OPS, *AT_IMPORT)
    tree.replace(LINALG, *NOT_AT_IMPORT)
    tree.select()
    with closing(tree.index()) as index:
        _, own = _reach(index, tree, True, "at::native::mm_cpu")  # reaches no hub
        _, wide = _reach(index, tree, True, "minitorch.ops._OpNamespace.__init__")
        assert type(own.steps) is dict and type(wide.steps).__name__ == "Overlay"
        eager, lazy = _plain(own), _plain(own)
        eager_added = eager.merge(_plain(wide))
        lazy_added = lazy.merge(wide)
        assert lazy_added == eager_added
        for name in ("steps", "origin", "kind", "file_id", "depth"):
            assert dict(getattr(lazy, name).items()) == getattr(eager, name), name
            assert len(getattr(lazy, name)) == len(getattr(eager, name)), name
        assert lazy.import_live == eager.import_live
