"""What an op's kernel leads to below itself: the ops it calls, and the libraries it reaches.

A CompositeImplicitAutograd kernel (``at::native::nll_loss_symint``) runs no device code of
its own: it calls other ops through ATen's API (``at::nll_loss_forward_symint``), and
their kernels do the work. A backend kernel may end in a vendor library rather than in a
``__global__`` kernel: ``addmm`` on CUDA reaches cuBLAS through ``at::cuda::blas::gemm``.
Both are read from the call graph:

- :func:`ops_called`: the ops a kernel calls (``calls`` edges the linker made into ops,
  directly or through helpers up to ``OP_DEPTH`` levels), without the ops that only
  allocate, copy or re-view a tensor, which every kernel calls;
- :func:`library_calls`: calls, up to ``LIBRARY_DEPTH`` levels down, into a library:
  a raw API call the tree has no definition for (``cublasSgemm``, ``cudnnConvolutionForward``,
  ``DftiComputeForward``, ``dnnl_...``), or a call into PyTorch's own wrapper of one
  (functions defined in ``aten/src/ATen/cuda/CUDABlas.cpp``, ``native/cudnn/``,
  ``native/mkldnn/``...), each named with its library and call site.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from indexer.query import op_chain
from indexer.query.index import Index, Node

OP_DEPTH = 2
LIBRARY_DEPTH = 4
# Ops that allocate, copy, convert or re-view a tensor: every kernel calls some, and none
# is where an op's work is done.
PLUMBING = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones
    ones_like full full_like new_zeros new_ones new_full scalar_tensor tensor arange
    copy_ clone contiguous to _to_copy resize_ resize_as_ fill_ zero_ detach alias
    view view_as reshape reshape_as expand expand_as unsqueeze squeeze flatten unflatten
    select slice narrow permute transpose t movedim unbind split chunk as_strided
    item size stride dim numel is_contiguous is_nonzero result_type
    _local_scalar_dense set_ lift_fresh resolve_conj resolve_neg
    """.split()  # noqa: SIM905 (a word list reads better as words)
)

# Raw library APIs, by the start of the called name (the tree has no definition of them).
_RAW_PREFIXES: tuple[tuple[str, str], ...] = (
    ("cublasLt", "cuBLASLt"),
    ("cublas", "cuBLAS"),
    ("cudnn", "cuDNN"),
    ("cusolver", "cuSOLVER"),
    ("cusparse", "cuSPARSE"),
    ("cufft", "cuFFT"),
    ("curand", "cuRAND"),
    ("magma_", "MAGMA"),
    ("mkl_", "MKL"),
    ("Dfti", "MKL"),
    ("cblas_", "BLAS"),
    ("dnnl_", "oneDNN"),
    ("miopen", "MIOpen"),
    ("hipblas", "hipBLAS"),
    ("rocblas", "rocBLAS"),
)
# PyTorch's wrappers of a library, by the file that defines the function called.
_WRAPPER_PATHS: tuple[tuple[str, str], ...] = (
    ("aten/src/ATen/cuda/CUDABlas", "cuBLAS"),
    ("aten/src/ATen/cuda/CUDASparseBlas", "cuSPARSE"),
    ("aten/src/ATen/native/cuda/linalg/CUDASolver", "cuSOLVER"),
    ("aten/src/ATen/native/cuda/linalg/BatchLinearAlgebraLib", "cuSOLVER/cuBLAS"),
    ("aten/src/ATen/native/cuda/linalg/MagmaUtils", "MAGMA"),
    ("aten/src/ATen/native/cuda/CuFFT", "cuFFT"),
    ("aten/src/ATen/native/cudnn/", "cuDNN"),
    ("aten/src/ATen/cudnn/", "cuDNN"),
    ("aten/src/ATen/native/miopen/", "MIOpen"),
    ("aten/src/ATen/native/mkldnn/", "oneDNN"),
    ("aten/src/ATen/native/mkl/", "MKL"),
    ("aten/src/ATen/mkl/", "MKL"),
    ("aten/src/ATen/native/CPUBlas", "BLAS (cpublas)"),
)
_NAMESPACES: tuple[tuple[str, str], ...] = (
    ("dnnl::", "oneDNN"),
    ("ideep::", "oneDNN"),
    ("cudnn_frontend::", "cuDNN"),
)


