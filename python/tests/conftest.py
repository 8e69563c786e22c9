"""Shared fixtures: the stand-in torch on sys.path, a private socket folder, a line client."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
STAND_IN = os.path.join(HERE, "stand_in")
# First on sys.path so that the stand-in wins over a real torch that may be installed.
for entry in (STAND_IN, PYTHON_DIR):
    if entry not in sys.path:
        sys.path.insert(0, entry)

import torch  # noqa: E402  (the stand-in)
import vramtop_probe  # noqa: E402
from vramtop_probe import _server  # noqa: E402

assert torch.__version__.endswith("+standin"), f"the tests need the stand-in torch, got {torch.__file__}"

# Seconds a test waits for something the probe does soon; only a bound against hanging, the
# tests assert what arrives, never how fast.
PATIENCE_S = 10.0


def wait_for(condition, what: str):
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"gave up waiting for {what}")


class LineClient:
    """A vramtop-like client: connects and reads JSON lines."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(PATIENCE_S)
        self.sock.connect(path)
        self.buffer = b""
        self.raw_lines: list[bytes] = []

    def line(self) -> bytes | None:
        """The next raw line (newline included), or None at end of stream."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        self.raw_lines.append(line + b"\n")
        return line + b"\n"

    def message(self) -> dict | None:
        line = self.line()
        return None if line is None else json.loads(line)

    def until(self, kind: str, limit: int = 1000) -> dict:
        """Read until a message of type ``kind``; fail at end of stream."""
        for _ in range(limit):
            msg = self.message()
            assert msg is not None, f"stream ended before a {kind!r} message"
            if msg["type"] == kind:
                return msg
        raise AssertionError(f"no {kind!r} message in {limit} lines")

    def rest(self) -> list[dict]:
        """Every message up to the end of the stream."""
        out = []
        while (msg := self.message()) is not None:
            out.append(msg)
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(autouse=True)
def no_probe_dir_override(monkeypatch):
    """No VRAMTOP_PROBE_DIR from the caller's shell: the tests choose the probe's folder (a
    private XDG_RUNTIME_DIR, or the override in the tests of it) and pass it on to children."""
    monkeypatch.delenv("VRAMTOP_PROBE_DIR", raising=False)


@pytest.fixture
def runtime_dir(monkeypatch):
    """A fresh XDG_RUNTIME_DIR with a short path (Unix socket paths are limited to 107 bytes)."""
    directory = tempfile.mkdtemp(prefix="vt")
    monkeypatch.setenv("XDG_RUNTIME_DIR", directory)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def clean_probe_state():
    """Default stand-in figures, no probe running, OOM observer detached, no CUDA hook queued."""
    torch.cuda.standin_reset()
    vramtop_probe.stop()
    _server._observer_attached = False
    _server._observer_missing_logged = False
    _server._cuda_hook = "no"  # as in a fresh process (standin_reset drops the queued calls)
    yield
    vramtop_probe.stop()
    torch.cuda.standin_reset()
    _server._observer_attached = False
    _server._observer_missing_logged = False
    _server._cuda_hook = "no"  # as in a fresh process (standin_reset drops the queued calls)


@pytest.fixture
def probe(runtime_dir):
    """A running probe at fast intervals (0.05 s stats, 0.1 s segments)."""
    handle = vramtop_probe.start(stats_interval=0.05, segments_interval=0.1)
    assert handle.error is None, handle.error
    yield handle
    handle.stop()


@pytest.fixture
def client_of():
    clients: list[LineClient] = []

    def connect(handle) -> LineClient:
        client = LineClient(handle.path)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


def subprocess_env(**extra: str) -> dict:
    env = dict(os.environ)
    # The child's probe listens where the test says (XDG_RUNTIME_DIR, or VRAMTOP_PROBE_DIR in
    # ``extra``), never in a folder the caller's shell named.
    env.pop("VRAMTOP_PROBE_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, STAND_IN])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env
