"""Registries in answers: which module and class a registry name loads, and which tests
load it (an architecture such as ``LlamaForCausalLM``, a quantization method such as
``fp8``, a model id an examples table gives an architecture).

``modules`` and ``trace`` call these for a name the index holds as a registry entry
(indexer/python/registries.py); the tests are those whose code names the entry, or a
model id an examples table maps to it (the ``covers`` edges into the entries, and the
``registers`` edges from their aliases). docs/selection.md "Registries".
"""

from __future__ import annotations

from indexer.graph.vocabulary import EdgeKind, NodeKind
from indexer.python.registries import ANY_ID
from indexer.query.answer import Answer, Item
from indexer.query.index import Index, Node

ENTRY = NodeKind.REGISTRY_ENTRY.value
REGISTERS = EdgeKind.REGISTERS.value
TEST_KINDS = frozenset(
    kind.value for kind in (NodeKind.TEST_FILE, NodeKind.TEST_CLASS, NodeKind.TEST_FUNCTION)
)
MAX_TESTS = 40
BRIEF_TESTS = 5  # beside a class's own answer, which the registry lines lead


def entries_named(index: Index, name: str) -> list[Node]:
    """The registry entries spelled ``name`` (a key or a model id)."""
    return [node for node in index.find(name, [ENTRY]) if node.name == name]


def entries_of(index: Index, cls: Node) -> list[Node]:
    """The registry entries that load ``cls``."""
    return [
        index.node(edge.src)
        for edge in index.in_edges(cls.id, [REGISTERS])
        if index.node(edge.src).kind == ENTRY
    ]


def _keys(index: Index, entry: Node) -> list[Node]:
    """An alias's entries (a model id -> its architecture's); an entry itself otherwise."""
    if not entry.attrs.get("alias_of"):
        return [entry]
    found = [index.node(e.dst) for e in index.out_edges(entry.id, [REGISTERS])]
    return [node for node in found if node.kind == ENTRY] or [entry]


def _loaded(index: Index, entry: Node) -> list[Node]:
    return [
        node
        for node in (index.node(e.dst) for e in index.out_edges(entry.id, [REGISTERS]))
        if node.kind != ENTRY
    ]


def _tests(index: Index, entry: Node) -> list[tuple[str, str, str]]:
    """(test, evidence, how) for the tests naming the entry or one of its aliases."""
    found: dict[str, tuple[str, str, str]] = {}
    names = [(entry, f"names {entry.name!r}")]
    anyid = []
    for edge in index.in_edges(entry.id, [REGISTERS]):
        alias = index.node(edge.src)
        if alias.kind != ENTRY:
            continue
        if alias.name == ANY_ID:  # after the tests that name this entry
            anyid.append((alias, "names a model id no table maps: may load any architecture"))
        else:
            names.append((alias, f"names model id {alias.name!r} ({alias.evidence})"))
    for group in (names, anyid):
        for_group: dict[str, tuple[str, str, str]] = {}
        for named, how in group:
            for edge in index.in_edges(named.id, [EdgeKind.COVERS.value]):
                test = index.node(edge.src)
                if test.kind in TEST_KINDS:
                    label = test.qualname if test.kind != NodeKind.TEST_FILE.value else test.path
                    if label not in found:
                        for_group.setdefault(label, (label, edge.evidence, how))
        found.update(sorted(for_group.items()))
    return list(found.values())


def registry_items(
    index: Index, entries: list[Node], depth: int = 0, max_tests: int = MAX_TESTS, first: str = ""
) -> list[Item]:
    """Per entry: where it is registered, the module and class it loads, and its tests
    (``max_tests`` each); the entries spelled ``first`` lead (the name asked)."""
    items: list[Item] = []
    seen: set[int] = set()
    entries = sorted(entries, key=lambda entry: entry.name != first)
    for asked in entries:
        for entry in _keys(index, asked):
            if entry.id in seen:
                continue
            seen.add(entry.id)
            table = entry.attrs.get("table") or entry.attrs.get("decorator") or "registry"
            items.append(Item(f"registry entry {entry.name!r}", entry.evidence, table, depth))
            if asked.id != entry.id:
                items.append(
                    Item(f"model id {asked.name!r}", asked.evidence, "an example of it", depth + 1)
                )
            for cls in _loaded(index, entry):
                module = cls.qualname.rpartition(".")[0]
                items.append(
                    Item(f"loads {cls.qualname}", cls.evidence, f"module {module}", depth + 1)
                )
            tests = _tests(index, entry)
            for label, evidence, how in tests[:max_tests]:
                items.append(Item(f"test {label}", evidence, how, depth + 1))
            if len(tests) > max_tests:
                items.append(Item(f"{len(tests) - max_tests} more tests", None, "", depth + 1))
            if not tests:
                items.append(Item("no test names it", None, "", depth + 1))
    return items


def registry_answer(tool: str, index: Index, name: str) -> Answer | None:
    """The answer for a name that is a registry entry and nothing the tool otherwise
    knows (a key loading a class of another name, a quantization method, a model id)."""
    entries = entries_named(index, name)
    if not entries:
        return None
    answer = Answer(tool, name, title=f"{name}: {len(entries)} registry entr"
                    f"{'y' if len(entries) == 1 else 'ies'}")  # fmt: skip
    answer.items = registry_items(index, entries, first=name)
    return answer