def library_of_name(name: str) -> str | None:
    """The library a raw API name belongs to (``cublasSgemm`` -> cuBLAS), if any: a known
    prefix followed by a capital (``cudnnSetStream``, not PyTorch's ``cudnn_utils``), or
    a prefix that ends with ``_`` (``mkl_``, ``dnnl_``)."""
    plain = name.split("<", 1)[0].removeprefix("::")
    for prefix, library in _NAMESPACES:
        if plain.startswith(prefix):
            return library
    for prefix, library in _RAW_PREFIXES:
        rest = plain[len(prefix) :]
        if plain.startswith(prefix) and (prefix.endswith("_") or rest[:1].isupper()):
            return library
    return None


@functools.lru_cache(maxsize=16384)
def library_of_path(path: str) -> str | None:
    """The library whose PyTorch wrapper ``path`` holds, if any (asked for every function
    a kernel's walk reaches: remembered per path)."""
    for prefix, library in _WRAPPER_PATHS:
        if path.startswith(prefix):
            return library
    return None


@dataclass(frozen=True)
class OpCall:
    op: Node
    evidence: str  # the call site
    caller: int  # the function whose body calls it


@dataclass(frozen=True)
class LibraryCall:
    library: str
    name: str  # as written at the call site, or the wrapper's qualified name
    evidence: str  # the call site
    caller: int
    definition: str | None = None  # the wrapper's definition, when it is PyTorch's

    @property
    def setup(self) -> bool:
        """A raw call that sets the library up (``cudnnSetStream``) rather than runs it."""
        return self.definition is None and any(word in self.name for word in _SETUP_WORDS)


def ops_called(index: Index, function_ids: Iterable[int]) -> list[OpCall]:
    """Ops the functions call through ATen's API, nearest first, each op once."""
    reach = op_chain.walk_out(index, list(function_ids), ["calls"], OP_DEPTH, {"op"})
    found: dict[int, OpCall] = {}
    sites: set[str] = set()
    # One op per call site: at::cumsum(...) links to every overload its arity allows,
    # and the first in primary order (functional, default overload) stands for them.
    for hop in sorted(reach.hops, key=lambda hop: _overload_rank(hop.node)):
        if hop.node.name in PLUMBING or hop.node.name.rstrip("_") in PLUMBING:
            continue
        if hop.evidence in sites and hop.attrs.get("ambiguous"):
            continue
        sites.add(hop.evidence)
        found.setdefault(hop.node.id, OpCall(hop.node, hop.evidence, hop.attrs["from"]))
    order = {hop.node.id: i for i, hop in enumerate(reach.hops)}
    return sorted(found.values(), key=lambda call: order[call.op.id])


def _overload_rank(op: Node) -> tuple[int, int]:
    overload = str(op.attrs.get("overload") or "")
    out = "out" in overload.split("_") or overload.endswith("out")
    return (1 if out else 0, 0 if not overload else 1)


def raw_calls(index: Index) -> dict[int, list[tuple[str, str, int]]]:
    """function id -> (name, path, line) of each raw library call in its body (read once
    per index, by ranges of the refs' target_key index)."""

    def read() -> dict[int, list[tuple[str, str, int]]]:
        paths = index.file_paths()
        table: dict[int, list[tuple[str, str, int]]] = {}
        for prefix, _ in _RAW_PREFIXES:
            upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            for src, target, file_id, line in index.conn.execute(
                "SELECT src_id, target, file_id, line FROM refs WHERE target_key >= ?"
                " AND target_key < ? AND kind = 'calls' AND target_id IS NULL"
                " AND NOT EXISTS (SELECT 1 FROM edges e WHERE e.ref_id = refs.id)",
                (prefix, upper),
            ):
                if library_of_name(target or "") and file_id in paths:
                    table.setdefault(src, []).append((target, paths[file_id], line))
        return table

    return index.shared("raw-library-calls", read)


