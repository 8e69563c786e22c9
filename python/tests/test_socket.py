"""Where the socket lives, who may open it, and how clients are served (PROBE-PROTOCOL v1)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest
import torch
import vramtop_probe
from vramtop_probe import _protocol as protocol
from vramtop_probe import _server

from conftest import PATIENCE_S, wait_for


def test_socket_is_mode_0600_in_a_mode_0700_folder_named_for_the_pid(probe, runtime_dir):
    assert probe.path == os.path.join(runtime_dir, "vramtop", f"{os.getpid()}.sock")
    st = os.stat(probe.path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(probe.path)).st_mode) == 0o700


def test_an_existing_folder_with_wider_mode_is_made_private(runtime_dir):
    folder = os.path.join(runtime_dir, "vramtop")
    os.mkdir(folder)
    os.chmod(folder, 0o755)
    handle = vramtop_probe.start()
    assert handle.error is None
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_xdg_runtime_dir_is_used_when_it_is_a_directory(tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert protocol.socket_dir(env) == str(tmp_path / "vramtop")
    assert protocol.socket_path(4321, env) == str(tmp_path / "vramtop" / "4321.sock")


def test_without_xdg_runtime_dir_the_socket_goes_under_tmp_per_user(tmp_path):
    fallback = f"/tmp/vramtop-{protocol.username()}"
    assert protocol.socket_dir({}) == fallback
    assert protocol.socket_dir({"XDG_RUNTIME_DIR": ""}) == fallback
    # Set but not a directory: the fallback too.
    assert protocol.socket_dir({"XDG_RUNTIME_DIR": str(tmp_path / "missing")}) == fallback
    assert protocol.socket_path(99, {}) == f"{fallback}/99.sock"


def test_vramtop_probe_dir_replaces_both_defaults_when_set_and_not_empty(tmp_path):
    chosen = str(tmp_path / "probes")
    for env in (
        {"VRAMTOP_PROBE_DIR": chosen},
        {"VRAMTOP_PROBE_DIR": chosen, "XDG_RUNTIME_DIR": str(tmp_path)},
    ):
        assert protocol.socket_dir(env) == chosen
        assert protocol.socket_path(77, env) == os.path.join(chosen, "77.sock")
    # Empty: as unset.
    env = {"VRAMTOP_PROBE_DIR": "", "XDG_RUNTIME_DIR": str(tmp_path)}
    assert protocol.socket_dir(env) == str(tmp_path / "vramtop")
    assert protocol.socket_dir({"VRAMTOP_PROBE_DIR": ""}) == f"/tmp/vramtop-{protocol.username()}"


def test_the_probe_serves_in_vramtop_probe_dir_creating_it_0700(runtime_dir, monkeypatch, client_of):
    # A short path (socket paths are limited to 107 bytes); XDG_RUNTIME_DIR is set too, and loses.
    chosen = os.path.join(runtime_dir, "p")
    monkeypatch.setenv("VRAMTOP_PROBE_DIR", chosen)
    handle = vramtop_probe.start()
    assert handle.error is None, handle.error
    assert handle.path == os.path.join(chosen, f"{os.getpid()}.sock")
    assert stat.S_IMODE(os.stat(chosen).st_mode) == 0o700
    assert not os.path.exists(os.path.join(runtime_dir, "vramtop"))
    assert client_of(handle).message()["type"] == "hello"
    handle.stop()
    assert not os.path.exists(handle.path)


def test_tmpdir_does_not_move_the_socket_vramtop_looks_for_it_under_tmp(tmp_path):
    # Schedulers such as SLURM set a per-job TMPDIR; vramtop scans /tmp/vramtop-<user>.
    fallback = f"/tmp/vramtop-{protocol.username()}"
    assert protocol.socket_dir({"TMPDIR": str(tmp_path)}) == fallback
    assert protocol.socket_dir({"TMPDIR": str(tmp_path), "XDG_RUNTIME_DIR": ""}) == fallback


# The two tests below are of the default folder itself: their probe listens in the real
# /tmp/vramtop-<user> (under this process's pid, for a moment); they assert only their own socket.
@pytest.mark.parametrize("tmpdir_set", [True, False])
def test_the_tmp_fallback_serves_under_tmp_with_tmpdir_set_or_unset(
    monkeypatch, tmp_path, client_of, tmpdir_set
):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    if tmpdir_set:
        monkeypatch.setenv("TMPDIR", str(tmp_path))
    else:
        monkeypatch.delenv("TMPDIR", raising=False)
    handle = vramtop_probe.start()
    assert handle.error is None, handle.error
    assert handle.path == f"/tmp/vramtop-{protocol.username()}/{os.getpid()}.sock"
    assert client_of(handle).message()["type"] == "hello"
    handle.stop()


def test_the_tmp_fallback_really_serves(monkeypatch, client_of):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    handle = vramtop_probe.start()
    assert handle.error is None, handle.error
    assert handle.path == f"/tmp/vramtop-{protocol.username()}/{os.getpid()}.sock"
    assert stat.S_IMODE(os.stat(os.path.dirname(handle.path)).st_mode) == 0o700
    assert client_of(handle).message()["type"] == "hello"
    handle.stop()
    assert not os.path.exists(handle.path)


def test_a_stale_socket_at_the_path_is_removed_and_replaced(runtime_dir, client_of):
    path = protocol.socket_path()
    os.makedirs(os.path.dirname(path), mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a socket file nobody listens on, like one left by a killed process
    dead.close()
    handle = vramtop_probe.start()
    assert handle.error is None, handle.error
    assert client_of(handle).message()["type"] == "hello"


def test_the_socket_is_renamed_into_place_listening_and_a_stale_binding_name_is_cleared(runtime_dir, client_of):
    path = protocol.socket_path()
    os.makedirs(os.path.dirname(path), mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path + ".binding")  # left by a probe killed between bind and rename
    dead.close()
    handle = vramtop_probe.start()
    assert handle.error is None, handle.error
    assert handle.path == path
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert client_of(handle).message()["type"] == "hello"


def test_a_live_socket_at_the_path_is_left_alone_and_the_probe_does_not_start(runtime_dir, caplog):
    path = protocol.socket_path()
    os.makedirs(os.path.dirname(path), mode=0o700)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(path)
    other.listen(1)
    try:
        handle = vramtop_probe.start()
        assert not handle.running
        assert "live process" in handle.error
        assert os.path.exists(path)
        assert [r.levelname for r in caplog.records if r.name == "vramtop_probe"] == ["WARNING"]
    finally:
        other.close()


def test_a_file_that_is_not_a_socket_at_the_path_is_not_removed(runtime_dir):
    path = protocol.socket_path()
    os.makedirs(os.path.dirname(path), mode=0o700)
    with open(path, "w") as f:
        f.write("keep me")
    handle = vramtop_probe.start()
    assert not handle.running and "not a socket" in handle.error
    assert open(path).read() == "keep me"


def test_two_clients_both_get_the_same_stream(probe, client_of):
    first, second = client_of(probe), client_of(probe)
    for client in (first, second):
        assert client.message()["type"] == "hello"
        assert client.until("stats")["stats"] == torch.cuda.memory_stats(0)
        assert client.until("segments")["device"] == 0
    wait_for(lambda: probe.clients == 2, "two clients")


def test_a_client_that_hangs_up_is_forgotten_and_the_others_go_on(probe, client_of):
    leaving, staying = client_of(probe), client_of(probe)
    leaving.until("hello")
    leaving.close()
    wait_for(lambda: probe.clients == 1, "the closed client to be forgotten")
    assert staying.until("stats")["device"] == 0
    assert probe.running and probe.dropped == 0


# A reading client in its own process: it reads the socket as fast as it can, counts segments
# lines, and once told on stdin (any line) prints "after N" when N more segments lines came.
_READER = r"""
import selectors, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
print("connected", flush=True)
sel = selectors.DefaultSelector()
sel.register(sock, selectors.EVENT_READ)
sel.register(sys.stdin, selectors.EVENT_READ)
buffer, seen, told_at = b"", 0, None
while True:
    for key, _ in sel.select():
        if key.fileobj is sys.stdin:
            sys.stdin.readline()
            sel.unregister(sys.stdin)
            told_at = seen
            continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            print("ended", seen, flush=True)
            sys.exit(1)
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        seen += sum(b'"type":"segments"' in line for line in lines)
    if told_at is not None and seen >= told_at + 2:
        print("after", seen - told_at, flush=True)
        sys.exit(0)
