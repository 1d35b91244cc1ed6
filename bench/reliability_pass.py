"""Re-run both reliability passes (issues 21 and 40) on fresh copies of the minitorch
fixture, and print each case with its outcome.

The cases that did not hold when a pass found them are tests (tests/test_reliability*.py,
run here with pytest and counted case by case); the cases that held are this script's
catalogue (``CASES``), each run against the installed code: a command and what it must
do (a one-line error and a non-zero exit, an answer, an index left intact). Root-only
cases (a tmpfs for a full disk, a read-only bind mount, device nodes) are skipped with
the reason when not root. docs/reliability.md holds the table this prints.

    python bench/reliability_pass.py [--jobs 2] [--markdown table.md] [--no-tests] [-k WORD]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "minitorch"
LINALG = "minitorch/linalg.py"
KERNEL = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"


class Failed(Exception):
    """The case did not hold: what was observed instead."""


class Skipped(Exception):
    """The case cannot run here: why."""


@dataclass
class Case:
    number: int  # which pass: 1 (issue 21) or 2 (issue 40)
    area: str
    name: str
    expected: str
    run: Callable[[Context], str]  # returns what was observed; raises Failed or Skipped
    indexed: bool = True  # the fixture copy is indexed first


@dataclass
class Outcome:
    case: Case
    status: str  # held, did not hold, skipped
    observed: str
    seconds: float


CASES: list[Case] = []


def case(number: int, area: str, name: str, expected: str, indexed: bool = True):
    def register(function: Callable[[Context], str]) -> Callable[[Context], str]:
        CASES.append(Case(number, area, name, expected, function, indexed))
        return function

    return register


# --- the fixture and the commands ------------------------------------------------------------


def _git(repo: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=check, capture_output=True, text=True
    ).stdout


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Context:
    """A fresh minitorch copy (a git repository) with its own cache and config."""

    base: Path
    repo: Path = field(init=False)
    home: Path = field(init=False)

    def __post_init__(self) -> None:
        self.home = self.base / "home"
        self.repo = self.base / "minitorch"

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TORCHTALK_CACHE_DIR": str(self.home / "cache"),
            "TORCHTALK_CONFIG_DIR": str(self.home / "config"),
        }

    def cli(
        self,
        *argv: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 180,
        source: bool = False,
    ) -> Result:
        args = [*argv, "--source", str(self.repo)] if source else list(argv)
        done = subprocess.run(
            [sys.executable, "-m", "pytest_torchtalk", *args],
            env={**self.env, **(env or {})},
            cwd=cwd or self.base,
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def pytest(self, *args: str, env: dict[str, str] | None = None) -> Result:
        clean = {k: v for k, v in self.env.items() if not k.startswith("PYTEST_")}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
            env={**clean, **(env or {})},
            cwd=self.repo,
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=300,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def build(self) -> Result:
        done = self.cli("index", "build", "-q", source=True)
        if done.code != 0:
            raise Failed(f"the fixture did not build: {done.err[-300:]}")
        return done

    def index_rows(self) -> int:
        import sqlite3

        found = list((self.home / "cache" / "indexes").glob("*/index.sqlite"))
        if not found:
            return 0
        conn = sqlite3.connect(f"file:{found[0]}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT count(*) FROM files").fetchone()[0]
        finally:
            conn.close()

    def write(self, path: str, text: str | bytes) -> Path:
        target = self.repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            target.write_bytes(text)
        else:
            target.write_text(text, encoding="utf-8")
        return target


def fresh(base: Path, built: bool = True) -> Context:
    """A new copy of the fixture at ``base``: a copy of the template (its git history
    and, when ``built``, its index, moved to the copy's index directory), made once."""
    template = _template(base.parent)
    context = Context(base)
    shutil.copytree(template.repo, context.repo, symlinks=True)
    if built:
        from indexer.locations import source_key

        made = next((template.home / "cache" / "indexes").iterdir())
        harness = made.name.rsplit("-", 1)[0]
        target = context.home / "cache" / "indexes" / f"{harness}-{source_key(context.repo)}"
        shutil.copytree(made, target, ignore=shutil.ignore_patterns("build.lock"))
    return context


_TEMPLATE: list[Context] = []
_TEMPLATE_LOCK = threading.Lock()


def _template(scratch: Path) -> Context:
    with _TEMPLATE_LOCK:
        if not _TEMPLATE:
            context = Context(scratch / "template")
            shutil.copytree(FIXTURE, context.repo, ignore=shutil.ignore_patterns("__pycache__"))
            _git(context.repo, "init", "-q", "-b", "main")
            _commit(context.repo, "minitorch")
            context.build()
            _TEMPLATE.append(context)
    return _TEMPLATE[0]


# --- what an outcome must look like ----------------------------------------------------------


def one_line_error(result: Result, *needles: str) -> str:
    """Held when the command failed with exactly one ``torchtalk: error:`` line."""
    lines = [line for line in result.err.splitlines() if line.strip()]
    if result.code == 0 or "Traceback" in result.text:
        raise Failed(f"exit {result.code}: {(result.err or result.out)[-200:]!r}")
    errors = [line for line in lines if line.startswith("torchtalk: error: ")]
    if len(errors) != 1 or lines[-1] != errors[0]:
        raise Failed(f"exit {result.code}, not one error line: {result.err[-200:]!r}")
    for needle in needles:
        if needle not in errors[0]:
            raise Failed(f"{errors[0][:200]!r} does not say {needle!r}")
    return f"exit {result.code}: {errors[0][len('torchtalk: error: ') :][:140]}"


def answered(result: Result, *needles: str) -> str:
    """Held when the command succeeded without a traceback."""
    if result.code != 0 or "Traceback" in result.text:
        raise Failed(f"exit {result.code}: {(result.err or result.out)[-200:]!r}")
    for needle in needles:
        if needle not in result.text:
            raise Failed(f"the output does not say {needle!r}: {result.text[-200:]!r}")
    first = (result.out or result.err).strip().splitlines()
    return f"exit 0: {first[0][:120] if first else '(no output)'}"


def root_only(why: str) -> None:
    if os.geteuid() != 0:
        raise Skipped(f"needs root ({why})")


# --- the archive cases' material -----------------------------------------------------------------


_ARCHIVE: list[bytes] = []
_EXPORT_LOCK = threading.Lock()


def exported_members(context: Context) -> dict[str, bytes]:
    """The members of a good snapshot archive of minitorch (made once, in a fixture copy
    of its own), which is also written to ``context.base / "good.tar.gz"``."""
    with _EXPORT_LOCK:
        if not _ARCHIVE:
            maker = fresh(Path(tempfile.mkdtemp(prefix="archive-", dir=context.base.parent)))
            maker.cli("snapshot", "save", "good", source=True)
            archive = maker.base / "good.tar.gz"
            maker.cli("snapshot", "export", "good", "-o", str(archive))
            _ARCHIVE.append(archive.read_bytes())
            shutil.rmtree(maker.base, ignore_errors=True)
    (context.base / "good.tar.gz").write_bytes(_ARCHIVE[0])
    with tarfile.open(context.base / "good.tar.gz", "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def sums_of(files: dict[str, bytes]) -> bytes:
    return "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n"
        for name, data in files.items()
        if name != "SHA256SUMS"
    ).encode()


def archive_of(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return path


def crafted(context: Context, change: Callable[[dict[str, bytes]], list]) -> Path:
    files = exported_members(context)
    return archive_of(context.base / "crafted.tar.gz", change(files))


def good_list(files: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """Every member, the checksums made to match (SHA256SUMS and snapshot.json first)."""
    files = {name: data for name, data in files.items() if name != "SHA256SUMS"}
    order = [
        "snapshot.json",
        "index.sqlite",
        *sorted(set(files) - {"snapshot.json", "index.sqlite"}),
    ]
    return [
        ("SHA256SUMS", sums_of(files)),
        *[(name, files[name]) for name in order if name in files],
    ]


def special_member(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    return info


def import_case(change: Callable[[dict[str, bytes]], list], *needles: str):
    def run(context: Context) -> str:
        archive = crafted(context, change)
        result = one_line_error(context.cli("snapshot", "import", str(archive)), *needles)
        listed = context.cli("snapshot", "list")
        if "crafted" in listed.out or any(
            p.name.startswith(".staging-")
            for p in (context.home / "cache" / "snapshots").glob(".*")
        ):
            raise Failed("the store changed")
        return result

    return run


# --- pass 1: bad input, one line each ---------------------------------------------------------

ERRORS_1: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("index build of a path that does not exist", ["index", "build", "--source", "/nonexistent/x"], ("does not exist",)),
    ("index build of a file", ["index", "build", "--source", "{repo}/README.md"], ("is not a directory",)),
    ("index build with an unknown harness", ["index", "build", "--source", "{repo}", "--harness", "nosuch"], ("unknown harness",)),
    ("index build with a harness name in capitals", ["index", "build", "--source", "{repo}", "--harness", "PyTorch"], ("is not a harness name",)),
    ("index build --jobs abc", ["index", "build", "--source", "{repo}", "--jobs", "abc"], ("--jobs",)),
    ("status of a path that does not exist", ["status", "--source", "/nonexistent/x"], ("does not exist",)),
    ("select --base of an unknown revision", ["select", "--source", "{repo}", "--base", "nosuchrev"], ("nosuchrev",)),
    ("select of a directory outside git", ["select", "--source", "{outside}"], ()),
    ("snapshot save '../x'", ["snapshot", "save", "../x", "--source", "{repo}"], ("'..'",)),
    ("snapshot save '/abs'", ["snapshot", "save", "/abs", "--source", "{repo}"], ()),
    ("snapshot save ''", ["snapshot", "save", "", "--source", "{repo}"], ("empty",)),
    ("snapshot save 'a//b'", ["snapshot", "save", "a//b", "--source", "{repo}"], ("empty component",)),
    ("snapshot save '.hidden'", ["snapshot", "save", ".hidden", "--source", "{repo}"], ("may not start with '.'",)),
    ("snapshot save 'a b'", ["snapshot", "save", "a b", "--source", "{repo}"], ()),
    ("snapshot save of a 101-character component", ["snapshot", "save", "x" * 101, "--source", "{repo}"], ("over 100",)),
    ("snapshot delete of an unknown name", ["snapshot", "delete", "nosuch"], ("no snapshot named",)),
    ("snapshot export of an unknown name", ["snapshot", "export", "nosuch"], ("no snapshot named",)),
    ("snapshot load of an unknown name", ["snapshot", "load", "nosuch", "--source", "{repo}"], ("no snapshot named",)),
    ("snapshot import of a missing file", ["snapshot", "import", "/nonexistent.tar.gz"], ("no such archive",)),
    ("snapshot import of a text file", ["snapshot", "import", "{repo}/README.md"], ("not a readable snapshot archive",)),
    ("snapshot import of an empty file", ["snapshot", "import", "{empty}"], ()),
    ("record merge of a missing record", ["record", "merge", "/nonexistent.rec", "-o", "{base}/m.rec"], ()),
    ("record merge of a file that is not a record", ["record", "merge", "{repo}/README.md", "-o", "{base}/m.rec"], ()),
    ("record show of a missing record", ["record", "show", "--record", "/nonexistent.rec", "--test", "x"], ()),
    ("mcp-serve --port 0", ["mcp-serve", "--source", "{repo}", "--port", "0"], ("--port must be between",)),
    ("mcp-serve --port 70000", ["mcp-serve", "--source", "{repo}", "--port", "70000"], ("--port must be between",)),
    ("mcp-serve --jobs 0", ["mcp-serve", "--source", "{repo}", "--jobs", "0"], ("--jobs must be at least 1",)),
    ("mcp-serve of a path that does not exist", ["mcp-serve", "--source", "/nonexistent/x"], ("does not exist",)),
    ("audit without --build", ["audit", "--source", "{repo}", "--test", "true"], ("--build and --test are required",)),
    ("audit --mutations 0", ["audit", "--source", "{repo}", "--build", "true", "--test", "true", "--mutations", "0"], ("at least 1",)),
    ("audit --paths with a backward range", ["audit", "--source", "{repo}", "--build", "true", "--test", "true", "--paths", "x.py:9-1"], ("ends before it starts",)),
    ("init of a path that does not exist", ["init", "--source", "/nonexistent/x"], ("does not exist",)),
    ("an unknown command", ["frobnicate"], ("invalid choice",)),
    ("an unknown option", ["status", "--frobnicate"], ("unrecognized arguments",)),
]  # fmt: skip


def _format(argv: list[str], context: Context) -> list[str]:
    empty = context.base / "empty.tar.gz"
    empty.touch()
    outside = context.base / "outside"
    outside.mkdir(exist_ok=True)
    values = {"repo": str(context.repo), "base": str(context.base), "empty": str(empty),
              "outside": str(outside)}  # fmt: skip
    return [arg.format(**values) for arg in argv]


for _name, _argv, _needles in ERRORS_1:

    def _run(context: Context, argv: list[str] = _argv, needles: tuple = _needles) -> str:
        return one_line_error(context.cli(*_format(argv, context)), *needles)

    case(1, "command line", _name, "one-line error, non-zero exit", indexed=False)(_run)


MANIFESTS_1: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    ("a .torchtalk.toml that is not TOML", "[harness\n", ("invalid TOML",)),
    ("a .torchtalk.toml with an unknown section", "[nosuch]\nx = 1\n", ("unknown section",)),
    ("a .torchtalk.toml with an unknown key", "[sources]\nnosuch = 1\n", ("unknown key",)),
    ("a .torchtalk.toml with a string for a list", '[sources]\ncpp = "aten"\n', ("must be list[str]",)),
    ("a .torchtalk.toml with a section that is a value", "sources = 5\n", ("must be a table",)),
    ("a .torchtalk.toml extending an unknown harness", '[harness]\nextends = "nosuch"\n', ("unknown harness",)),
    ("a .torchtalk.toml depending on an unknown harness", '[harness]\nextends = "pytorch"\ndepends_on = ["nosuch"]\n', ("unknown harness",)),
    ("a .torchtalk.toml that is not UTF-8", b"[harness]\nname = \"caf\xe9\"\n", ("not UTF-8",)),
    ("a .torchtalk.toml with a negative minimum", '[harness]\nextends = "pytorch"\n[expected_minimums]\nnodes = -1\n', ("must not be negative",)),
    ("a .torchtalk.toml with max_file_bytes = 0", '[harness]\nextends = "pytorch"\n[sources]\nmax_file_bytes = 0\n', ("must be at least 1",)),
    ("a .torchtalk.toml with a boolean for a number", '[harness]\nextends = "pytorch"\n[sources]\nmax_file_bytes = true\n', ("must be",)),
]  # fmt: skip

for _name, _text, _needles in MANIFESTS_1:

    def _run(context: Context, text: str | bytes = _text, needles: tuple = _needles) -> str:
        context.write(".torchtalk.toml", text)
        return one_line_error(context.cli("status", source=True), *needles)

    case(1, "configuration", _name, "one-line error naming the file and key, exit 2", False)(_run)


@case(1, "configuration", "a config.toml that is not TOML", "one-line error, exit 2")
def _config_not_toml(context: Context) -> str:
    (context.home / "config").mkdir(parents=True, exist_ok=True)
    (context.home / "config" / "config.toml").write_text("source = \n")
    return one_line_error(context.cli("status", source=True), "invalid configuration")


IMPORTS_1: list[tuple[str, Callable[[dict[str, bytes]], list], tuple[str, ...]]] = [
    ("a member named '../x'", lambda f: [("../x", b"x"), *good_list(f)], ("leads out of the archive",)),
    ("a member with an absolute path", lambda f: [("/tmp/x", b"x"), *good_list(f)], ("absolute path",)),
    ("a symlink member", lambda f: [special_member("index.sqlite", tarfile.SYMTYPE)], ("is a link",)),
    ("a hard link member", lambda f: [special_member("index.sqlite", tarfile.LNKTYPE)], ("is a link",)),
    ("a character device member", lambda f: [special_member("index.sqlite", tarfile.CHRTYPE)], ("device or pipe",)),
    ("a FIFO member", lambda f: [special_member("index.sqlite", tarfile.FIFOTYPE)], ("device or pipe",)),
    ("a directory member", lambda f: [special_member("index.sqlite", tarfile.DIRTYPE)], ()),
    ("an unexpected member", lambda f: [*good_list(f), ("extra.txt", b"x")], ("unexpected",)),
    ("a member twice", lambda f: [*good_list(f), ("snapshot.json", f["snapshot.json"])], ("appears twice",)),
    ("no index member", lambda f: good_list({k: v for k, v in f.items() if k != "index.sqlite"}), ("lacks index.sqlite",)),
    ("a checksum that does not match", lambda f: [(n, d + b" " if n == "snapshot.json" else d) for n, d in good_list(f)], ("checksum mismatch",)),
    ("a malformed SHA256SUMS", lambda f: [("SHA256SUMS", b"nonsense\n"), *good_list(f)[1:]], ("malformed line",)),
    ("a snapshot.json that is not JSON", lambda f: good_list({**f, "snapshot.json": b"{not json"}), ()),
    ("a snapshot.json of another schema version", lambda f: good_list({**f, "snapshot.json": json.dumps({**json.loads(f["snapshot.json"]), "schema_version": 999}).encode()}), ("schema version",)),
    ("an index.sqlite that is not a database", lambda f: good_list({**f, "index.sqlite": b"not a database" * 100}), ("not a usable index",)),
]  # fmt: skip

for _name, _change, _needles in IMPORTS_1:
    case(1, "snapshot archives", f"snapshot import of an archive with {_name}",
         "refused in one line; the store unchanged", False)(import_case(_change, *_needles))  # fmt: skip


@case(1, "snapshot archives", "snapshot import of a truncated archive", "one-line error")
def _truncated(context: Context) -> str:
    exported_members(context)
    whole = (context.base / "good.tar.gz").read_bytes()
    cut = context.base / "cut.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    return one_line_error(context.cli("snapshot", "import", str(cut)))


@case(1, "snapshot archives", "snapshot import of gzip-compressed garbage", "one-line error")
def _garbage(context: Context) -> str:
    bad = context.base / "garbage.tar.gz"
    bad.write_bytes(gzip.compress(os.urandom(4096)))
    return one_line_error(context.cli("snapshot", "import", str(bad)))


@case(1, "snapshot archives", "snapshot import --name '../x'", "one-line error")
def _import_bad_name(context: Context) -> str:
    exported_members(context)
    archive = str(context.base / "good.tar.gz")
    return one_line_error(context.cli("snapshot", "import", archive, "--name", "../x"), "'..'")


@case(
    1,
    "snapshot archives",
    "snapshot import over an existing name",
    "one-line error; --force replaces",
)
def _import_exists(context: Context) -> str:
    exported_members(context)
    archive = str(context.base / "good.tar.gz")
    answered(context.cli("snapshot", "import", archive))
    shown = one_line_error(context.cli("snapshot", "import", archive), "exists")
    answered(context.cli("snapshot", "import", archive, "--force"))
    return shown


# --- pass 1: trees that are odd, indexes that are damaged ------------------------------------------


TREES_1: list[tuple[str, str, str | bytes]] = [
    ("a binary file (NUL bytes) among the sources", "minitorch/blob.py", b"\0\1\2" * 100),
    ("an empty Python file", "minitorch/empty.py", ""),
    ("a Python file that does not parse", "minitorch/broken.py", "def f(:\n  return\n"),
    ("a C++ file with unbalanced braces", "aten/src/ATen/native/Broken.cpp", "namespace at { void f() { {{ \n"),
    ("a C++ file of only a macro", "aten/src/ATen/native/Macro.cpp", "#define X(a) a##a\nX(1)\n"),
    ("a Python file that is not UTF-8 text", "minitorch/latin.py", b"x = '\xe9'\n"),
    ("a file over max_file_bytes (5 MB)", "minitorch/huge.py", "x = 1\n" * 900_000),
    ("a C++ file with a 100,000-character line", "aten/src/ATen/native/Long.cpp", "int x = " + "1+" * 50_000 + "1;\n"),
    ("a Python expression nested 10,000 deep", "minitorch/deep.py", "x = " + "(" * 10_000 + "1" + ")" * 10_000 + "\n"),
    ("a native_functions.yaml that is not YAML", "aten/src/ATen/native/native_functions.yaml", "- func: [\n"),
    ("a native_functions.yaml that is a mapping", "aten/src/ATen/native/native_functions.yaml", "func: add\n"),
    ("a derivatives.yaml entry without a name", "tools/autograd/derivatives.yaml", "- self: grad\n"),
]  # fmt: skip

for _name, _path, _text in TREES_1:

    def _run(context: Context, path: str = _path, text: str | bytes = _text) -> str:
        context.write(path, text)
        try:
            shown = answered(context.cli("index", "build", "-q", source=True, timeout=120))
        except subprocess.TimeoutExpired:
            raise Failed("index build did not end within 120 s") from None
        answered(context.cli("select", "--base", "HEAD", source=True))
        return shown

    case(1, "trees", f"index build and select with {_name}", "indexed; the file's problem reported, not a traceback")(_run)  # fmt: skip


@case(1, "faults", "kill -9 during index build", "the old index intact; the next build works")
def _kill_build(context: Context) -> str:
    before = context.index_rows()
    for number in range(100):
        context.write(f"minitorch/gen/mod_{number}.py", f"def f{number}(x):\n    return x\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_torchtalk", "index", "build", "-q", "--source", str(context.repo)],
        env=context.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if context.index_rows() not in (before, before + 100):
        raise Failed(
            f"the index holds {context.index_rows()} files, not {before} or {before + 100}"
        )
    return answered(context.cli("index", "build", "-q", source=True))


@case(1, "faults", "two index builds at once", "both finish; the index is whole")
def _two_builds(context: Context) -> str:
    args = [sys.executable, "-m", "pytest_torchtalk", "index", "build", "-q", "--force", "--source", str(context.repo)]  # fmt: skip
    processes = [subprocess.Popen(args, env=context.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    codes = [(p.wait(), p.stderr.read()) for p in processes]  # type: ignore[union-attr]
    if any(code != 0 or "Traceback" in err for code, err in codes):
        raise Failed(f"{codes}")
    return f"both exit 0; {context.index_rows()} files indexed"


@case(1, "faults", "a damaged index (truncated to half)", "select runs everything saying why")
def _half_index(context: Context) -> str:
    db = next((context.home / "cache" / "indexes").glob("*/index.sqlite"))
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    context.write(LINALG, (context.repo / LINALG).read_text() + "\nX = 1\n")
    return answered(context.cli("select", "--base", "HEAD", source=True), "run everything")


@case(
    1,
    "faults",
    "the index deleted under status",
    "non-zero, saying there is no index and how to build one",
)
def _deleted_index(context: Context) -> str:
    shutil.rmtree(context.home / "cache" / "indexes")
    result = context.cli("status", source=True)
    if result.code == 0 or "Traceback" in result.text or "index build" not in result.text:
        raise Failed(f"exit {result.code}: {result.text[-200:]!r}")
    said = next(line for line in result.text.splitlines() if "index" in line)
    return f"exit {result.code}: {said[:120]}"


@case(1, "faults", "select with a deleted and a renamed file", "an answer")
def _renamed(context: Context) -> str:
    _git(context.repo, "mv", LINALG, "minitorch/linalg2.py")
    (context.repo / "test" / "test_unrelated.py").unlink()
    return answered(context.cli("select", "--base", "HEAD", source=True))


@case(1, "mcp", "20 concurrent MCP calls over stdio", "20 answers")
def _mcp_20(context: Context) -> str:
    answers = mcp(context, [("search", {"query": "add"})] * 20)
    got = sum(1 for key, a in answers.items() if isinstance(key, int) and key > 0 and "result" in a)
    if got != 20:
        raise Failed(f"{got} answers")
    return "20 results"


# --- MCP over stdio, spoken line by line ----------------------------------------------------------


def mcp(
    context: Context, calls: list[tuple[str, dict]], raw: list[str] | None = None, wait: float = 120
) -> dict[int, dict]:
    """Initialize, send every call at once (and ``raw`` lines), return the answers by id."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_torchtalk", "mcp-serve", "--source", str(context.repo)],
        env=context.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        *[json.dumps({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments}})
          for n, (name, arguments) in enumerate(calls)],
        *(raw or []),
    ]  # fmt: skip
    answers: dict[int, dict] = {}
    expected = len(calls) + 1

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            answers[answer.get("id")] = answer
            if len([k for k in answers if isinstance(k, int)]) >= expected:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        process.stdin.write("".join(line + "\n" for line in lines))  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
    except BrokenPipeError:
        pass
    reader.join(wait)
    process.kill()
    process.wait()
    return answers


def tool_text(answer: dict) -> tuple[bool, str]:
    result = answer.get("result") or {}
    text = "".join(block.get("text", "") for block in result.get("content", []))
    return bool(result.get("isError")), text


MCP_2: list[tuple[str, str, dict]] = [
    ("a path traversal as a test file", "tests", {"query": "../../../../etc/passwd", "mode": "file_info"}),
    ("a path traversal as a function", "trace", {"func": "../../../../etc/passwd"}),
    ("an SQL-like name", "search", {"query": "'; DROP TABLE nodes; --"}),
    ("a LIKE wildcard '%'", "search", {"query": "%"}),
    ("a LIKE wildcard '_'", "search", {"query": "_"}),
    ("a regex-like name", "search", {"query": ".*(a|b)+$"}),
    ("a backslash", "search", {"query": "\\"}),
    ("a NUL character", "graph", {"func": "add\u0000mul"}),
    ("names in other scripts", "affected", {"funcs": ["加法", "сложение", "\U0001f600"]}),
    ("an empty name", "modules", {"name": ""}),
    ("a mode that does not exist", "tests", {"query": "add", "mode": "nosuch"}),
    ("a limit of 10**100", "tests", {"query": "add", "limit": 10**100}),
    ("a negative limit", "tests", {"query": "add", "limit": -5}),
    ("a depth of 1,000,000", "graph", {"func": "add", "depth": 1_000_000}),
    ("an unknown tool", "nosuch", {}),
    ("a missing argument", "trace", {}),
    ("a number for a name", "trace", {"func": 5}),
]  # fmt: skip


_HOSTILE: dict[int, dict] = {}
_HOSTILE_LOCK = threading.Lock()


def hostile_answers(context: Context) -> dict[int, dict]:
    """Every MCP_2 call, and an argument nested 1,000,000 deep, in one session (once)."""
    with _HOSTILE_LOCK:
        if not _HOSTILE:
            calls = [(tool, args) for _, tool, args in MCP_2]
            deep = '{"jsonrpc":"2.0","id":999,"method":"tools/call","params":{"name":"search","arguments":{"query":' + "[" * 1_000_000 + "]" * 1_000_000 + "}}}"  # fmt: skip
            _HOSTILE.update(mcp(context, [*calls, ("get_status", {})], raw=[deep]))
    return _HOSTILE


for _number, (_name, _tool, _args) in enumerate(MCP_2, 1):

    def _run(context: Context, number: int = _number) -> str:
        answers = hostile_answers(context)
        answer = answers.get(number)
        if answer is None:
            raise Failed("no answer")
        if len(MCP_2) + 1 not in answers:
            raise Failed("the server did not answer get_status after it")
        if "error" in answer:
            return f"JSON-RPC error {answer['error'].get('code')}: {answer['error'].get('message')}"
        is_error, text = tool_text(answer)
        if is_error and (len(text) > 1000 or "Traceback" in text or "\n" in text.strip()):
            raise Failed(f"{text[:150]!r}")
        if "root:x:0" in text:
            raise Failed("it read /etc/passwd")
        return f"{'tool error' if is_error else 'result'}: {text.strip()[:100]}"

    case(
        2,
        "mcp",
        f"MCP over stdio: {_name}",
        "a result or a one-line tool error; the session goes on",
    )(_run)


@case(2, "mcp", "200 concurrent MCP calls over stdio", "200 answers")
def _mcp_200(context: Context) -> str:
    answers = mcp(context, [("search", {"query": f"add{n % 7}"}) for n in range(200)])
    got = sum(1 for key in answers if isinstance(key, int) and key > 0)
    if got != 200:
        raise Failed(f"{got} answers")
    return "200 answers"


@case(2, "mcp", "a client that disconnects mid-call", "the server exits; nothing left running")
def _mcp_disconnect(context: Context) -> str:
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_torchtalk", "mcp-serve", "--source", str(context.repo)],
        env=context.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    process.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}\n')  # type: ignore[union-attr]  # fmt: skip
    process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"graph","arguments":{"func":"add","mode":"impact"}}}\n')  # type: ignore[union-attr]  # fmt: skip
    process.stdin.close()  # type: ignore[union-attr]
    process.stdout.close()  # type: ignore[union-attr]
    try:
        code = process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise Failed("still running 60 s after the client left") from None
    err = process.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
    if "Traceback" in err:
        raise Failed(err[-200:])
    return f"exit {code}"


def _http_server(context: Context) -> tuple[subprocess.Popen, int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_torchtalk", "mcp-serve", "--source", str(context.repo),
         "--transport", "streamable-http", "--port", str(port)],
        env=context.env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    process.stderr.readline()  # type: ignore[union-attr]  # "serving ..."
    return process, port


def _post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp", data=body,
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}'  # fmt: skip
HTTP_2: list[tuple[str, bytes, dict[str, str], Callable[[int, str], bool]]] = [
    ("a foreign Host header", INIT, {"Host": "evil.example"}, lambda s, b: s in (400, 403, 421)),
    ("a foreign Origin header", INIT, {"Origin": "http://evil.example"}, lambda s, b: s in (400, 403)),
    ("a line that is not JSON", b"not json", {}, lambda s, b: "-32700" in b),
    ("params that are not an object", b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":"notadict"}', {}, lambda s, b: "-32602" in b or "-32600" in b),
    ("its own Host header (127.0.0.1:PORT)", INIT, {"Host": "127.0.0.1:{port}"}, lambda s, b: s == 200),
]  # fmt: skip

for _name, _body, _headers, _ok in HTTP_2:

    def _run(context: Context, body=_body, headers=_headers, ok=_ok) -> str:
        process, port = _http_server(context)
        try:
            status, text = _post(port, body, {k: v.format(port=port) for k, v in headers.items()})
        finally:
            process.terminate()
            process.wait()
        if not ok(status, text):
            raise Failed(f"HTTP {status}: {text[:120]!r}")
        return f"HTTP {status}: {text[:80]}"

    case(2, "mcp", f"HTTP transport on 127.0.0.1: {_name}", "refused or answered as JSON-RPC")(_run)


# --- pass 2: faults --------------------------------------------------------------------------------


def _killed(context: Context, argv: list[str], after: float) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_torchtalk", *argv],
        env=context.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(after)
    process.send_signal(signal.SIGKILL)
    process.wait()


@case(2, "faults", "kill -9 during index update", "the index intact; the next update works")
def _kill_update(context: Context) -> str:
    for number in range(100):
        context.write(f"minitorch/gen/mod_{number}.py", f"def f{number}(x):\n    return x\n")
    _killed(context, ["index", "update", "-q", "--source", str(context.repo)], 0.8)
    answered(context.cli("status", source=True))
    return answered(context.cli("index", "update", "-q", source=True))


@case(2, "faults", "kill -9 during record merge", "no output, or a whole one")
def _kill_merge(context: Context) -> str:
    sys.path.insert(0, str(ROOT))
    from indexer.record import storage
    from indexer.record.model import Record, RecordedTest

    record = Record(meta={"commit": "abc"})
    for number in range(20000):
        record.tests.append(
            RecordedTest(f"test/t.py::test_{number}", "test/t.py", "passed", 0.1, [], "")
        )
    parts = [context.base / f"part{n}.rec" for n in range(2)]
    for part in parts:
        storage.write(record, part)
    out = context.base / "merged.rec"
    _killed(context, ["record", "merge", *map(str, parts), "-o", str(out)], 0.7)
    if out.exists():
        storage.read(out)  # whole, or RecordError
    leftovers = [p.name for p in context.base.glob(".merged.rec*")]
    return f"output {'whole' if out.exists() else 'absent'}; temporary files left: {leftovers or 'none'}"


@case(
    2,
    "faults",
    "kill -9 during snapshot import",
    "the store unchanged; the next command removes the staging",
)
def _kill_import(context: Context) -> str:
    exported_members(context)
    _killed(context, ["snapshot", "import", str(context.base / "good.tar.gz"), "--name", "k"], 0.6)
    answered(context.cli("snapshot", "list"))
    left = [p.name for p in (context.home / "cache" / "snapshots").glob(".staging-*")]
    if left:
        raise Failed(f"left: {left}")
    return "store unchanged; no staging left"


@case(2, "faults", "kill -9 during snapshot export", "no partial archive at -o")
def _kill_export(context: Context) -> str:
    answered(context.cli("snapshot", "save", "good", source=True))
    out = context.base / "killed.tar.gz"
    _killed(context, ["snapshot", "export", "good", "-o", str(out)], 0.5)
    if out.exists():
        with tarfile.open(out, "r:gz") as tar:
            tar.getmembers()
    return f"archive {'whole' if out.exists() else 'absent'}"


@case(2, "faults", "kill -9 during snapshot save", "no half snapshot listed")
def _kill_save(context: Context) -> str:
    _killed(context, ["snapshot", "save", "half", "--source", str(context.repo)], 0.6)
    listed = answered(context.cli("snapshot", "list"))
    shown = context.cli("snapshot", "load", "half", source=True)
    if shown.code not in (0, 1, 2) or "Traceback" in shown.text:
        raise Failed(shown.err[-200:])
    return listed


@case(2, "faults", "two selects at once", "both answer")
def _two_selects(context: Context) -> str:
    context.write(LINALG, (context.repo / LINALG).read_text() + "\nX = 1\n")
    args = [sys.executable, "-m", "pytest_torchtalk", "select", "--base", "HEAD", "--source", str(context.repo)]  # fmt: skip
    processes = [subprocess.Popen(args, env=context.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    results = [(p.wait(), p.stderr.read()) for p in processes]  # type: ignore[union-attr]
    if any(code != 0 or "Traceback" in err for code, err in results):
        raise Failed(str(results))
    return "both exit 0"


@case(
    2, "faults", "select while the index builds", "an answer (waits, or runs everything saying why)"
)
def _select_during_build(context: Context) -> str:
    builder = subprocess.Popen(
        [sys.executable, "-m", "pytest_torchtalk", "index", "build", "-q", "--force", "--source", str(context.repo)],
        env=context.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.3)
    result = context.cli("select", "--base", "HEAD", source=True)
    builder.wait()
    return answered(result)


@case(2, "faults", "two updates at once", "both finish")
def _two_updates(context: Context) -> str:
    context.write(LINALG, (context.repo / LINALG).read_text() + "\nX = 1\n")
    args = [sys.executable, "-m", "pytest_torchtalk", "index", "update", "-q", "--source", str(context.repo)]  # fmt: skip
    processes = [subprocess.Popen(args, env=context.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    results = [(p.wait(), p.stderr.read()) for p in processes]  # type: ignore[union-attr]
    if any(code != 0 or "Traceback" in err for code, err in results):
        raise Failed(str(results))
    return "both exit 0"


@case(2, "faults", "two imports of one name at once", "one installs it, the other says it exists")
def _two_imports(context: Context) -> str:
    exported_members(context)
    args = [sys.executable, "-m", "pytest_torchtalk", "snapshot", "import", str(context.base / "good.tar.gz"), "--name", "twice"]  # fmt: skip
    processes = [subprocess.Popen(args, env=context.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    results = sorted((p.wait(), p.stderr.read()) for p in processes)  # type: ignore[union-attr]
    if [code for code, _ in results] != [0, 2] or "exists" not in results[1][1]:
        raise Failed(str(results))
    return "exit 0 and exit 2 (exists)"


def _read_only(context: Context) -> Callable[[], None]:
    root_only("a read-only bind mount of the cache")
    cache = context.home / "cache"
    done = subprocess.run(
        ["mount", "--bind", str(cache), str(cache)], capture_output=True, check=False
    )
    if done.returncode != 0:
        raise Skipped(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(cache)], check=True)
    return lambda: subprocess.run(["umount", "-l", str(cache)], check=False)


for _name, _argv, _check in [
    ("select", ["select", "--base", "HEAD"], answered),
    ("status", ["status"], answered),
    ("index build", ["index", "build", "-q", "--force"], one_line_error),
    ("snapshot save", ["snapshot", "save", "ro"], one_line_error),
]:

    def _run(context: Context, argv=_argv, check=_check) -> str:
        release = _read_only(context)
        try:
            context.write(LINALG, (context.repo / LINALG).read_text() + "\nX = 1\n")
            return check(context.cli(*argv, source=True))
        finally:
            release()

    case(2, "faults", f"{_name} with a read-only cache", "an answer (reads) or one line (writes)")(
        _run
    )


def _clone(context: Context, *options: str) -> Context:
    clone = Context(context.base / "clone-base")
    clone.base.mkdir()
    clone.home = context.home
    clone.repo = context.base / "clone"
    subprocess.run(["git", "clone", "-q", *options, f"file://{context.repo}", str(clone.repo)], check=True, capture_output=True)  # fmt: skip
    return clone


@case(2, "git", "index build of a shallow clone (depth 1)", "built")
def _shallow(context: Context) -> str:
    _commit_change(context)
    return answered(_clone(context, "--depth", "1").cli("index", "build", "-q", source=True))


def _commit_change(context: Context) -> None:
    context.write(LINALG, (context.repo / LINALG).read_text() + "\nX = 1\n")
    _commit(context.repo, "change")


@case(
    2, "git", "select --base HEAD~1 in a shallow clone", "one-line error: the revision is not there"
)
def _shallow_base(context: Context) -> str:
    _commit_change(context)
    clone = _clone(context, "--depth", "1")
    clone.cli("index", "build", "-q", source=True)
    return one_line_error(clone.cli("select", "--base", "HEAD~1", source=True))


@case(2, "git", "select with the default base in a shallow clone", "an answer or one line")
def _shallow_default(context: Context) -> str:
    _commit_change(context)
    clone = _clone(context, "--depth", "1")
    clone.cli("index", "build", "-q", source=True)
    result = clone.cli("select", source=True)
    return answered(result) if result.code == 0 else one_line_error(result)


for _name, _argv in [
    ("index build", ["index", "build", "-q"]),
    ("select --base main", ["select", "--base", "main"]),
    ("snapshot save", ["snapshot", "save", "detached"]),
    ("status", ["status"]),
]:

    def _run(context: Context, argv=_argv) -> str:
        _commit_change(context)
        _git(context.repo, "checkout", "-q", "--detach", "HEAD~1")
        return answered(context.cli(*argv, source=True))

    case(2, "git", f"{_name} on a detached HEAD", "an answer")(_run)


INJECTIONS = ["--output=/tmp/torchtalk-injected", "-h", "HEAD; touch injected", "$(touch injected)", "HEAD\ntouch injected", "--exec=touch injected", "-c core.pager=touch"]  # fmt: skip
for _base in INJECTIONS:

    def _run(context: Context, base=_base) -> str:
        result = context.cli("select", "--base", base, source=True)
        if Path("/tmp/torchtalk-injected").exists() or (context.repo / "injected").exists() or (context.base / "injected").exists():  # fmt: skip
            raise Failed("git ran the injected option or command")
        return one_line_error(result)

    case(2, "git", f"select --base {_base!r}", "refused in one line; git runs nothing")(_run)


@case(2, "git", "a repository with no commit", "one-line error")
def _no_commit(context: Context) -> str:
    empty = context.base / "empty-repo"
    empty.mkdir()
    _git(empty, "init", "-q")
    (empty / "a.py").write_text("x = 1\n")
    context.repo = empty
    result = context.cli("select", source=True)
    return one_line_error(result) if result.code else answered(result)


@case(2, "git", "the source as a git worktree of the fixture", "built and selected")
def _worktree(context: Context) -> str:
    _git(context.repo, "worktree", "add", "-q", str(context.base / "wt"), "-b", "side")
    context.repo = context.base / "wt"
    answered(context.cli("index", "build", "-q", source=True))
    return answered(context.cli("select", "--base", "main", source=True))


ENCODINGS_2 = [
    ("a CRLF Python file", LINALG, lambda t: t.replace("\n", "\r\n")),
    ("a Python file with a BOM", LINALG, lambda t: "\ufeff" + t),
    ("a CRLF C++ file", KERNEL, lambda t: t.replace("\n", "\r\n")),
    ("a C++ file with a BOM", KERNEL, lambda t: "\ufeff" + t),
    ("a CRLF native_functions.yaml", "aten/src/ATen/native/native_functions.yaml", lambda t: t.replace("\n", "\r\n")),
    ("a derivatives.yaml with a BOM", "tools/autograd/derivatives.yaml", lambda t: "\ufeff" + t),
    ("a CR-only Python file", LINALG, lambda t: t.replace("\n", "\r")),
]  # fmt: skip
for _name, _path, _change in ENCODINGS_2:

    def _run(context: Context, path=_path, change=_change) -> str:
        context.write(path, change((context.repo / path).read_text()))
        shown = answered(context.cli("index", "build", "-q", source=True))
        answered(context.cli("select", "--base", "HEAD", source=True))
        return shown

    case(2, "trees", f"index build and select with {_name}", "indexed")(_run)


@case(2, "configuration", "a .torchtalk.toml with a BOM", "read, or one line")
def _toml_bom(context: Context) -> str:
    manifest = context.repo / ".torchtalk.toml"
    manifest.write_text("\ufeff" + manifest.read_text())
    result = context.cli("status", source=True)
    return answered(result) if result.code == 0 else one_line_error(result)


LINKS_2 = [
    ("a symlink loop", lambda r: (r / "minitorch" / "loop").symlink_to(r / "minitorch")),
    ("a symlink to a directory outside the tree", lambda r: (r / "minitorch" / "etc").symlink_to("/etc")),
    ("a dangling symlink", lambda r: (r / "minitorch" / "gone.py").symlink_to(r / "nowhere.py")),
    ("a symlink to a file in the tree", lambda r: (r / "minitorch" / "alias.py").symlink_to(r / LINALG)),
    ("a symlink to /dev/zero", lambda r: (r / "minitorch" / "zero.py").symlink_to("/dev/zero")),
    ("a FIFO in the tree", lambda r: os.mkfifo(r / "minitorch" / "pipe.py")),
]  # fmt: skip
for _name, _make in LINKS_2:

    def _run(context: Context, make=_make) -> str:
        make(context.repo)
        shown = answered(
            context.cli("index", "build", "-q", source=True),
        )
        answered(context.cli("select", "--base", "HEAD", source=True))
        return shown

    case(
        2,
        "trees",
        f"index build and select with {_name}",
        "indexed, nothing followed out of the tree, no hang",
    )(_run)


NAMES_2 = [
    ("a file name with spaces", "minitorch/with space.py"),
    ("a file name in other scripts", "minitorch/数学.py"),
    ("a file name starting with '-'", "minitorch/-x.py"),
    ("a 255-byte file name", "minitorch/" + "n" * 252 + ".py"),
    ("a directory 100 levels deep", "minitorch/" + "/".join(["d"] * 100) + "/m.py"),
    ("a test file name with a quote", "test/test_it's.py"),
]  # fmt: skip
for _name, _path in NAMES_2:

    def _run(context: Context, path=_path) -> str:
        context.write(path, "def f():\n    return 1\n")
        answered(context.cli("index", "build", "-q", source=True))
        result = context.cli("select", "--base", "HEAD", "--json", source=True)
        answered(result)
        json.loads(result.out)
        return "built; select --json is JSON"

    case(2, "trees", f"index build and select --json with {_name}", "indexed, valid JSON")(_run)


@case(2, "trees", "a 40 MB C++ file", "over the size limit: reported, build not slowed")
def _forty_mb(context: Context) -> str:
    context.write("aten/src/ATen/native/Huge.cpp", "int f() { return 1; }\n" * 1_900_000)
    started = time.monotonic()
    shown = answered(context.cli("index", "build", "-q", source=True))
    if time.monotonic() - started > 60:
        raise Failed(f"{time.monotonic() - started:.0f} s")
    return shown


@case(2, "trees", "10,000 empty files", "indexed")
def _many_files(context: Context) -> str:
    many = context.repo / "minitorch" / "many"
    many.mkdir()
    for number in range(10_000):
        (many / f"m{number}.py").touch()
    return answered(context.cli("index", "build", "-q", source=True))


ERRORS_2: list[tuple[str, list[str], dict[str, str], tuple[str, ...]]] = [
    ("record show with no record", ["record", "show", "--source", "{repo}", "x"], {}, ()),
    ("record stats with no record", ["record", "stats", "--source", "{repo}"], {}, ()),
    ("snapshot load --nearest with none", ["snapshot", "load", "--nearest", "--source", "{repo}"], {}, ()),
    ("audit --replay of a missing report", ["audit", "--source", "{repo}", "--replay", "/nonexistent.json"], {}, ()),
    ("audit --replay of a file that is not JSON", ["audit", "--source", "{repo}", "--replay", "{repo}/README.md"], {}, ()),
    ("audit --record of a missing record", ["audit", "--source", "{repo}", "--build", "true", "--test", "true", "--record", "/nonexistent.rec"], {}, ()),
    ("TORCHTALK_SNAPSHOT_MAX_BYTES=abc", ["snapshot", "import", "{base}/good.tar.gz", "--name", "x"], {"TORCHTALK_SNAPSHOT_MAX_BYTES": "abc"}, ("TORCHTALK_SNAPSHOT_MAX_BYTES",)),
    ("TORCHTALK_CONFIG_DIR naming a file", ["status", "--source", "{repo}"], {"TORCHTALK_CONFIG_DIR": "{repo}/README.md"}, ("is not a directory",)),
    ("snapshot diff of unknown names", ["snapshot", "diff", "nosuch", "other"], {}, ("no snapshot named",)),
    ("index update of a tree with no index", ["index", "update", "--source", "{outside}"], {}, ()),
    ("select --source of a subdirectory of the tree", ["select", "--source", "{repo}/minitorch", "--base", "HEAD"], {}, ()),
]  # fmt: skip

for _name, _argv, _env, _needles in ERRORS_2:

    def _run(context: Context, argv=_argv, env=_env, needles=_needles) -> str:
        exported_members(context)
        values = {"repo": str(context.repo), "base": str(context.base)}
        env = {k: v.format(**values) for k, v in env.items()}
        result = context.cli(*_format(argv, context), env=env)
        if result.code == 0 and not needles:
            return answered(result)
        return one_line_error(result, *needles)

    case(2, "command line", _name, "one-line error, or an answer")(_run)


PLUGIN_2: list[tuple[str, list[str], Callable[[Result], str]]] = [
    ("pytest --torchtalk-affected with no index", ["--torchtalk-affected"], lambda r: answered(r, "run everything")),
    ("pytest --torchtalk-base of an unknown revision", ["--torchtalk-affected", "--torchtalk-base", "nosuch"], lambda r: _plugin_error(r, "nosuch")),
    ("pytest --torchtalk-affected -n 2 (xdist)", ["--torchtalk-affected", "-n", "2"], lambda r: answered(r)),
    ("pytest --torchtalk-report in a directory that does not exist", ["--torchtalk-affected", "--torchtalk-report", "new/dir/report.json"], lambda r: answered(r)),
]  # fmt: skip


def _plugin_error(result: Result, needle: str) -> str:
    lines = [line for line in result.err.splitlines() if line.strip()]
    if (
        result.code != 4
        or "INTERNALERROR" in result.text
        or len(lines) != 1
        or needle not in lines[0]
    ):
        raise Failed(f"exit {result.code}: {result.err[-200:]!r}")
    return f"exit 4: {lines[0][:120]}"


for _name, _args, _check in PLUGIN_2:

    def _run(context: Context, args=_args, check=_check) -> str:
        if "no index" in _name_of(args):
            shutil.rmtree(context.home / "cache" / "indexes")
        return check(context.pytest(*args))

    case(2, "pytest", _name, "an answer, or one line and exit 4")(_run)


def _name_of(args: list[str]) -> str:
    return "no index" if args == ["--torchtalk-affected"] else ""


@case(
    2,
    "mcp",
    "MCP over stdio: a message nested 1,000,000 deep",
    "an error answer; the session goes on",
)
def _mcp_deep(context: Context) -> str:
    answers = hostile_answers(context)
    if len(MCP_2) + 1 not in answers:
        raise Failed("the server did not go on")
    error = (answers.get(None) or {}).get("error")
    return f"JSON-RPC error {error['code']}" if error else "no answer (the line is dropped)"


@case(2, "command line", "status --json", "JSON")
def _status_json(context: Context) -> str:
    result = context.cli("status", "--json", source=True)
    json.loads(result.out)
    return answered(result)


@case(
    2,
    "command line",
    "init with a relative path, then status from elsewhere",
    "the tree remembered",
)
def _init_relative(context: Context) -> str:
    answered(context.cli("init", "--source", "minitorch", "--set-default", cwd=context.base))
    return answered(context.cli("status", cwd=Path("/")))


@case(2, "command line", "snapshot list of an empty store", "an answer", indexed=False)
def _empty_list(context: Context) -> str:
    return answered(context.cli("snapshot", "list"))


@case(2, "command line", "index build twice with no change", "the second quick")
def _build_twice(context: Context) -> str:
    started = time.monotonic()
    shown = answered(context.cli("index", "build", "-q", source=True))
    return f"{shown} ({time.monotonic() - started:.1f} s)"


@case(2, "command line", "select --json with a deleted test file", "JSON; the file not selected")
def _deleted_test(context: Context) -> str:
    (context.repo / "test" / "test_linalg.py").unlink()
    result = context.cli("select", "--base", "HEAD", "--json", source=True)
    answered(result)
    selected = [s["path"] for s in json.loads(result.out)["selected"]]
    if "test/test_linalg.py" in selected:
        raise Failed("a deleted file is selected")
    return f"{len(selected)} files selected"


# --- running it ------------------------------------------------------------------------------------


def run_case(item: Case, scratch: Path) -> Outcome:
    base = Path(tempfile.mkdtemp(prefix="case-", dir=scratch))
    started = time.monotonic()
    try:
        context = fresh(base, built=item.indexed)
        observed, status = item.run(context), "held"
    except Skipped as exc:
        observed, status = str(exc), "skipped"
    except Failed as exc:
        observed, status = str(exc), "did not hold"
    except Exception as exc:  # the bench's own failure is reported, not hidden
        observed, status = f"{type(exc).__name__}: {exc}"[:300], "did not hold"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    observed = observed.replace(f"{base}/", "").replace("\n", " ")  # scratch paths, shortened
    outcome = Outcome(item, status, observed[:200], time.monotonic() - started)
    print(f"[pass {item.number}] {status:12} {outcome.seconds:5.1f}s {item.area}: {item.name}: "
          f"{outcome.observed}", flush=True)  # fmt: skip
    return outcome


def run_tests(jobs: int, scratch: Path) -> list[tuple[str, str, str]]:
    """The cases kept as tests: (test id, outcome, file)."""
    xml = scratch / "junit.xml"
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_reliability*.py"))
    subprocess.run(
        [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:randomly", f"--junitxml={xml}",
         *(["-n", str(jobs), "--dist", "loadgroup"] if jobs > 1 else [])],
        cwd=ROOT, check=False, capture_output=True,
    )  # fmt: skip
    found = []
    for test in ET.parse(xml).getroot().iter("testcase"):
        outcome = "held"
        if test.find("failure") is not None or test.find("error") is not None:
            outcome = "did not hold"
        elif (skipped := test.find("skipped")) is not None:
            outcome = f"skipped: {skipped.get('message', '')[:120]}"
        found.append((test.get("name", ""), outcome, test.get("classname", "").rsplit(".", 1)[-1]))
    return found


def markdown(outcomes: list[Outcome]) -> str:
    lines = []
    for number in (1, 2):
        lines += [f"### Pass {number}: the catalogue (`bench/reliability_pass.py`)", "",
                  "| # | area | case | expected | outcome | observed |",
                  "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        ours = sorted((o for o in outcomes if o.case.number == number), key=lambda o: o.case.area)
        for index, outcome in enumerate(ours):
            observed = outcome.observed.replace("|", "\\|").replace("`", "'")
            lines.append(
                f"| {number}.{index + 1} | {outcome.case.area} | {outcome.case.name.replace('|', '/')} | "
                f"{outcome.case.expected} | {outcome.status} | {observed} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="write the catalogue's table here")
    parser.add_argument("--no-tests", action="store_true", help="only the catalogue")
    parser.add_argument("-k", dest="keyword", help="only cases whose name holds this")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    cases = [c for c in CASES if not args.keyword or args.keyword in c.name]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torchtalk-reliability-") as scratch:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(lambda c: run_case(c, Path(scratch)), cases))
        tests = [] if args.no_tests else run_tests(args.jobs, Path(scratch))
    for name, outcome, module in tests:
        print(f"[test] {outcome[:12]:12} {module}::{name}")
    counts: dict[str, int] = {}
    for status in [o.status for o in outcomes] + [t[1].split(":")[0] for t in tests]:
        counts[status] = counts.get(status, 0) + 1
    print(f"\n{len(outcomes)} catalogue cases and {len(tests)} kept as tests in "
          f"{time.monotonic() - started:.0f} s: {counts}")  # fmt: skip
    if args.markdown:
        args.markdown.write_text(markdown(outcomes))
    return 0 if not counts.get("did not hold") else 1


if __name__ == "__main__":
    sys.exit(main())