# Raw calls that set a library up rather than run it: listed after the others.
_SETUP_WORDS = ("Set", "Get", "Create", "Destroy", "Descriptor", "Handle")


def library_calls(index: Index, function_ids: Iterable[int]) -> list[LibraryCall]:
    """Library calls the functions reach, nearest first: calls crossing into PyTorch's
    wrapper of a library (from code outside it), and raw API calls in the bodies walked;
    calls that only set a library up (``cudnnSetStream``) last. Memoized per index: a
    trace asks for the same kernels' calls several times."""
    key = tuple(sorted(set(function_ids)))
    return op_chain.memoized(index, "library-calls", key, lambda: _library_calls(index, list(key)))


def _library_calls(index: Index, starts: list[int]) -> list[LibraryCall]:
    raw = raw_calls(index)
    paths = index.file_paths()
    found: dict[tuple[str, str], tuple[str, str, str, int, int | None]] = {}

    def add_raw(function_id: int) -> None:
        for name, path, line in raw.get(function_id, ()):
            library = library_of_name(name) or "library"
            key = (library, name.split("<", 1)[0])
            found.setdefault(key, (library, name, f"{path}:{line}", function_id, None))

    for start in starts:
        add_raw(start)
    file_of = _files_of(index, starts)
    for start in starts:  # a kernel of PyTorch's library integration (native/cudnn/...)
        library = library_of_path(paths.get(file_of.get(start, -1), ""))
        if library is not None:
            found.setdefault((library, str(start)), (library, "", "", start, start))
    # A light walk: ids and files only; the few nodes an answer names are read after.
    frontier, seen = list(starts), set(starts)
    for _ in range(LIBRARY_DEPTH):
        rows = op_chain._level_edges(index, frontier, ["calls"])
        targets = [
            dst for _, dst, _, _, _, kind in rows if kind == "cpp_function" and dst not in seen
        ]
        file_of.update(_files_of(index, targets))
        following = []
        for src, dst, path, line, _, kind in rows:
            if kind != "cpp_function" or dst in seen:
                continue
            seen.add(dst)
            library = library_of_path(paths.get(file_of.get(dst, -1), ""))
            if library is not None:
                if library_of_path(paths.get(file_of.get(src, -1), "")) != library:
                    found.setdefault((library, str(dst)), (library, "", f"{path}:{line}", src, dst))
            else:
                following.append(dst)
            add_raw(dst)
            if len(seen) >= op_chain.WALK_BUDGET:
                break
        frontier = following
        if not frontier or len(seen) >= op_chain.WALK_BUDGET:
            break
    wrappers = {
        node.id: node for node in index.nodes(v[4] for v in found.values() if v[4] is not None)
    }
    calls = []
    for library, name, site, caller, wrapper in found.values():
        if wrapper is None:
            calls.append(LibraryCall(library, name, site, caller))
        elif wrapper in wrappers:
            node = wrappers[wrapper]
            site = site or node.evidence  # the kernel itself: its definition
            calls.append(LibraryCall(library, node.qualname, site, caller, node.evidence))
    return sorted(calls, key=lambda call: call.setup)


def _files_of(index: Index, ids: list[int]) -> dict[int, int]:
    """node id -> file id, one query per batch."""
    found: dict[int, int] = {}
    for start in range(0, len(ids), 900):
        batch = ids[start : start + 900]
        found.update(
            index.conn.execute(
                f"SELECT id, file_id FROM nodes WHERE id IN ({','.join('?' * len(batch))})", batch
            )
        )
    return found