"""


def test_a_stuck_client_is_dropped_while_a_reading_client_keeps_receiving(runtime_dir, client_of, monkeypatch):
    # No spacing of costly ticks here: the point is to fill the stuck client's buffers fast.
    monkeypatch.setattr(_server, "OVERHEAD_BUDGET", 1.0)
    # 600 segments make a segments line of about 90 KB; 64 KiB of unsent bytes is the limit, on top
    # of what the kernel buffers (about 200 KB), so the stuck client is dropped within a few ticks.
    torch.cuda.standin_configure(segments=600)
    handle = vramtop_probe.start(stats_interval=0.05, segments_interval=0.05, max_pending_bytes=1 << 16)
    # The reading client is another process, so that on a loaded machine it is not starved of this
    # process's GIL by the probe thread it reads from.
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, handle.path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "connected"
        wait_for(lambda: handle.clients == 1, "the reading client to be accepted")
        stuck = client_of(handle)  # never reads until it has been dropped
        wait_for(lambda: handle.dropped > 0, "the stuck client to be dropped")
        assert handle.dropped == 1
        assert handle.running and handle.clients == 1
        # The reading client goes on receiving after the drop.
        told, _ = reader.communicate("dropped\n", timeout=PATIENCE_S)
        assert told.strip() == "after 2"
        assert reader.returncode == 0
    finally:
        reader.kill()
        reader.wait()
    # The stuck one gets what the kernel had buffered, then the end of the stream.
    stuck.rest()
