"""How much of a selected test file to run: all of it, unless the evidence is precise.

Two narrowings, and only these (never narrower than the evidence):

* **OpInfo**: when a file is reached *only* through ``@ops`` tests iterating OpInfo
  entries of changed ops, just those tests for just those OpInfos run
  (``test_compare_cpu_<opinfo>_<device>_<dtype>``).
* **CUDA**: when every changed entity is CUDA-only code, the device-generic classes of
  a file run only their CUDA variants (``TestFooCUDA``), not ``TestFooCPU``.
"""

from __future__ import annotations

from indexer.graph.vocabulary import NodeKind
from indexer.query.index import Index, Node
from indexer.select.model import SelectedFile, TestScope
from indexer.select.reach import Reach


def formatted_opinfo_name(node: Node) -> str:
    """The name PyTorch's @ops appends to a test: ``nn.functional.linear`` ->
    ``nn_functional_linear``, plus ``_<variant_test_name>``."""
    name = str(node.attrs.get("name") or node.qualname.split(":", 1)[-1].split(".")[0])
    name = name.replace(".", "_")
    variant = str(node.attrs.get("variant_test_name") or "").replace(".", "_")
    return f"{name}_{variant}" if variant else name


def _split_test(qualname: str) -> tuple[str | None, str]:
    parts = qualname.split("::")
    return (parts[-2] if len(parts) >= 3 else None), parts[-1]


def opinfo_scopes(index: Index, reach: Reach, in_file: list[int]) -> list[TestScope] | None:
    """The narrowed tests of one file, or None when the file must run whole."""
    # Evidence enters a file where the walk crosses into it; what the walk reaches from
    # there inside the same file (a test's class, the module code instantiating it)
    # adds nothing of its own.
    here = reach.file_id.get(in_file[0]) if in_file else None
    tests = []
    for node_id in in_file:
        step = reach.steps.get(node_id)
        if step is not None and reach.file_id.get(step.prev) == here:
            continue
        if reach.kind.get(node_id) != NodeKind.TEST_FUNCTION.value:
            return None  # entered otherwise than through a test function
        tests.append(node_id)
    if not tests:
        return None
    scopes = []
    for node in index.nodes(tests):
        if not node.attrs.get("opinfo_list"):
            return None
        reached = [
            dst
            for (dst,) in index.conn.execute(
                "SELECT dst_id FROM edges WHERE src_id = ?", (node.id,)
            )
            if dst in reach.steps
        ]
        if any(reach.kind.get(dst) != NodeKind.OPINFO.value for dst in reached):
            return None  # reached some other way too: all its variants may break
        opinfos: list[Node] = index.nodes(reached)
        if not opinfos:
            return None
        cls, function = _split_test(node.qualname)
        names = sorted({formatted_opinfo_name(opinfo) for opinfo in opinfos})
        scopes.append(TestScope(cls, function, names, why=f"@ops over {', '.join(names[:5])}"))
    return scopes


def device_generic_classes(index: Index, path: str) -> list[str]:
    return [
        node.name
        for node in index.nodes_in_file(path, [NodeKind.TEST_CLASS.value])
        if node.attrs.get("device_generic")
    ]


def narrow(
    index: Index, reach: Reach, selected: SelectedFile, in_file: list[int], cuda_only: bool
) -> None:
    """Set ``selected.tests`` / ``selected.devices`` where the evidence allows it."""
    if selected.tests is None and in_file and not any(r.note for r in selected.reasons):
        selected.tests = opinfo_scopes(index, reach, in_file)
    if cuda_only:
        classes = device_generic_classes(index, selected.path)
        if classes:
            selected.devices = ["cuda"]
            selected.device_classes = classes
