"""The probe never raises into the training script: errors are logged once and it stops."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import vramtop_probe
from vramtop_probe import _server


def probe_warnings(caplog):
    return [r for r in caplog.records if r.name == "vramtop_probe" and r.levelname == "WARNING"]


def test_an_error_inside_memory_stats_is_logged_once_and_the_probe_stops(runtime_dir, client_of, caplog):
    handle = vramtop_probe.start(stats_interval=0.02, segments_interval=0.02)
    client = client_of(handle)
    client.until("stats")
    torch.cuda.standin_fail_memory_stats(RuntimeError("CUDA error: an illegal memory access"))
    rest = client.rest()
    assert rest[-1]["type"] == "bye" and rest[-1]["reason"] == "error"
    assert handle.wait(10)
    assert not handle.running
    assert handle.error == "RuntimeError: CUDA error: an illegal memory access"
    warnings = probe_warnings(caplog)
    assert len(warnings) == 1
    assert "illegal memory access" in warnings[0].getMessage()
    assert not os.path.exists(handle.path)
    handle.stop()  # stopping a stopped probe is harmless


def test_an_error_while_greeting_a_client_stops_the_probe_without_raising(runtime_dir, client_of, caplog):
    torch.cuda.standin_fail_memory_stats(ValueError("boom"))
    handle = vramtop_probe.start()
    client = client_of(handle)
    assert [m["type"] for m in client.rest()] in ([], ["bye"])
    assert handle.wait(10) and handle.error == "ValueError: boom"
    assert len(probe_warnings(caplog)) == 1


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", None, True])
def test_a_bad_interval_gives_a_stopped_handle_and_one_warning(runtime_dir, caplog, bad):
    handle = vramtop_probe.start(stats_interval=bad)
    assert not handle.running and handle.path is None
    assert "stats_interval must be a positive number of seconds" in handle.error
    assert len(probe_warnings(caplog)) == 1
    handle.stop()


def test_a_platform_without_unix_sockets_gets_a_no_op_probe(runtime_dir, monkeypatch, caplog):
    monkeypatch.delattr(socket, "AF_UNIX")
    handle = vramtop_probe.start()
    assert not handle.running
    assert "no Unix sockets" in handle.error
    assert len(probe_warnings(caplog)) == 1


def test_a_folder_that_cannot_be_created_gives_a_stopped_handle(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "vramtop").write_text("not a folder")
    handle = vramtop_probe.start()
    assert not handle.running and "not a directory" in handle.error
    assert len(probe_warnings(caplog)) == 1


def test_start_is_idempotent_and_start_after_stop_starts_afresh(runtime_dir):
    first = vramtop_probe.start()
    assert vramtop_probe.start(stats_interval=3.0) is first
    assert vramtop_probe.current() is first
    first.stop()
    assert vramtop_probe.current() is None
    second = vramtop_probe.start()
    assert second is not first and second.running
    assert second.path == first.path


def test_a_forked_child_leaves_the_parent_probe_and_its_socket_alone(probe, client_of):
    pid = os.fork()
    if pid == 0:  # the child: stopping must not touch the parent's socket
        try:
            vramtop_probe.stop()
            code = 0 if vramtop_probe.current() is None else 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert probe.running and os.path.exists(probe.path)
    assert client_of(probe).message()["type"] == "hello"


def test_a_costly_tick_spaces_out_the_next_one_to_stay_within_the_overhead_budget():
    budget = _server.OVERHEAD_BUDGET
    # A cheap tick keeps the interval.
    assert _server._next_tick(10.0, 1.0, 10.0, spent=0.0001) == 11.0
    # A tick that cost 0.1 s of CPU waits 0.1 / budget before the next.
    assert _server._next_tick(10.0, 1.0, 10.0, spent=0.1) == 10.0 + 0.1 / budget
    # Ticks missed while the thread was held up are skipped, not sent in a burst.
    assert _server._next_tick(10.0, 1.0, 15.5) == 16.5
