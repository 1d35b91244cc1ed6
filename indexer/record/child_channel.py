"""The channel through which the recording process asks a live child to report a stretch
(docs/recording.md#child-processes).

Each followed child listens on a Unix socket of its own, ``<directory>/live/<pid>.sock``
(nothing of the network: a file in the recording's private directory). When the root
closes a stretch it connects to every socket there and sends the stretch's number; the
child writes what it executed since its previous report (a report file, as at exit) and
answers ``ok``. The root waits a bounded time for the answers: a child that does not
answer in time leaves the stretch unrecorded. The child is the listener, so the root
keeps no connection (nothing for its forks to inherit) and learns of a new child by its
socket appearing.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

LIVE = "live"  # the folder of the children's sockets, in the recording's directory
TIMEOUT_ENV = "TORCHTALK_CHILD_REPORT_TIMEOUT"  # seconds a stretch's close waits for children
DEFAULT_TIMEOUT_S = 2.0


def report_timeout() -> float:
    """How long a close waits for live children to answer (``TORCHTALK_CHILD_REPORT_TIMEOUT``,
    seconds; the default where unset or not a number >= 0)."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, ""))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value >= 0 else DEFAULT_TIMEOUT_S


def socket_path(directory: Path, pid: int) -> Path:
    return Path(directory) / LIVE / f"{pid}.sock"


# --- a child ------------------------------------------------------------------------------


class Listener:
    """A child's end: a thread that answers each request (a stretch's number) by calling
    ``report(stretch)``, then ``ok``. ``report`` runs in this thread."""

    def __init__(self, directory: Path, report: Callable[[int], None]) -> None:
        self.path = socket_path(directory, os.getpid())
        self.pid = os.getpid()
        self._report = report
        self._socket: socket.socket | None = None

    def start(self) -> bool:
        """Listens and starts the thread; False where it cannot (the child then reports
        only when it ends)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # Bound under a temporary name, renamed once it listens: a socket the root
            # finds refuses only when its process is gone (the root then removes it).
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a pid reused after a process that was killed
            server.bind(str(tmp))
            server.listen(16)
            os.replace(tmp, self.path)
        except OSError:
            return False
        self._socket = server
        # A daemon thread: it never keeps the child alive, and ends with it.
        thread = threading.Thread(target=self._serve, name="torchtalk-child-report", daemon=True)
        thread.start()
        return True

    def _serve(self) -> None:
        server = self._socket
        while server is not None and self._socket is server:
            try:
                connection, _ = server.accept()
            except OSError:
                return  # closed: the child made its last report
            with connection, contextlib.suppress(OSError, ValueError):
                connection.settimeout(5.0)
                stretch = int(_read_line(connection))
                self._report(stretch)
                connection.sendall(b"ok\n")  # the root may have stopped waiting: no matter

    def close(self) -> None:
        """No more requests (the child's last report is written, or it is a fork that
        listens on its own socket)."""
        server, self._socket = self._socket, None
        if server is None:
            return
        if os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                self.path.unlink()
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept
        with contextlib.suppress(OSError):
            server.close()


def _read_line(connection: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 64:
        chunk = connection.recv(64)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii").strip()


# --- the recording process ------------------------------------------------------------------


class Requests:
    """One close's requests: sent to every live child's socket, answered or not."""

    def __init__(self, directory: Path, stretch: int) -> None:
        self.folder = Path(directory) / LIVE
        self.stretch = stretch
        self.asked: set[int] = set()
        self.answered: set[int] = set()
        self.gone: set[int] = set()  # a socket nobody listens on: its process ended
        self._selector = selectors.DefaultSelector()
        self._buffers: dict[int, bytes] = {}

    def send(self) -> int:
        """Asks each child whose socket appeared since the last call; how many were asked."""
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return 0
        count = 0
        for entry in entries:
            stem = entry.name[: -len(".sock")] if entry.name.endswith(".sock") else ""
            if not stem.isdigit() or int(stem) in self.asked or int(stem) in self.gone:
                continue
            pid = int(stem)
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.setblocking(False)
            try:
                connection.connect(entry.path)
                connection.send(f"{self.stretch}\n".encode())
            except (ConnectionRefusedError, FileNotFoundError):
                connection.close()
                self.gone.add(pid)
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)  # left by a process that was killed
                continue
            except OSError:  # a full backlog (BlockingIOError): asked again next round
                connection.close()
                continue
            self.asked.add(pid)
            count += 1
            self._selector.register(connection, selectors.EVENT_READ, pid)
        return count

    def wait(self, until: float, pids: set[int] | None = None) -> None:
        """Reads answers until every asked child (or each of ``pids``) answered, or
        ``until`` (a time.monotonic() value)."""
        while True:
            waiting = (self.asked if pids is None else pids & self.asked) - self.answered
            if not waiting:
                return
            left = until - time.monotonic()
            if left <= 0:
                return
            for key, _ in self._selector.select(left):
                self._read(key)

    def _read(self, key: selectors.SelectorKey) -> None:
        connection, pid = key.fileobj, key.data
        try:
            chunk = connection.recv(16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        data = self._buffers.get(pid, b"") + chunk
        self._buffers[pid] = data
        if data.startswith(b"ok\n"):
            self.answered.add(pid)
        if chunk and not data.startswith(b"ok\n") and len(data) < 3:
            return
        self._selector.unregister(connection)
        connection.close()

    def close(self) -> None:
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()
        self._selector.close()
