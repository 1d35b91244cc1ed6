"""Where TorchTalk keeps its indexes and its configuration.

One index directory per (source checkout, harness), keyed by the checkout's real path, in
the platformdirs user cache (``~/.cache/torchtalk`` on Linux) unless TORCHTALK_CACHE_DIR
says otherwise. The configuration (default source and harness) lives in the user config
directory, or TORCHTALK_CONFIG_DIR.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from indexer import durable
from indexer.errors import UsageError

INDEX_FILE = "index.sqlite"
LOCK_FILE = "build.lock"


def _directory(variable: str, default: str) -> Path:
    """$``variable`` if set, else ``default``; a one-line error if it names a non-directory
    (every later read and write under it would fail with a traceback)."""
    override = os.environ.get(variable)
    path = Path(override).expanduser() if override else Path(default)
    if path.exists() and not path.is_dir():
        where = f"{variable}={override}" if override else str(path)
        raise UsageError(f"{where} is not a directory")
    return path


def cache_dir() -> Path:
    return _directory("TORCHTALK_CACHE_DIR", platformdirs.user_cache_dir("torchtalk"))


def config_dir() -> Path:
    return _directory("TORCHTALK_CONFIG_DIR", platformdirs.user_config_dir("torchtalk"))


def source_key(source: Path) -> str:
    """A short stable key of a checkout's location."""
    return hashlib.blake2b(str(source.resolve()).encode(), digest_size=8).hexdigest()


def index_dir(source: Path, harness: str) -> Path:
    safe_harness = re.sub(r"[^A-Za-z0-9_.-]", "_", harness)
    return cache_dir() / "indexes" / f"{safe_harness}-{source_key(source)}"


def index_path(source: Path, harness: str) -> Path:
    return index_dir(source, harness) / INDEX_FILE


def require_source(source: str | os.PathLike[str]) -> Path:
    path = Path(source).expanduser()
    if not path.exists():
        raise UsageError(f"source {str(path)!r} does not exist")
    if not path.is_dir():
        raise UsageError(f"source {str(path)!r} is not a directory")
    return path.resolve()


# The configuration is small: the default source and harness, and a harness per source
# chosen by 'torchtalk init'. It is written by hand rather than with a TOML writer.
CONFIG_KEYS = ("source", "harness")


@dataclass
class Config:
    source: str | None = None  # the default source tree
    harness: str | None = None  # the default source tree's harness
    harnesses: dict[str, str] = field(default_factory=dict)  # resolved source path -> harness

    def harness_for(self, source: Path) -> str | None:
        key = str(source.resolve())
        if key in self.harnesses:
            return self.harnesses[key]
        if self.source and Path(self.source).expanduser().resolve() == source.resolve():
            return self.harness
        return None


def config_path() -> Path:
    return config_dir() / "config.toml"


def load_config() -> Config:
    from indexer.harness import tomllib

    path = config_path()
    if not path.is_file():
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: invalid configuration: {exc}") from None
    except RecursionError:  # arrays nested thousands deep
        raise UsageError(f"{path}: invalid configuration: nested too deep") from None
    for key in CONFIG_KEYS:
        if key in data and not isinstance(data[key], str):
            kind = type(data[key]).__name__
            raise UsageError(f"{path}: {key} must be a string (got {kind}); see 'torchtalk init'")
    harnesses = data.get("harnesses", {})
    if not isinstance(harnesses, dict) or not all(
        isinstance(value, str) for value in harnesses.values()
    ):
        raise UsageError(f"{path}: [harnesses] must map source paths to harness names")
    return Config(source=data.get("source"), harness=data.get("harness"), harnesses=harnesses)


def save_config(config: Config) -> Path:
    path = config_path()
    lines = [
        f"{key} = {json.dumps(getattr(config, key))}\n"
        for key in CONFIG_KEYS
        if getattr(config, key) is not None
    ]
    if config.harnesses:
        lines.append("\n[harnesses]\n")
        lines.extend(
            f"{json.dumps(src)} = {json.dumps(h)}\n" for src, h in sorted(config.harnesses.items())
        )
    durable.write_atomic(path, "".join(lines).encode("utf-8"))
    return path
