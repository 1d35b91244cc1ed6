"""Harness manifests: the conventions of one framework, as TOML.

A manifest names where the C++/CUDA and Python sources and the tests are, how bindings
are spelled, which paths select everything or nothing, and what a healthy index of that
framework must contain. Manifests compose: ``extends`` merges a parent under the child
(tables merge key by key; a child's scalar or list replaces the parent's), ``depends_on``
names harnesses whose packages receive external references.

Which manifest applies to a source tree, first match wins: ``--harness NAME``, the
tree's own ``.torchtalk.toml``, the configured default, then detection by marker files.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.errors import ManifestError, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

REPO_MANIFEST = ".torchtalk.toml"
FALLBACK_HARNESS = "torch-extension"

_STR, _INT, _BOOL = str, int, bool
_STR_LIST = "list[str]"
_STR_OR_LIST = "str|list[str]"
_STR_TABLE = "table[str]"
_INT_TABLE = "table[int]"

# section -> key -> type. Unknown sections and keys are errors: a typo must not silently
# turn a rule off.
SCHEMA: dict[str, dict[str, Any]] = {
    "harness": {
        "name": _STR,
        "description": _STR,
        "extends": _STR_OR_LIST,
        "depends_on": _STR_LIST,
    },
    "detect": {"marker_files": _STR_LIST},
    "sources": {
        "cpp": _STR_LIST,
        "python": _STR_LIST,
        "exclude": _STR_LIST,
        "max_file_bytes": _INT,
    },
    "python": {"packages": _STR_LIST, "op_registrars": _STR_LIST, "library_loaders": _STR_LIST},
    "tests": {"dirs": _STR_LIST, "patterns": _STR_LIST, "utility_dirs": _STR_LIST},
    "bindings": {
        "native_functions": _STR_LIST,
        "derivatives": _STR_LIST,
        "torch_library_macros": _STR_LIST,
        "pybind_macros": _STR_LIST,
        "dispatch_stub_macros": _STR_LIST,
        "registration_wrappers": _STR_LIST,
        "impl_macros": _STR_LIST,
        "namespace_aliases": _STR_TABLE,
    },
    "selection": {
        "run_everything": _STR_LIST,
        "never_affects": _STR_LIST,
        "import_every_module": _STR_LIST,
    },
    # String-keyed registries (docs/selection.md "Registries"): the files whose tables are
    # registries, and the decorators registering a class under a string.
    "registries": {"tables": _STR_LIST, "decorators": _STR_LIST},
    "record": {"max_age_days": _INT},
    # Precise C++ mode (indexer/precise): where builds leave their compile database, and
    # the class templates whose static apply() runs F::forward (autograd functions).
    "precise": {"build_dirs": _STR_LIST, "autograd_function_templates": _STR_LIST},
    "expected_minimums": _INT_TABLE,
}


# Integer keys with a lower bound: a size limit of -5 would index nothing at all.
MINIMUMS: dict[tuple[str, str], int] = {("sources", "max_file_bytes"): 1}
# A built-in harness is named, never a path: a pull request's .torchtalk.toml must not
# make CI read other files on the machine through ``extends = "../../x"``.
HARNESS_NAME = re.compile(r"[a-z0-9_-]+\Z")


def check_harness_name(name: object, where: str, key: str | None = None) -> str:
    """``name`` if it can name a built-in harness, else a one-line error about ``where``."""
    if isinstance(name, str) and HARNESS_NAME.match(name):
        return name
    problem = f"{name!r} is not a harness name (letters a-z, digits, '_' and '-')"
    if key is not None:
        raise ManifestError(where, key, problem)
    raise UsageError(f"{where}: {problem}")


def _type_name(expected: Any) -> str:
    """``int`` for the type int, the spelling itself for the others (``list[str]``)."""
    return expected.__name__ if isinstance(expected, type) else str(expected)


def _type_ok(value: Any, expected: Any) -> bool:
    if expected is _STR:
        return isinstance(value, str)
    if expected is _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is _BOOL:
        return isinstance(value, bool)
    if expected == _STR_LIST:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if expected == _STR_OR_LIST:
        return isinstance(value, str) or _type_ok(value, _STR_LIST)
    if expected in (_STR_TABLE, _INT_TABLE):
        item = _STR if expected == _STR_TABLE else _INT
        return isinstance(value, dict) and all(_type_ok(v, item) for v in value.values())
    raise AssertionError(f"unknown schema type {expected!r}")


def _validate(data: dict[str, Any], path: str) -> None:
    for section, body in data.items():
        if section not in SCHEMA:
            raise ManifestError(path, f"[{section}]", "unknown section")
        if not isinstance(body, dict):
            raise ManifestError(path, f"[{section}]", "must be a table")
        spec = SCHEMA[section]
        for key, value in body.items():
            where = f"[{section}].{key}"
            if spec == _INT_TABLE:  # a free-keyed section, e.g. expected_minimums
                if not _type_ok(value, _INT):
                    raise ManifestError(path, where, "must be an integer")
                if value < 0:
                    raise ManifestError(path, where, f"must not be negative (got {value})")
                continue
            if key not in spec:
                raise ManifestError(path, where, "unknown key")
            if not _type_ok(value, spec[key]):
                raise ManifestError(path, where, f"must be {_type_name(spec[key])}")
            least = MINIMUMS.get((section, key))
            if least is not None and value < least:
                raise ManifestError(path, where, f"must be at least {least} (got {value})")


def read_manifest_file(path: Path) -> dict[str, Any]:
    """Parse and validate one TOML file, without resolving ``extends``."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(str(path), None, "no such file") from None
    except UnicodeDecodeError:
        raise ManifestError(str(path), None, "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(str(path), None, f"invalid TOML: {exc}") from None
    except RecursionError:  # arrays or tables nested thousands deep: no manifest's shape
        raise ManifestError(str(path), None, "invalid TOML: nested too deep") from None
    _validate(data, str(path))
    return data


# Sections a child replaces whole instead of merging: the counts a healthy index reaches
# belong to one tree, so a child that states its own must not inherit its parent's.
REPLACED_SECTIONS = frozenset({"expected_minimums"})


def _merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    merged = dict(parent)
    for key, value in child.items():
        if key in REPLACED_SECTIONS:
            merged[key] = value
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def builtin_manifest_dir() -> Path:
    # The package's directory, as importlib.resources.files gives it for a package on
    # disk, without importing importlib.resources (tempfile, shutil: every command pays).
    import manifests

    return Path(manifests.__spec__.origin).parent


def builtin_harnesses() -> list[str]:
    return sorted(p.stem for p in builtin_manifest_dir().glob("*.toml"))


@dataclass(frozen=True)
class Manifest:
    """A resolved harness: the merged data of a manifest and everything it extends."""

    name: str
    data: dict[str, Any]
    origins: tuple[str, ...]  # the files merged, parent first
    depends_on: tuple[str, ...] = field(default=())

    def get(self, section: str, key: str, default: Any = None) -> Any:
        return self.data.get(section, {}).get(key, default)

    def list(self, section: str, key: str) -> list[str]:
        value = self.get(section, key, [])
        return [value] if isinstance(value, str) else list(value)

    @property
    def expected_minimums(self) -> dict[str, int]:
        return dict(self.data.get("expected_minimums", {}))

    @property
    def python_packages(self) -> list[str]:
        return self.list("python", "packages")

    def fingerprint(self) -> str:
        """Stable text of the merged manifest, stored in the index to notice manifest changes."""
        import json

        return json.dumps(self.data, sort_keys=True)


def _resolve(
    path: Path, data: dict[str, Any], seen: tuple[str, ...]
) -> tuple[dict, tuple[str, ...]]:
    parents = data.get("harness", {}).get("extends", [])
    parents = [parents] if isinstance(parents, str) else parents
    merged: dict[str, Any] = {}
    origins: tuple[str, ...] = ()
    for parent in parents:
        check_harness_name(parent, str(path), "[harness].extends")
        if parent in seen:
            chain = " -> ".join((*seen, parent))
            raise ManifestError(str(path), "[harness].extends", f"extends cycle: {chain}")
        parent_path = builtin_manifest_dir() / f"{parent}.toml"
        if not parent_path.is_file():
            raise ManifestError(
                str(path),
                "[harness].extends",
                f"unknown harness {parent!r} (known: {', '.join(builtin_harnesses())})",
            )
        parent_data, parent_origins = _resolve(
            parent_path, read_manifest_file(parent_path), (*seen, parent)
        )
        merged = _merge(merged, parent_data)
        origins += parent_origins
    own = {k: v for k, v in data.items()}
    own_harness = {k: v for k, v in own.get("harness", {}).items() if k not in ("extends", "name")}
    own["harness"] = own_harness
    return _merge(merged, own), (*origins, str(path))


def load_manifest_file(path: Path, default_name: str | None = None) -> Manifest:
    data = read_manifest_file(path)
    own_name = data.get("harness", {}).get("name")
    parents = data.get("harness", {}).get("extends", [])
    first_parent = parents if isinstance(parents, str) else (parents[0] if parents else None)
    name = own_name or default_name or first_parent or path.stem
    # Only a built-in harness (loaded by name) can be the target of its own extends chain.
    merged, origins = _resolve(path, data, (default_name,) if default_name else ())
    depends = tuple(merged.get("harness", {}).get("depends_on", []))
    for dep in depends:
        check_harness_name(dep, str(path), "[harness].depends_on")
        if not (builtin_manifest_dir() / f"{dep}.toml").is_file():
            raise ManifestError(str(path), "[harness].depends_on", f"unknown harness {dep!r}")
    return Manifest(name=name, data=merged, origins=origins, depends_on=depends)


def load_harness(name: str) -> Manifest:
    """A built-in harness by name."""
    check_harness_name(name, "harness")
    path = builtin_manifest_dir() / f"{name}.toml"
    if not path.is_file():
        raise UsageError(f"unknown harness {name!r} (known: {', '.join(builtin_harnesses())})")
    return load_manifest_file(path, default_name=name)


def detect_harness(source: Path) -> str:
    """The built-in harness whose marker files exist in ``source``; else the fallback."""
    for name in builtin_harnesses():
        markers = load_harness(name).list("detect", "marker_files")
        if markers and all((source / marker).exists() for marker in markers):
            return name
    return FALLBACK_HARNESS


def select_manifest(
    source: Path, explicit: str | None = None, configured: str | None = None
) -> tuple[Manifest, str]:
    """The manifest for ``source`` and how it was chosen (for status and reports)."""
    if explicit:
        if explicit.endswith(".toml"):  # a path, given as one: the user's own manifest
            return load_manifest_file(Path(explicit).expanduser().resolve()), "--harness"
        return load_harness(explicit), "--harness"
    repo_file = source / REPO_MANIFEST
    if repo_file.is_file():
        return load_manifest_file(repo_file), REPO_MANIFEST
    if configured:
        return load_harness(configured), "configured default"
    return load_harness(detect_harness(source)), "detected"
