"""Snapshot files: where they go, how they are named and written, how many are kept.

Only the probe thread calls into this module. Files are pickles of ``_snapshot()`` dicts, as
PyTorch's ``_dump_snapshot`` writes them, mode 0600 in a folder of mode 0700 that belongs to
this user; at most KEEP_PER_KIND files of each kind (oom, demand) are kept per process. No
function here raises: a failure comes back as a one-line reason, and the first one is logged.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import pickle
import socket
import stat
import time
from typing import Any, Mapping

from . import _protocol as protocol

log = logging.getLogger("vramtop_probe")

# Files of each kind this process keeps; older ones of this process are removed.
KEEP_PER_KIND = 8
# Pickle protocol: the one PyTorch's _dump_snapshot files have (pickle's default until 3.14).
PICKLE_PROTOCOL = 4
# Most "-{n}" suffixes tried for names taken in the same second.
MAX_SAME_SECOND = 1000
# Bytes per os.write call.
WRITE_CHUNK = 1 << 20


class SnapshotStore:
    def __init__(self, directory: str | None, rank: int | None) -> None:
        self.directory = directory or protocol.snapshot_dir()
        self.rank = rank
        self.host = socket.gethostname()
        self.written: dict[str, collections.deque[str]] = {
            "oom": collections.deque(), "demand": collections.deque()
        }
        self._failure_logged = False

    def write(self, snapshot: Mapping[str, Any], kind: str) -> tuple[str | None, int, str | None]:
        """(path, bytes, None) once the file is in place, else (None, 0, reason)."""
        try:
            data = pickle.dumps(snapshot, protocol=PICKLE_PROTOCOL)
        except Exception as exc:
            return None, 0, self._failed(f"cannot pickle the snapshot: {type(exc).__name__}: {exc}")
        path = None
        try:
            self._ensure_directory()
            path = self._free_name(kind)
            self._write_file(path, data)
        except _Refused as exc:
            return None, 0, self._failed(str(exc))
        except OSError as exc:
            return None, 0, self._failed(_describe(exc, path))
        self._keep(kind, path)
        return path, len(data), None

    # ---- steps --------------------------------------------------------------------------

    def _ensure_directory(self) -> None:
        directory = self.directory
        parent = os.path.dirname(os.path.abspath(directory))
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
            # mkdir's mode is masked by the umask; 0700 needs nothing the umask could remove,
            # but a chmod makes it certain.
            os.chmod(directory, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode):
            raise _Refused(f"the snapshot folder {directory} is not a directory")
        if st.st_uid != os.geteuid():
            raise _Refused(
                f"the snapshot folder {directory} belongs to uid {st.st_uid}, not to this user;"
                " not writing there"
            )

    def _free_name(self, kind: str) -> str:
        now = time.time()
        for n in range(MAX_SAME_SECOND):
            name = protocol.snapshot_name(self.host, os.getpid(), self.rank, now, kind, n)
            path = os.path.join(self.directory, name)
            if not os.path.lexists(path):
                return path
        raise _Refused(f"more than {MAX_SAME_SECOND} snapshots in one second")

    def _write_file(self, path: str, data: bytes) -> None:
        """Write to a hidden temp name (0600, never following a link), then rename into place."""
        temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.unlink(temp)  # left by a crash of this very pid (same name): ours to remove
        except FileNotFoundError:
            pass
        fd = os.open(temp, flags, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view[:WRITE_CHUNK])
                    view = view[written:]
            finally:
                os.close(fd)
            os.rename(temp, path)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise

    def _keep(self, kind: str, path: str) -> None:
        kept = self.written.setdefault(kind, collections.deque())
        kept.append(path)
        while len(kept) > KEEP_PER_KIND:
            oldest = kept.popleft()
            try:
                os.unlink(oldest)
            except OSError:
                pass  # already removed by the user

    def _failed(self, reason: str) -> str:
        reason = " ".join(reason.split())  # one line, whatever the error said
        if not self._failure_logged:
            self._failure_logged = True
            log.warning("vramtop_probe: could not write a snapshot: %s", reason)
        return reason


class _Refused(Exception):
    """The store will not write (a folder of another user, not a folder)."""


def _describe(exc: OSError, path: str | None) -> str:
    """One line: what failed and where (os.write's errors name no file: the path is added)."""
    filename = exc.filename or path
    where = f"{filename}: " if filename else ""
    what = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full: {where}{what}"
    return f"cannot write the snapshot: {where}{what}"
