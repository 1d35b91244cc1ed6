"""Run by tests/test_record_python_backends.py in a child interpreter: observes the
pybackends fixture's workload window by window with the backend TORCHTALK_RECORD_PYTHON
names, and writes what each window held as JSON.

    python python_backends_workload.py TREE BUILD_DIR OUT.json [--python-only] [--hold NAME]

--python-only builds the recorder without torch (native.load_python_only) for an
interpreter that has none; --hold takes sys.monitoring's tool id first, as another tool
would.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from pathlib import Path

tree, build, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
options = sys.argv[4:]
sys.path.insert(0, str(tree))

from indexer.record import native  # noqa: E402

if "--python-only" in options:
    native.load_python_only(build)
if "--hold" in options:
    sys.monitoring.use_tool_id(4, options[options.index("--hold") + 1])

from indexer.record.observer import Observer  # noqa: E402

try:
    observer = Observer(tree, follow_children=False)
except native.NativeUnavailable as exc:
    out.write_text(json.dumps({"unavailable": str(exc)}))
    sys.exit(0)

windows: dict[str, dict] = {}


def window(name: str) -> None:
    observed = observer.close()
    windows[name] = {"names": sorted(map(list, observed.names)), "problems": observed.problems}


import pyb  # noqa: E402

window("import")
bag = pyb.Bag()
for _ in range(3):
    pyb.double(1)
    bag.append(1)  # a method descriptor called on the tree's type
bound = bag.extend
bound([2])  # a bound builtin method
window("calls")
pyb.double(2)
bag.append(3)
window("calls again")
pyb.call_each((bag.append, bag.count, bag.remove), 7)  # one site, three C functions
window("one site, several C functions")
pyb.call_each((pyb.helper, bag.append), 8)  # one site: a Python function, then a C one
window("one site, Python then C")
with contextlib.suppress(ValueError):
    pyb.fails()
window("an exception")
generator = pyb.counter(3)
next(generator)
window("a generator starts")
next(generator)
window("a generator resumes")
catcher = pyb.catcher()
next(catcher)
window("a generator to throw into")
catcher.throw(KeyError)
window("thrown into")
pyb.double(5)
import pyb.loaded  # noqa: E402

pyb.step(1)
window("an import after its body's functions ran")
with contextlib.suppress(RuntimeError):
    import pyb.broken
pyb.after_throw()
window("an import that fails")
thread = threading.Thread(target=pyb.in_thread)
thread.start()
thread.join()
window("a thread")
with native.quiet():
    pyb.hidden()
pyb.step(2)
window("the recorder's own work")
sys.setprofile(None)
pyb.double(6)
window("the profile function replaced")
pyb.double(7)
window("after the profile function was replaced")
if sys.version_info >= (3, 12):
    monitoring = sys.monitoring
    with contextlib.suppress(ValueError):  # not in use: the profile backend's run
        monitoring.set_events(4, 0)
    pyb.double(8)
    window("sys.monitoring events turned off")
    pyb.double(9)
    window("after the events were turned off")
    if monitoring.get_tool(4) is not None:
        monitoring.free_tool_id(4)
    pyb.double(10)
    window("the tool id freed")
    pyb.double(11)
    window("after the tool id was freed")
    if monitoring.get_tool(4) is not None:
        monitoring.free_tool_id(4)
    monitoring.use_tool_id(4, "another tool")
    pyb.double(12)
    window("the tool id taken")
    monitoring.free_tool_id(4)
    pyb.double(13)
    window("after the tool id was given back")
imports = {path: sorted(map(list, work.names)) for path, work in observer.take_imports().items()}
result = {"how": observer.python_how, "windows": windows, "imports": imports}

# A live child watches sys.setprofile (children.py): a test replacing the profile function
# disturbs its report only where that function is how Python is observed.
import tempfile  # noqa: E402

from indexer.record import children  # noqa: E402

with tempfile.TemporaryDirectory() as directory:
    reporter = children.become_child(Path(directory), 0, observer)
    sys.setprofile(lambda frame, event, arg: None)
    result["child_disturbed"] = reporter.disturbed
    reporter.finished = True  # no report at exit: there is no parent to read it
observer.stop()
out.write_text(json.dumps(result, indent=1))
