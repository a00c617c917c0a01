"""An append-only on-disk spool of encoded manifests, so nothing is lost while
the server is down or the process restarts.

Layout: one directory, one JSONL file per *segment*, one manifest per line.
A segment goes through three names (the rename is the only coordination needed
between processes, and it is atomic on every platform we care about):

``<time_ns>-<pid>-<rand>.part``
    being appended to by exactly one process (the pid in the name).
``<time_ns>-<pid>-<rand>.jsonl``
    sealed: complete, nobody writes to it any more, ready to be sent.
``<time_ns>-<pid>-<rand>.jsonl.<claimer pid>.sending``
    claimed by one drainer; deleted once the server took it, renamed back to
    ``.jsonl`` when sending failed. Two drainers never send the same segment.

Each append is one ``os.write`` of whole lines on an ``O_APPEND`` descriptor (no
Python buffer, so a ``fork()`` cannot flush the same bytes twice), so a crash
loses at most the line being written; the reader skips a partial last line and
any line that is not a JSON object. A ``.part`` or ``.sending`` file left behind
by a dead process (or untouched for ``stale_after`` seconds) is adopted as sealed.

The spool is bounded in bytes: when over ``max_bytes`` the oldest sealed segments
are deleted first and their lines counted in :attr:`Spool.dropped`.

:func:`default_spool_dir` is the per-user folder the proxy and ``instrument()`` use unless told
otherwise: ``$XDG_STATE_HOME/ctxkit/spool`` (else ``~/.local/state/ctxkit/spool``; on Windows
``%LOCALAPPDATA%\\ctxkit\\spool``), with one subfolder per destination (server and API key), so
a manifest is only ever replayed to the project it was recorded for. Processes with the same
destination share that subfolder: the renames above keep their segments apart.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

logger = logging.getLogger("ctxkit")

PART = ".part"
SEALED = ".jsonl"
SENDING = ".sending"

# Paths of the .part files currently held open by Spool objects of *this* process,
# so one Spool never adopts a segment another live Spool in the same process writes.
_OPEN_PARTS: set[str] = set()
_OPEN_PARTS_LOCK = threading.Lock()


def _reset_module_lock() -> None:
    global _OPEN_PARTS_LOCK
    _OPEN_PARTS_LOCK = threading.Lock()  # another thread may have held it at fork() time


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_module_lock)

_encoder = msgspec.json.Encoder()


@dataclass
class DrainResult:
    """What one :meth:`Spool.drain` did."""

    sent: int = 0  # lines handed to ``send`` in segments it accepted
    segments: int = 0  # segments deleted after ``send`` accepted them
    skipped: int = 0  # partial or corrupt lines dropped while reading
    left: int = 0  # segments still waiting (sending failed or max_segments reached)


def encode_line(obj: Any) -> bytes:
    """One manifest (struct, dict or JSON bytes) as a single JSON line without newline."""
    data = bytes(obj) if isinstance(obj, bytes | bytearray | memoryview) else _encoder.encode(obj)
    # A raw newline in valid JSON can only be whitespace (inside strings it is escaped).
    return data.replace(b"\n", b" ").replace(b"\r", b" ") if b"\n" in data or b"\r" in data else data


def spool_root() -> str:
    """The per-user folder that holds the default spools (one subfolder per destination)."""
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return os.path.join(os.environ["LOCALAPPDATA"], "ctxkit", "spool")
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "ctxkit", "spool")


def default_spool_dir(host: str, api_key: str) -> str:
    """The default spool of a destination: ``<spool_root()>/<host>-<digest of host and key>``
    (the key itself is never written anywhere)."""
    host = host.rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", host.split("://", 1)[-1])[:60].strip("_") or "server"
    digest = hashlib.sha256(f"{host}\0{api_key}".encode()).hexdigest()[:12]
    return os.path.join(spool_root(), f"{readable}-{digest}")


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # unknown: rely on the stale_after age instead (os.kill would terminate on Windows)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


class Spool:
    """A bounded directory of JSONL segments; safe across threads and processes."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = 100_000_000,
        segment_bytes: int = 1_000_000,
        segment_age: float = 60.0,
        stale_after: float = 600.0,
        fsync: bool = False,
    ) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.max_bytes = max_bytes
        # Keep several segments under the bound so dropping the oldest frees room.
        self.segment_bytes = max(1, min(segment_bytes, max_bytes // 4))
        self.segment_age = segment_age
        self.stale_after = max(stale_after, segment_age * 2)
        self.fsync = fsync
        self.dropped = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._fd: int | None = None
        self._path: str | None = None
        self._opened_at = 0.0
        self._written = 0
        self._total = self._scan_total()

    # ------------------------------------------------------------------ writing

    def append(self, items: Iterable[Any] | bytes | msgspec.Struct | dict[str, Any]) -> int:
        """Append manifests (structs, dicts or JSON bytes; one or an iterable).

        Returns how many were written. Raises OSError when the disk refuses; the
        caller (the client) counts those as dropped.
        """
        if isinstance(items, bytes | bytearray | memoryview | msgspec.Struct | dict):
            items = [items]
        lines = [encode_line(x) for x in items]
        if not lines:
            return 0
        blob = b"\n".join(lines) + b"\n"
        if len(blob) > self.max_bytes:
            logger.warning("ctxkit spool: %d bytes exceed the bound of %d; not spooled", len(blob), self.max_bytes)
            return 0
        with self._lock:
            self._check_fork()
            if self._fd is not None and (
                self._written + len(blob) > self.segment_bytes
                or time.monotonic() - self._opened_at > self.segment_age
            ):
                self._seal_locked()
            if self._total + len(blob) > self.max_bytes:
                self._enforce_bound_locked(len(blob))
            if self._fd is None:
                self._open_locked()
            assert self._fd is not None
            try:
                view = memoryview(blob)
                while view:  # os.write may write less than asked (rare on files)
                    view = view[os.write(self._fd, view) :]
                if self.fsync:
                    os.fsync(self._fd)
            except OSError:
                # A half-written line must stay the last one of its file: start a new segment.
                self._seal_locked()
                raise
            self._written += len(blob)
            self._total += len(blob)
        return len(lines)

    def _open_locked(self) -> None:
        name = f"{time.time_ns():020d}-{self._pid}-{uuid.uuid4().hex[:12]}{PART}"
        path = os.path.join(self.directory, name)
        # Registered before the file exists, so no other Spool of this process adopts it in between.
        with _OPEN_PARTS_LOCK:
            _OPEN_PARTS.add(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags, 0o600)
        except OSError:
            with _OPEN_PARTS_LOCK:
                _OPEN_PARTS.discard(path)
            raise
        self._path = path
        self._opened_at = time.monotonic()
        self._written = 0

    def _seal_locked(self) -> None:
        """Close the current segment and make it visible to drainers."""
        fd, path = self._fd, self._path
        self._fd = self._path = None
        if fd is None or path is None:
            return
        with _OPEN_PARTS_LOCK:
            _OPEN_PARTS.discard(path)
        try:
            os.close(fd)
        except OSError:
            pass
        try:
            if self._written:
                os.replace(path, path[: -len(PART)] + SEALED)
            else:
                os.unlink(path)
        except OSError:
            pass  # adopted by someone else meanwhile, or gone: nothing to do
        self._total = self._scan_total()

    def _check_fork(self) -> None:
        """After fork() the child must not write to (or seal) the parent's segment."""
        if self._pid != os.getpid():
            if self._fd is not None:
                try:
                    os.close(self._fd)  # the child's copy only
                except OSError:
                    pass
            self._fd = self._path = None
            self._written = 0
            self._pid = os.getpid()

    def reset_after_fork(self) -> None:
        """Called in a forked child: fresh lock (the parent's may be held) and no segment."""
        self._lock = threading.Lock()
        self._check_fork()

    def close(self) -> None:
        """Seal the current segment so another process can send it."""
        with self._lock:
            self._check_fork()
            self._seal_locked()

    # ------------------------------------------------------------------ reading

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.directory))
        except OSError:
            return []

    def _scan_total(self) -> int:
        total = 0
        for name in self._names():
            try:
                total += os.path.getsize(os.path.join(self.directory, name))
            except OSError:
                pass
        return total

    def _is_orphan(self, name: str, path: str) -> bool:
        """A .part/.sending file whose owner is gone (or that nobody touched for long)."""
        try:
            pid = int(name.split(".")[-2] if name.endswith(SENDING) else name.split("-")[1])
        except (IndexError, ValueError):
            return True
        try:
            if time.time() - os.path.getmtime(path) > self.stale_after:
                return True
        except OSError:
            return False
        if pid == os.getpid():
            with _OPEN_PARTS_LOCK:
                return path not in _OPEN_PARTS and name.endswith(PART)
        return not _pid_alive(pid)

    def _adopt_orphans(self) -> None:
        for name in self._names():
            if not (name.endswith(PART) or name.endswith(SENDING)):
                continue
            path = os.path.join(self.directory, name)
            if path == self._path or not self._is_orphan(name, path):
                continue
            base = name[: -len(PART)] if name.endswith(PART) else name[: name.index(SEALED) + len(SEALED)]
            base = base if base.endswith(SEALED) else base + SEALED
            try:
                os.replace(path, os.path.join(self.directory, base))
            except OSError:
                pass

    def sealed(self) -> list[str]:
        """Names of the segments ready to send, oldest first (after adopting orphans)."""
        self._adopt_orphans()
        return [n for n in self._names() if n.endswith(SEALED)]

    def has_pending(self) -> bool:
        """True when there is anything to send: sealed, orphaned, or our own open segment."""
        if self._fd is not None and self._written:
            return True
        return bool(self.sealed())

    def waiting(self) -> int:
        """How many manifests wait in the folder (every segment: ours, other processes', being sent)."""
        count = 0
        for name in self._names():
            if name.endswith((PART, SEALED, SENDING)):
                try:
                    with open(os.path.join(self.directory, name), "rb") as fh:
                        count += fh.read().count(b"\n")
                except OSError:
                    pass
        return count

    def read_segment(self, path: str) -> tuple[list[bytes], int]:
        """The complete JSON-object lines of a segment and how many lines were skipped."""
        with open(path, "rb") as fh:
            data = fh.read()
        raw = data.split(b"\n")
        skipped = 0
        if raw and raw[-1]:
            raw.pop()  # no newline after it: a write cut short by a crash
            skipped += 1
        lines: list[bytes] = []
        for line in raw:
            if not line.strip():
                continue
            try:
                ok = isinstance(msgspec.json.decode(line), dict)
            except msgspec.DecodeError:
                ok = False
            if ok:
                lines.append(line)
            else:
                skipped += 1
        return lines, skipped

    def drain(self, send: Callable[[list[bytes]], bool], *, max_segments: int | None = None) -> DrainResult:
        """Send sealed segments oldest first, one ``send(lines)`` call per segment.

        A segment is deleted only when ``send`` returned True (the server gave a
        final answer). On False or an exception, the segment is put back and
        draining stops; it is retried on the next drain. Our own open segment is
        sealed first so it is included.
        """
        result = DrainResult()
        with self._lock:
            self._check_fork()
            self._seal_locked()
        names = self.sealed()
        for index, name in enumerate(names):
            if max_segments is not None and index >= max_segments:
                result.left += len(names) - index
                break
            path = os.path.join(self.directory, name)
            claimed = f"{path}.{os.getpid()}{SENDING}"
            try:
                os.rename(path, claimed)  # atomic claim; the loser gets FileNotFoundError
            except OSError:
                continue
            try:
                lines, skipped = self.read_segment(claimed)
            except OSError:
                try:  # unreadable now: give it back rather than strand it under our claim
                    os.replace(claimed, path)
                    result.left += 1
                except OSError:
                    pass
                continue
            result.skipped += skipped
            ok = False
            try:
                ok = not lines or bool(send(lines))
            except Exception:
                logger.exception("ctxkit spool: send failed while draining")
            if ok:
                try:
                    os.unlink(claimed)
                except OSError:
                    pass
                result.sent += len(lines)
                result.segments += 1
            else:
                try:
                    os.replace(claimed, path)
                except OSError:
                    pass
                result.left += len(names) - index
                break
        with self._lock:
            self._total = self._scan_total()
        return result

    # ------------------------------------------------------------------ bound

    def _enforce_bound_locked(self, incoming: int) -> None:
        """Delete the oldest sealed segments until ``incoming`` more bytes fit."""
        self._total = self._scan_total()
        if self._total + incoming <= self.max_bytes:
            return
        if self._fd is not None:
            self._seal_locked()  # our own segment may be the oldest one
        self._adopt_orphans()
        for name in self._names():
            if self._total + incoming <= self.max_bytes:
                break
            if not name.endswith(SEALED):
                continue
            path = os.path.join(self.directory, name)
            try:
                with open(path, "rb") as fh:
                    lost = fh.read().count(b"\n")
                size = os.path.getsize(path)
                os.unlink(path)
            except OSError:
                continue
            self.dropped += lost
            self._total -= size
            logger.warning("ctxkit spool: over %d bytes; dropped oldest segment (%d manifests)", self.max_bytes, lost)
