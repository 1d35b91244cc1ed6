"""Which collected test items a selection keeps: by file, then (where a file is narrowed)
by generic test, OpInfo and device, undoing PyTorch's device instantiation.

``instantiate_device_type_tests`` turns ``TestFoo.test_bar`` into ``TestFooCPU.test_bar_cpu``
and, under ``@ops``, ``test_bar_<opinfo>_<device>_<dtype>``. An item whose name cannot be
traced to a narrowed test is not among the precisely-evidenced tests of its file.
"""

from __future__ import annotations

from dataclasses import dataclass

from indexer.paths import printable
from indexer.select.model import SelectedFile, Selection, TestScope

DEVICES = ("privateuse1", "cuda", "cpu", "meta", "mps", "xpu", "lazy", "hpu", "mtia", "xla", "ipu")


def split_device_class(name: str) -> tuple[str, str | None]:
    """``TestFooCUDA`` -> (``TestFoo``, ``cuda``); a non-device class is returned as is."""
    for device in DEVICES:
        suffix = device.upper()
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], device
    return name, None


def split_item(parts: list[str]) -> tuple[str | None, str]:
    """(class, function) of a node id's parts after the file; parametrization dropped."""
    function = parts[-1].split("[", 1)[0] if parts else ""
    cls = parts[-2] if len(parts) >= 2 else None
    return cls, function


def _opinfo_match(rest: str, opinfo: str, device: str | None) -> bool:
    devices = (device,) if device else DEVICES
    for dev in devices:
        head = f"{opinfo}_{dev}"
        if rest == head or rest.startswith(head + "_"):
            return True
    return False


def scope_matches(scope: TestScope, cls: str | None, function: str, device: str | None) -> bool:
    if scope.cls != cls:
        return False
    if scope.function is None:
        return True
    if function == scope.function:
        return scope.opinfos is None
    if not function.startswith(scope.function + "_"):
        return False
    if scope.opinfos is None:
        return True
    rest = function[len(scope.function) + 1 :]
    return any(_opinfo_match(rest, opinfo, device) for opinfo in scope.opinfos)


@dataclass
class Verdict:
    keep: bool
    why: str
    decided_by: str = "static"  # or 'record'


class ItemMatcher:
    def __init__(self, selection: Selection) -> None:
        self.selection = selection

    def verdict(self, path: str, parts: list[str]) -> Verdict:
        if self.selection.run_everything:
            return Verdict(True, "run everything")
        path = printable(path)  # how a selection keys a name that is not UTF-8
        selected: SelectedFile | None = self.selection.files.get(path)
        if selected is None:
            return Verdict(False, "file not affected")
        key = "::".join(parts)
        if key in selected.recorded_names:
            return Verdict(True, "recorded executing changed code", "record")
        if selected.static_for is None or (
            selected.static_for == "unrecorded" and key in selected.decided
        ):
            return Verdict(False, "recorded executing none of the changed code", "record")
        cls, function = split_item(parts)
        generic, device = split_device_class(cls) if cls else (None, None)
        narrowed_device = selected.devices and cls and device and generic in selected.device_classes
        if narrowed_device and device not in selected.devices:
            return Verdict(False, f"only {'/'.join(selected.devices)} code changed")
        if selected.tests is None:
            return Verdict(True, "file affected")
        for scope in selected.tests:
            if scope_matches(scope, generic, function, device) or (
                generic != cls and scope_matches(scope, cls, function, device)
            ):
                return Verdict(True, scope.why or "test affected")
        return Verdict(False, "not among the precisely affected tests of its file")
