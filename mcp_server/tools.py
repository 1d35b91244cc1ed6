"""The seven MCP tools: thin functions over ``indexer/query``, each read-only.

Each tool takes the current index from :class:`ServerState`, calls one query function,
adds a note when a component it needs is still building, and returns the answer twice:
compact text for the model's context and the same answer as structured content. Bad
arguments and unusable states are tool errors (``is_error``) with a one-line message,
never a crash of the server.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Annotated, Any, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from indexer.errors import TorchTalkError
from indexer.precise.summary import describe
from indexer.query.answer import Answer, Item
from indexer.query.index import Index
from indexer.query.key_coverage import unread_uses
from indexer.query.recorded import record_line, record_status
from mcp_server.state import COMPONENT_TEXT, COMPONENTS, NotReady, ServerState

# --- the shape of every answer ---------------------------------------------------------


class ItemOut(BaseModel):
    label: str
    evidence: str | None = None
    detail: str = ""
    depth: int = 0
    data: dict[str, Any] = Field(default_factory=dict)


class AnswerOut(BaseModel):
    """indexer.query.answer.Answer as JSON: what every tool returns as structured content."""

    tool: str
    query: str
    found: bool = True
    title: str = ""
    items: list[ItemOut] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    total: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)  # lines the text puts first: stale
    budget: int | None = None  # characters the text kept to; items holds every line
    more: str = ""  # how to ask for what the text left out


ToolResult = Annotated[CallToolResult, AnswerOut]


def reply(answer: Answer) -> CallToolResult:
    structured = json.loads(answer.to_json())
    return CallToolResult(
        content=[TextContent(type="text", text=answer.to_text())], structured_content=structured
    )


# --- argument types (their constraints become the tools' JSON schemas) -----------------

NAME_CHARS = 500  # the longest C++ or Python name an argument may be
FUNCS_MAX = 200  # changed functions one ``affected`` call may name
Lines = Annotated[
    int | None,
    Field(ge=1, le=2000, description="lines of text to show (default: about 2,000 characters)"),
]


def _lines(answer: Answer, limit: int | None) -> Answer:
    """The answer with ``limit`` lines of text instead of its character budget."""
    if limit is None:
        return answer
    answer.budget = None
    return answer.truncate(limit)


Name = Annotated[str, Field(min_length=1, max_length=NAME_CHARS)]
Focus = Annotated[str | None, Field(max_length=300)]

READ_ONLY = dict(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    needs: tuple[str, ...]  # components the answer depends on


SPECS = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "get_status",
            "Index status",
            "Is the TorchTalk index ready? Shows the source tree and harness, the readiness "
            "of each part (op registry, bindings, Python, tests, C++ call graph) with build "
            "progress, and what the index holds. Call it first, and whenever another tool "
            "says its answer is incomplete.",
            (),
        ),
        ToolSpec(
            "trace",
            "Trace an op across languages",
            "Follow one PyTorch op or Python API from Python to its kernels: Python name -> "
            "op schema (native_functions.yaml) -> dispatch per backend -> C++/CUDA "
            "implementation, each hop with file:line. Use it for 'how does torch.X work' or "
            "'where is X implemented'. func accepts torch.add, aten::add.Tensor, add or a C++ "
            "name; focus narrows the answer to one part (python, dispatch, stubs, kernels, "
            "cuda, backward) or one dispatch key (CPU, CUDA, Autocast...: where the op is "
            "registered for it, or why nothing is).",
            ("yaml", "bindings", "cpp"),
        ),
        ToolSpec(
            "search",
            "Search registrations",
            "Find ops, bindings and kernels by name or part of a name. mode 'bindings' lists "
            "op and binding registrations with the C++ they reach; mode 'kernels' lists "
            "CUDA kernels and where they are launched. backend filters by dispatch key "
            "(CPU, CUDA, ...). Use it when you do not know the exact name to trace.",
            ("yaml", "bindings", "cpp"),
        ),
        ToolSpec(
            "graph",
            "Call graph",
            "Walk the C++/CUDA call graph from a function, kernel, op or binding. mode "
            "'callers': who calls it (inbound); 'calls': what it calls (outbound); 'impact': "
            "every transitive caller up to depth levels (default 3), i.e. what a change to "
            "it can reach. walk_python=true continues from ops/bindings into the Python code "
            "and tests that use them. Unresolved calls with the same name are listed as "
            "possible callers at the first level (every level with fuzzy_all_levels). focus "
            "lists only one kind (tests, python, cpp, cuda, ops, bindings, or a node kind) "
            "or files under a path prefix. Each line has the call site as file:line.",
            ("cpp", "bindings"),
        ),
        ToolSpec(
            "modules",
            "Python modules and classes",
            "Python side of the framework. mode 'trace': a class, function or module (where "
            "it is defined, methods, bases, what it calls into; focus full, methods, bases or "
            "calls); mode 'list': browse a package or category (for example 'nn').",
            ("python",),
        ),
        ToolSpec(
            "tests",
            "Find tests",
            "Find tests. mode 'find': test functions, classes and files matching query by "
            "name or by what they cover (focus: functions, classes or files); 'utils': test "
            "utilities and fixtures; 'file_info': one test file's classes, tests and device "
            "instantiation. limit caps the listing.",
            ("tests", "python"),
        ),
        ToolSpec(
            "affected",
            "Tests a change can break",
            "Which tests can a change to these functions break? funcs: changed functions "
            "(C++, CUDA or Python qualified names; a list or a comma-separated string). "
            "Answers the impacted test files ranked as 'tests' ranks tests: files whose tests "
            "name the changed op or function first, then OpInfo tests whose @ops list holds "
            "it, then files further away, each with the chain of evidence that links it to "
            "the change; a central function reaches most of the suite, and then the answer "
            "lists the nearest 50 (limit: more or fewer) and says 'at least'. Needs the complete "
            "index: until the C++ call graph is built it answers an error rather than an "
            "incomplete selection.",
            COMPONENTS,
        ),
    )
}
TOOL_NAMES = tuple(SPECS)


def _query(module: str, function: str, tool: str) -> Callable[..., Answer]:
    """The query function behind a tool, imported on first use (keeps start-up fast):
    ``module`` of ``indexer.query``, or a dotted module path."""
    qualified = module if "." in module else f"indexer.query.{module}"
    try:
        found = getattr(import_module(qualified), function, None)
    except ModuleNotFoundError as exc:
        if exc.name != qualified:
            raise
        found = None
    if found is None:
        raise ToolError(
            f"{tool} is not available in this build ({qualified}.{function} is not installed)"
        )
    return found


class Tools:
    """The tool functions, bound to the state they answer from."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def _index(self) -> Index:
        try:
            return self.state.index()
        except NotReady as exc:
            raise ToolError(str(exc)) from None
        except TorchTalkError as exc:
            raise ToolError(str(exc)) from None

    def _answer(self, tool: str, call: Callable[[Index], Answer]) -> CallToolResult:
        with self.state.serving():
            return self._answer_now(tool, call)

    def _answer_now(self, tool: str, call: Callable[[Index], Answer]) -> CallToolResult:
        spec = SPECS[tool]
        index = self._index()
        self.state.check_before_answering()
        try:
            answer = call(index)
        except ToolError:
            raise
        except (ValueError, TorchTalkError) as exc:
            raise ToolError(f"{tool}: {exc}") from None
        except Exception as exc:  # a bug in a query must reach the agent as one line
            traceback.print_exc(file=sys.stderr)
            raise ToolError(f"{tool} failed: {type(exc).__name__}: {exc}") from None
        note = self.state.incomplete_note(spec.needs)
        if note:
            answer.notes.insert(0, note)
            answer.data = {**answer.data, "incomplete": self.state.missing(spec.needs)}
        stale = self.state.stale_note()
        if stale:  # the first line: an agent acting on a moved line must know first
            answer.warnings.insert(0, f"STALE INDEX: {stale}")
            answer.data = {**answer.data, "stale": True}
        return reply(answer)

    # --- the seven tools ----------------------------------------------------------------

    def get_status(self) -> ToolResult:
        with self.state.serving():
            return self._status()

    def _status(self) -> CallToolResult:
        snap = self.state.snapshot()
        index = None
        unreadable = None
        try:
            index = self.state.index(wait=0)
        except NotReady:
            pass  # still building: the snapshot says how far
        except TorchTalkError as exc:
            unreadable = str(exc)
        if index is not None:
            self.state.check_before_answering()
        ready = unreadable is None and all(v == "ready" for v in snap["components"].values())
        stale = self.state.stale_note()  # read once: the headline and the note agree
        if unreadable:
            headline = f"the index cannot be read: {unreadable}"
        elif ready:
            headline = "ready" if stale is None else "stale"
        elif snap["error"]:
            headline = f"build failed: {snap['error']}"
        else:
            headline = f"building ({snap['progress_text'] or 'starting'})"
        answer = Answer(
            "get_status",
            "",
            title=f"TorchTalk index of {snap['source']} ({snap['harness']}): {headline}",
        )
        for name in COMPONENTS:
            state = snap["components"][name]
            answer.items.append(Item(name, detail=state, data={"what": COMPONENT_TEXT[name]}))
        for phase in snap["phases"]:
            answer.items.append(
                Item(f"{phase['build']} build: {phase['step']}", detail=f"at {phase['at_s']}s")
            )
        index_info: dict[str, Any] = {}
        if index is not None:
            meta = index.meta
            counts = index.meta_json("counts", {})
            index_info = {
                "db_path": str(index.db_path),
                "build_phase": meta.get("build_phase", "full"),
                "built_at": meta.get("built_at"),
                "git_commit": meta.get("git_commit") or None,
                "files": int(meta.get("files", 0) or 0),
                "file_errors": int(meta.get("file_errors", 0) or 0),
                "counts": counts,
                "timings": index.meta_json("timings", {}),
            }
            nodes = counts.get("nodes", {})
            edges = counts.get("edges", {})
            answer.items.append(
                Item(
                    f"{index_info['files']} files, {sum(nodes.values())} nodes, "
                    f"{sum(edges.values())} edges",
                    detail=f"{index_info['build_phase']} index built {index_info['built_at']}",
                    data={"nodes": nodes, "edges": edges},
                )
            )
            problems = index.meta_json("tree_problems", [])
            if problems:
                shown = ", ".join(f"{p['path']} ({p['problem']})" for p in problems[:3])
                answer.notes.append(
                    f"{len(problems)} paths of the tree could not be indexed: {shown}"
                    + (" ..." if len(problems) > 3 else "")
                    + "; see 'torchtalk status'"
                )
            unread = unread_uses(index)
            if unread:  # registrations the index may lack: said, never a silent gap
                first = unread[0]
                answer.notes.append(
                    f"{len(unread)} use(s) in registration blocks could not be read (first:"
                    f" {first['path']}:{first['line']} {first['use']}: {first['why']});"
                    " trace with a dispatch key focus names them"
                )
                index_info["unread_registrations"] = unread
            if index_info["build_phase"] == "full":
                precise = index.meta_json("precise")
                index_info["precise"] = precise
                answer.items.append(Item("precise C++ mode", detail=describe(precise)))
            head = snap.get("head_commit")
            if head and index_info["git_commit"] and head != index_info["git_commit"]:
                answer.notes.append(
                    f"the tree is at commit {head[:12]} but the index was built at "
                    f"{index_info['git_commit'][:12]}; run 'torchtalk index build' to refresh"
                )
        if snap["warm_failed"]:
            answer.notes.append(
                "not warmed: loading " + "; ".join(snap["warm_failed"]) + " failed at idle;"
                " answers read SQLite for it (slower, same content)"
            )
        record = record_status(self.state.full_path)
        if record is not None:
            answer.items.append(Item(record_line(record), data={"record": record}))
        if stale:
            answer.warnings.insert(0, f"STALE INDEX: {stale}")
        if not ready and not snap["error"]:
            answer.notes.append(
                "tools answer now from what is ready and say when a part they need is missing"
            )
        answer.data = {
            **snap, "ready": ready, "index": index_info, "stale": stale is not None,
            "record": record,
        }  # fmt: skip
        return reply(answer)

    def trace(
        self,
        func: Annotated[Name, Field(description="torch.add, aten::add.Tensor, add, or a C++ name")],
        focus: Annotated[
            Focus, Field(description="python, dispatch, stubs, kernels, cuda, backward, or a key")
        ] = None,
        limit: Lines = None,
    ) -> ToolResult:
        run = _query("trace", "trace", "trace")
        return self._answer("trace", lambda index: _lines(run(index, func, focus=focus), limit))

    def search(
        self,
        query: Annotated[Name, Field(description="a name or part of one")],
        mode: Literal["bindings", "kernels"] = "bindings",
        backend: Annotated[
            str | None, Field(max_length=100, description="dispatch key: CPU, CUDA, ...")
        ] = None,
        limit: Lines = None,
    ) -> ToolResult:
        run = _query("search", "search", "search")
        return self._answer(
            "search",
            lambda index: _lines(run(index, query, mode=mode, backend=backend), limit),
        )

    def graph(
        self,
        func: Annotated[Name, Field(description="function, kernel, op or binding name")],
        mode: Literal["callers", "calls", "impact"] = "callers",
        depth: Annotated[
            int | None, Field(ge=1, le=10, description="levels (callers/calls 1, impact 3)")
        ] = None,
        fuzzy_all_levels: bool = False,
        walk_python: bool = False,
        focus: Annotated[Focus, Field(description="kind or path prefix to list")] = None,
    ) -> ToolResult:
        from indexer.query.graph import graph

        return self._answer(
            "graph",
            lambda index: graph(
                index,
                func,
                mode=mode,
                depth=depth,
                fuzzy_all_levels=fuzzy_all_levels,
                walk_python=walk_python,
                focus=focus,
            ),
        )

    def modules(
        self,
        name: Annotated[Name, Field(description="a module, class or function, or a category")],
        mode: Literal["trace", "list"] = "trace",
        focus: Annotated[Focus, Field(description="full, methods, bases or calls")] = None,
    ) -> ToolResult:
        run = _query("modules", "modules", "modules")
        return self._answer("modules", lambda index: run(index, name, mode=mode, focus=focus))

    def tests(
        self,
        query: Annotated[str | None, Field(max_length=500)] = None,
        mode: Literal["find", "utils", "file_info"] = "find",
        limit: Annotated[
            int | None, Field(ge=1, le=500, description="items to list (default: one screen)")
        ] = None,
        focus: Annotated[Focus, Field(description="functions, classes or files")] = None,
    ) -> ToolResult:
        run = _query("tests", "tests", "tests")
        return self._answer(
            "tests", lambda index: run(index, query, mode=mode, limit=limit, focus=focus)
        )

    def affected(
        self,
        funcs: Annotated[
            Annotated[list[Name], Field(max_length=FUNCS_MAX)]
            | Annotated[str, Field(max_length=FUNCS_MAX * (NAME_CHARS + 1))],
            Field(description="changed functions: a list, or one comma-separated string"),
        ],
        depth: Annotated[int | None, Field(ge=1, le=20)] = None,
        limit: Annotated[
            int | None,
            Field(ge=1, le=500, description="test files to list (default: one screen of 50)"),
        ] = None,
    ) -> ToolResult:
        names = [part.strip() for part in funcs.split(",")] if isinstance(funcs, str) else funcs
        names = [name.strip() for name in names if name and name.strip()]
        if not names:
            raise ToolError("affected: funcs must name at least one changed function")
        if len(names) > FUNCS_MAX:
            raise ToolError(f"affected: funcs names {len(names)} functions; at most {FUNCS_MAX}")
        too_long = [name for name in names if len(name) > NAME_CHARS]
        if too_long:
            raise ToolError(
                f"affected: a name in funcs has {len(too_long[0])} characters; at most "
                f"{NAME_CHARS} ({too_long[0][:60]!r}...)"
            )
        missing = self.state.missing(("cpp",))
        if missing:
            note = self.state.incomplete_note(SPECS["affected"].needs)
            raise ToolError(f"affected needs the complete index; {note}")
        run = _query("indexer.answers.affected", "affected", "affected")
        return self._answer("affected", lambda index: run(index, names, depth=depth, limit=limit))

    def functions(self) -> list[tuple[ToolSpec, Callable[..., Any]]]:
        return [(SPECS[name], getattr(self, name)) for name in TOOL_NAMES]


def annotations(spec: ToolSpec) -> ToolAnnotations:
    return ToolAnnotations(title=spec.title, **READ_ONLY)
