"""Observing one process: which ops, Python functions and bindings ran since the last look.

The observer turns what the compiled recorder saw (operator names, code objects, C
functions) into record names (``indexer.record.model``), keeping only what belongs to the
indexed tree: functions whose file is in the tree, or in the installed copy of one of the
tree's packages (PyTorch's tests run against a wheel: ``site-packages/torch/nn/functional.py``
is the tree's ``torch/nn/functional.py``), and bindings of those packages' compiled modules.

What a module body runs while it is imported (its own statements and the functions they
call) is kept apart, as that module's import work (``take_imports``): it happens once per
process, in whichever test or collection first imported the module, and is the same for
every importer. Kept with the segment that happened to import it, it would make that
segment look as if it ran the work itself, and the others as if they did not.

Its one promise is honesty: when something a test did disturbed the observation (a test
that replaced the profile function or, on Python 3.12+, turned off the recorder's
sys.monitoring events, or removed every RecordFunction callback), the segment says so, and
the test is then unrecorded rather than recorded as doing less. How Python is observed is
chosen in ``python_observation.py``.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, ModuleType

from indexer.record import children, native, python_observation
from indexer.record.qualnames import qualnames_by_line

# RecordFunction names the autograd engine gives the nodes it evaluates; the node itself
# is recorded (as a backward name) from its own RecordFunction.
_ENGINE_PREFIX = "autograd::engine::evaluate_function: "
CANARY_OP = "aten::empty.memory_format"  # what torch.empty(0) dispatches
STOOD_ASIDE = children.STOOD_ASIDE  # children.py names it too, for a live child's Python
DEVICES_HOW = (
    "allocations: the CPU allocator (counted), the CUDA caching allocator's count, "
    "CUDA kernels launched"
)


@dataclass
class Observed:
    names: set[tuple[str, str]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)  # why the observation is incomplete

    def add(self, other: Observed) -> None:
        self.names |= other.names
        self.problems.extend(other.problems)


def tree_packages(root: Path) -> dict[str, str]:
    """Top-level Python packages of the tree -> the directory (absolute, with a trailing
    slash) their modules are imported from when it is not the tree itself."""
    packages: dict[str, str] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return packages
    for entry in entries:
        if not (entry / "__init__.py").is_file():
            continue
        try:
            spec = importlib.util.find_spec(entry.name)
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec else []
        packages[entry.name] = str(Path(locations[0]).resolve()) + "/" if locations else ""
    return packages


class Observer:
    """The process's observation of ops and Python; one per process (the compiled
    recorder's state is process-wide)."""

    def __init__(self, root: Path, follow_children: bool = True) -> None:
        self.root = root.resolve()
        self._prefix = str(self.root) + "/"
        self.packages = tree_packages(self.root)
        # absolute directory of an installed tree package -> its path in the tree
        self._installed = {
            where: f"{name}/" for name, where in self.packages.items()
            if where and not where.startswith(self._prefix)
        }  # fmt: skip
        # id(code) -> (code, its record name or None), for module bodies (the drain's
        # names are kept by the compiled side). By identity: a code object hashes its
        # constants, and code torch.compile generates may hold a dict among them.
        self._code_names: dict[int, tuple[CodeType, tuple[str, str] | None]] = {}
        self._relative_of: dict[str, str | None] = {}  # a code object's file -> _relative
        # 3.10 only (no co_qualname): file -> (first line, name) -> qualified name
        self._source_qualnames: dict[str, dict[tuple[int, str], str | None]] = {}
        self._lib = native.load()  # NativeUnavailable when it cannot be built or loaded
        self._lib.tt_forget_code_names()  # named for another observer's tree
        # How Python is observed: sys.monitoring or the profile function (chosen there).
        self._python = python_observation.choose(self._lib)
        self.python_how = self._python.how
        if self._lib.tt_start_ops() != 0:
            raise native.NativeUnavailable("RecordFunction refused the recorder's callback")
        # How the device types a segment used are seen, or why they are not.
        self.devices_how = DEVICES_HOW
        if self._lib.tt_start_devices() != 0:
            self.devices_how = "off: another allocator of higher priority holds the CPU slot"
        self._cuda_allocations = 0  # the CUDA caching allocator's count at the last close
        # Whose work is running, per thread: None for the segment being recorded, else the
        # tree module whose body is running (innermost last).
        self._owners = threading.local()
        self._pending = Observed()  # the segment's work, set aside while a body ran
        self._imports: dict[str, Observed] = {}  # module path -> its import work
        self._lib.tt_set_module_callback(self._module_boundary)
        self._python.start(self._observe_new_thread)
        self._torch = sys.modules.get("torch")
        self._guard_profilers()
        # The Python processes a test starts report what they ran (children.py).
        self.children = children.Follower(self.root, self) if follow_children else None

    def _observe_new_thread(self, frame, event, arg) -> None:
        # Called once in each new thread (the profile backend's threading.setprofile).
        self._python.observe_thread()

    @property
    def by_profile_function(self) -> bool:
        """Whether Python is observed through the profile function (children.py reads it:
        a test's ``sys.setprofile`` disturbs only that way)."""
        return self._python.by_profile_function

    @property
    def _aside(self) -> bool:
        """Stood aside for a profiler that traces Python (children.py reads it)."""
        return self._python.aside

    def stop(self) -> None:
        if self.children is not None:
            self.children.stop()
        self._python.stop()
        self._lib.tt_set_module_callback(None)

    def close(self) -> Observed:
        """What the segment being recorded ran since the previous close (import work
        excepted: ``take_imports``), with what disturbed the observation."""
        observed, self._pending = self._pending, Observed()
        with native.quiet():
            observed.add(self._drain())
        # Not quiet: torch's CUDA calls are observed as before (and land in the gap).
        if self._cuda_allocated_since():
            observed.names.add(("device", "cuda"))
        if self.children is not None:
            with native.quiet():
                names, problems, imports = self.children.close()
            observed.names |= names
            observed.problems.extend(problems)
            for path, executed in imports.items():
                self._imports.setdefault(path, Observed()).names |= executed
        return observed

    def _cuda_allocated_since(self) -> bool:
        """Whether CUDA memory was allocated since the previous close. Read at closes
        only: the count lives in Python (``torch.cuda.memory_stats``), and imports would
        otherwise pay for it at every module boundary."""
        cuda = getattr(self._torch or sys.modules.get("torch"), "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return False
        count = sum(
            cuda.memory_stats(device).get("allocation.all.allocated", 0)
            for device in range(cuda.device_count())
        )
        allocated, self._cuda_allocations = count != self._cuda_allocations, count
        return allocated

    def unobserved_ops(self) -> list[str]:
        """The ops this torch's RecordFunction never reports: a record cannot show who
        runs them."""
        return sorted(self._lib.tt_unobserved_ops())

    def take_imports(self) -> dict[str, Observed]:
        """Module path -> what its body ran while imported, since the previous take: the
        modules it imported (run first there, or named in its namespace), the functions
        it called, ops."""
        imports, self._imports = self._imports, {}
        return imports

    def _module_boundary(self, code: CodeType, entering: int, namespace) -> None:
        # Called by the compiled profile function when a module body starts or ends.
        owners = getattr(self._owners, "stack", None)
        if owners is None:
            owners = self._owners.stack = [None]
        name = self._name_of(code)
        path = name[1] if name is not None and name[0] == "module" else None
        if entering:
            owner = path if path is not None else owners[-1]
            if owner != owners[-1]:
                self._give(owners[-1], self._drain())
            owners.append(owner)
            return
        if len(owners) == 1:  # an end whose start came before the observation
            return
        owner = owners.pop()
        if owner != owners[-1]:
            self._give(owner, self._drain())
        if path is not None and isinstance(namespace, dict):
            self._give(path, Observed(self.imported_by(namespace)))

    def _give(self, owner: str | None, observed: Observed) -> None:
        # What disturbed the observation stays with the segment being recorded: it is
        # the one whose tests can no longer be trusted to be recorded whole.
        self._pending.problems.extend(observed.problems)
        if owner is None:
            self._pending.names |= observed.names
        else:
            self._imports.setdefault(owner, Observed()).names |= observed.names

    def _drain(self) -> Observed:
        """Everything the recorder saw since the last drain, whoever ran it."""
        with children.QUIET:  # a signal's report waits until the drain is whole
            return self._drain_now()

    def _drain_now(self) -> Observed:
        observed = Observed()
        ops = self._lib.tt_close_epoch()
        for text in ops:
            kind, name = text[0], text[1:]
            if kind == "b":
                observed.names.add(("backward", name))
            elif kind == "d":
                observed.names.add(("device", name))
            elif not name.startswith(_ENGINE_PREFIX):
                observed.names.add(("op", name))
        # Code objects are named once per process: the compiled side keeps their names.
        named, unnamed = self._lib.tt_drain_codes()
        observed.names.update(named)
        if unnamed:
            names = [self._name_of_code(code) for code in unnamed]
            self._lib.tt_name_codes(unnamed, names)
            observed.names.update(name for name in names if name is not None)
        for function in self._lib.tt_drain_cfuncs():
            binding = self._binding_name(function)
            if binding:
                observed.names.add(("binding", binding))
        if self._lib.tt_overflowed():
            observed.problems.append("more distinct op names than the recorder holds")
        observed.problems.extend(self._python.check())
        return observed

    def _guard_profilers(self) -> None:
        """Stand aside when a test starts a torch profiler that traces Python: its tracer
        installs its own profile function on every thread, and one already there breaks
        its trace (docs/recording.md#profilers). The test is then unrecorded."""
        try:
            import torch._C._autograd as autograd
            import torch.autograd.profiler as profiler
        except ImportError:
            return
        enable = profiler._enable_profiler
        if getattr(enable, "_torchtalk_guard", False):
            return

        def _enable_profiler(*args, **kwargs):
            # The caller is the profile object; without one, assume it traces Python.
            caller = sys._getframe(1).f_locals.get("self")
            if getattr(caller, "with_stack", True):
                self._python.step_aside()
            return enable(*args, **kwargs)

        _enable_profiler._torchtalk_guard = True
        profiler._enable_profiler = _enable_profiler
        autograd._enable_profiler = _enable_profiler

    def check_ops(self) -> str:
        """'' when ops are still observed; else why not (and observation restarts).
        Run between tests: the canary op lands in the gap, which belongs to no test."""
        torch = self._torch or sys.modules.get("torch")
        if torch is None:
            return ""
        self._torch = torch
        torch.empty(0)
        seen = {text[1:] for text in self._lib.tt_close_epoch()}
        if CANARY_OP in seen:
            return ""
        self._lib.tt_restart_ops()
        return "RecordFunction callbacks were removed (torch._C._clear_callbacks?)"

    def imported_by(self, module: ModuleType | dict) -> set[tuple[str, str]]:
        """The tree's modules ``module`` (or a module's namespace) imports directly
        (``import x``, ``from x import y``), read from its namespace: unlike the module
        bodies that run while it is imported, this does not depend on what happened to be
        imported before."""
        names: set[tuple[str, str]] = set()
        namespace = module if isinstance(module, dict) else vars(module)
        for value in list(namespace.values()):
            if isinstance(value, ModuleType):
                source = value
            else:
                owner = getattr(value, "__module__", None)
                source = sys.modules.get(owner) if isinstance(owner, str) else None
            filename = getattr(source, "__file__", None)
            relative = self._relative(filename) if isinstance(filename, str) else None
            if relative is not None and relative.endswith(".py"):
                names.add(("module", relative))
        return names

    def tree_path(self, filename: str) -> str | None:
        """The path in the tree of a file the interpreter runs (the tree's, or its
        installed copy's), or None."""
        return self._relative(filename)

    def _relative(self, filename: str) -> str | None:
        if filename.startswith(self._prefix):
            return filename[len(self._prefix) :]
        for where, tree_dir in self._installed.items():
            if filename.startswith(where):
                return tree_dir + filename[len(where) :]
        return None

    def _name_of(self, code: CodeType) -> tuple[str, str] | None:
        known = self._code_names.get(id(code))
        if known is None or known[0] is not code:
            known = self._code_names[id(code)] = (code, self._name_of_code(code))
        return known[1]

    def _name_of_code(self, code: CodeType) -> tuple[str, str] | None:
        relative = self._relative_of.get(code.co_filename, False)
        if relative is False:  # once per file: many code objects share one
            relative = self._relative_of[code.co_filename] = self._relative(code.co_filename)
        if relative is None or not relative.endswith(".py"):
            return None
        if code.co_name == "<module>":
            return ("module", relative)
        qualname = getattr(code, "co_qualname", None) or self._qualname_from_source(code)
        return ("function", f"{relative}:{qualname}")

    def _qualname_from_source(self, code: CodeType) -> str:
        """3.10: the qualified name the compiler gave ``code``, read from its file (parsed
        once); its bare name where the file does not say (unreadable, ambiguous line)."""
        by_line = self._source_qualnames.get(code.co_filename)
        if by_line is None:
            try:
                with tokenize.open(code.co_filename) as file:  # its coding declaration
                    source = file.read()
            except (OSError, SyntaxError, UnicodeDecodeError):
                source = ""
            by_line = self._source_qualnames[code.co_filename] = qualnames_by_line(source)
        return by_line.get((code.co_firstlineno, code.co_name)) or code.co_name

    def _binding_name(self, about: tuple) -> str | None:
        """The binding name of a C function the compiled recorder described as (its
        ``__module__``, the type of its ``__self__`` unless that is a module, its
        ``__qualname__``): it keeps no reference to the function's self."""
        module, owner_type, qualname = about
        if module is None and owner_type is not None:
            module = getattr(owner_type, "__module__", None)
        if not isinstance(module, str) or module.split(".", 1)[0] not in self.packages:
            return None
        if not isinstance(qualname, str) or not qualname or qualname.startswith("pybind11_"):
            return None
        return f"{module}.{qualname}"
