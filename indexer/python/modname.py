"""Dotted module names from repo-relative paths, and which import roots belong to whom.

A module's name comes from the manifest, not from the disk, so extraction stays a pure
function of one file: under a Python source directory whose last component is one of
the harness's packages (``torch``), the name starts at that directory
(``torch/nn/functional.py`` -> ``torch.nn.functional``); under any other source
directory (``.``, ``src``) it starts below it (``vllm/config.py`` -> ``vllm.config``), and
below a leading layout directory (``src/pkg/mod.py`` -> ``pkg.mod``).
Files outside every source directory (tests, conftest) get a path-based name
(``test/nn/test_init.py`` -> ``test.nn.test_init``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from indexer.extract.discover import is_test_file
from indexer.harness import Manifest, load_harness
from indexer.paths import under_any

# Common third-party roots that are never part of an indexed tree: refs into them would
# only ever be unresolved noise.
THIRD_PARTY = frozenset(
    {
        "numpy",
        "scipy",
        "pytest",
        "_pytest",
        "hypothesis",
        "expecttest",
        "typing_extensions",
        "sympy",
        "yaml",
        "packaging",
        "setuptools",
        "pkg_resources",
        "jinja2",
        "six",
        "transformers",
        "huggingface_hub",
        "pydantic",
        "requests",
        "tqdm",
        "psutil",
        "filelock",
        "fsspec",
        "networkx",
        "PIL",
        "einops",
        "safetensors",
        "tokenizers",
        "regex",
        "msgspec",
        "aiohttp",
        "fastapi",
        "uvicorn",
        "openai",
        "ray",
        "zmq",
        "cloudpickle",
        "dill",
        "matplotlib",
        "pandas",
        "onnx",
        "onnxruntime",
        "triton",
        "cv2",
        "tabulate",
        "mpmath",
        "optree",
        "opt_einsum",
        "xdist",
        "tensorboard",
        "google",
        "absl",
    }
)
LAYOUT_DIRS = frozenset({"src", "python", "lib"})
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__", "builtins"}


def _strip_suffix(path: str) -> str:
    for suffix in (".pyi", ".py"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def path_module(path: str) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b`` (characters kept as they are)."""
    parts = _strip_suffix(path).split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


@dataclass(frozen=True)
class PackageLayout:
    """The naming rules of one harness, computed once per worker."""

    source_dirs: tuple[str, ...]  # python source dirs, longest first
    packages: frozenset[str]
    test_dirs: tuple[str, ...]
    utility_dirs: tuple[str, ...]
    dep_packages: frozenset[str]  # packages of depended-on harnesses (external)
    own_roots: frozenset[str] = field(default=frozenset())

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> PackageLayout:
        sources = tuple(
            sorted(
                (d.strip("/") or "." for d in manifest.list("sources", "python")),
                key=len,
                reverse=True,
            )
        )
        packages = frozenset(manifest.python_packages)
        tests = tuple(d.strip("/") for d in manifest.list("tests", "dirs"))
        deps: set[str] = set()
        for dep in manifest.depends_on:
            deps.update(load_harness(dep).python_packages)
        deps -= packages
        roots = set(packages)
        for directory in (*sources, *tests):
            top = directory.split("/", 1)[0]
            if top not in (".", ""):
                roots.add(top)
        return cls(
            source_dirs=sources,
            packages=packages,
            test_dirs=tests,
            utility_dirs=tuple(d.strip("/") for d in manifest.list("tests", "utility_dirs")),
            dep_packages=frozenset(deps),
            own_roots=frozenset(roots),
        )

    def module_name(self, path: str, manifest: Manifest) -> tuple[str, bool]:
        """The dotted name of ``path`` and whether it lies in a package (else path-based)."""
        if not is_test_file(path, manifest) and not under_any(path, self.test_dirs):
            for directory in self.source_dirs:
                if directory == ".":
                    return self._below_layout_dirs(path), True
                if path.startswith(directory + "/"):
                    last = directory.rsplit("/", 1)[-1]
                    if last in self.packages:
                        return path_module(last + path[len(directory) :]), True
                    return self._below_layout_dirs(path[len(directory) + 1 :]), True
        return path_module(path), False

    def _below_layout_dirs(self, rel: str) -> str:
        """``src/pkg/mod.py`` -> ``pkg.mod``: a leading layout directory (``src``, ``python``,
        ``lib``) is not part of the name when a package starts below it (a declared one,
        or any, for ``src``)."""
        parts = rel.split("/")
        if (
            len(parts) > 2
            and parts[0] in LAYOUT_DIRS
            and (parts[1] in self.packages or parts[0] == "src")
        ):
            return path_module("/".join(parts[1:]))
        return path_module(rel)

    def is_external(self, dotted: str) -> bool:
        return dotted.split(".", 1)[0] in self.dep_packages

    def is_own(self, dotted: str) -> bool:
        """Whether a dotted name can name something of this index (worth a ref)."""
        top = dotted.split(".", 1)[0]
        if top in self.own_roots:
            return True
        if self.packages:
            return False
        # No packages declared: anything that is not stdlib or a known third party.
        return top not in STDLIB and top not in THIRD_PARTY and top not in self.dep_packages

    def is_local_candidate(self, dotted: str) -> bool:
        """For files outside packages (tests): sibling modules imported by bare name."""
        top = dotted.split(".", 1)[0]
        return top not in STDLIB and top not in THIRD_PARTY and top not in self.dep_packages
