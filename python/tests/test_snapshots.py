"""Protocol v2: history recording, OOM snapshots, on-demand snapshot requests, snapshot files."""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import re
import socket
import stat
import threading
import time

import pytest
import torch
import vramtop_probe
from vramtop_probe import _files, _protocol as protocol, _server

from conftest import LineClient, wait_for

MIB = 1 << 20
GIB = 1 << 30
NAME = re.compile(
    r"(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>\d+)-rank(?P<rank>\d+|x)-(?P<stamp>\d{8}T\d{6}Z)"
    r"(?:-(?P<n>\d+))?-(?P<kind>oom|demand)\.pickle"
)


@pytest.fixture
def snapshot_dir(tmp_path):
    return str(tmp_path / "snapshots")


@pytest.fixture
def live(runtime_dir, snapshot_dir):
    """The allocator model, CUDA initialised, a probe recording 10 000 entries."""
    torch.cuda.standin_use_allocator(GIB)
    first = uint8(1)  # initialises CUDA
    handle = vramtop_probe.start(
        stats_interval=0.05, segments_interval=0.1, record_history=10_000, snapshot_dir=snapshot_dir
    )
    assert handle.error is None, handle.error
    wait_for(lambda: handle.history_on, "history recording to be turned on")
    wait_for(lambda: torch.cuda.standin_observers(), "the OOM observer")
    yield handle
    handle.stop()
    torch.cuda.memory._record_memory_history(enabled=None)
    del first


def uint8(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def request(client: LineClient, request_id: str, **extra) -> None:
    message = {"v": 2, "type": "snapshot_request", "id": request_id, **extra}
    client.sock.sendall(json.dumps(message).encode() + b"\n")


def answer(client: LineClient, kinds=("snapshot_done", "snapshot_failed")) -> dict:
    for _ in range(10_000):
        message = client.message()
        assert message is not None, "the stream ended before an answer"
        if message["type"] in kinds:
            return message
    raise AssertionError("no answer")


def load(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def fill_then_oom(held_bytes: int):
    """Hold ``held_bytes`` in a local while asking for more than the device has."""
    held = uint8(held_bytes)
    address = held.data_ptr()
    try:
        uint8(2 * GIB)
    except torch.OutOfMemoryError:
        return address
    raise AssertionError("no OOM")


# ---- hello ----------------------------------------------------------------------------------


def test_hello_v2_says_rank_history_and_capabilities(runtime_dir, client_of, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    handle = vramtop_probe.start(record_history=500)
    hello = client_of(handle).message()
    assert hello["v"] == 2
    assert (hello["rank"], hello["local_rank"], hello["world_size"]) == (3, 1, 8)
    assert hello["record_history"] == 500
    assert hello["capabilities"] == ["snapshot"]


def test_hello_record_history_is_null_when_the_probe_does_not_record(runtime_dir, client_of, monkeypatch):
    monkeypatch.delenv("VRAMTOP_RECORD_HISTORY", raising=False)
    hello = client_of(vramtop_probe.start()).message()
    assert hello["record_history"] is None
    assert (hello["rank"], hello["local_rank"], hello["world_size"]) == (None, None, None)


def test_ranks_fall_back_to_slurm_names_and_bad_values_are_null():
    assert protocol.ranks({"SLURM_PROCID": "5", "SLURM_LOCALID": "2", "SLURM_NTASKS": "16"}) == {
        "rank": 5, "local_rank": 2, "world_size": 16
    }
    # torchrun's names win; a bad value counts as unset, it does not fall back.
    assert protocol.ranks({"RANK": "1", "SLURM_PROCID": "5", "LOCAL_RANK": "-1", "WORLD_SIZE": "x"}) == {
        "rank": 1, "local_rank": None, "world_size": None
    }
    assert protocol.ranks({"RANK": "٣"}) == {"rank": None, "local_rank": None, "world_size": None}


# ---- history ----------------------------------------------------------------------------------


def test_history_is_turned_on_at_cuda_initialisation_and_not_before(runtime_dir, snapshot_dir):
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(stats_interval=0.02, record_history=1234, snapshot_dir=snapshot_dir)
    client = LineClient(handle.path)
    assert client.message()["record_history"] == 1234
    time.sleep(0.3)  # many probe ticks (and setup polls) without CUDA
    assert not handle.history_on and not torch.cuda._state["history"].enabled
    x = uint8(1)
    # On at once: inside the CUDA initialisation that the first allocation made.
    assert handle.history_on
    history = torch.cuda._state["history"]
    assert history.enabled and history.context and history.max_entries == 1234
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [("segment_alloc", 2 * MIB), ("alloc", 1)]
    client.close()
    handle.stop()
    torch.cuda.memory._record_memory_history(enabled=None)
    del x


def test_the_first_allocation_after_cuda_initialisation_has_its_stack(runtime_dir, snapshot_dir):
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(record_history=True, snapshot_dir=snapshot_dir)
    weights = uint8(3 * MIB)  # at once: no time for the probe thread to look
    [segment] = torch.cuda.memory._snapshot()["segments"]
    [block] = [b for b in segment["blocks"] if b["state"] == "active_allocated"]
    names = [f["name"] for f in block["frames"]]
    assert names[:2] == ["uint8", "test_the_first_allocation_after_cuda_initialisation_has_its_stack"]
    # The OOM observer is attached at the same moment.
    assert torch.cuda.standin_observers()
    handle.stop()
    torch.cuda.memory._record_memory_history(enabled=None)
    del weights


def test_start_returns_with_the_hook_queued_even_while_the_probe_thread_queues_it(
    runtime_dir, monkeypatch
):
    # The probe thread queues the hook first, slowly; start() must not return (and let the
    # script initialise CUDA) before the hook is in PyTorch's queue.
    queue = torch.cuda._lazy_call

    def slow_from_the_probe_thread(fn, **kwargs):
        if threading.current_thread().name == "vramtop-probe":
            time.sleep(0.3)
        queue(fn, **kwargs)

    watch = _server._watch_for_cuda

    def late_watch():
        time.sleep(0.1)  # the probe thread is inside _lazy_call by now
        watch()

    monkeypatch.setattr(torch.cuda, "_lazy_call", slow_from_the_probe_thread)
    monkeypatch.setattr(_server, "_watch_for_cuda", late_watch)
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(record_history=True)
    weights = uint8(3 * MIB)
    [segment] = torch.cuda.memory._snapshot()["segments"]
    [block] = [b for b in segment["blocks"] if b["state"] == "active_allocated"]
    assert block["frames"], "the first allocation has no stack"
    handle.stop()
    torch.cuda.memory._record_memory_history(enabled=None)
    del weights


def test_start_after_cuda_initialisation_turns_history_on_before_it_returns(runtime_dir):
    torch.cuda.standin_use_allocator(GIB)
    first = uint8(1)
    handle = vramtop_probe.start(stats_interval=60, record_history=True)
    assert handle.history_on and torch.cuda._state["history"].enabled
    second = uint8(2)
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [("alloc", 2)]
    handle.stop()
    torch.cuda.memory._record_memory_history(enabled=None)
    del first, second


def test_a_probe_never_initialises_cuda_in_a_process_that_does_not(runtime_dir, client_of, snapshot_dir):
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(
        stats_interval=0.02, segments_interval=0.02, record_history=True, snapshot_on_oom=True,
        snapshot_dir=snapshot_dir,
    )
    client = client_of(handle)
    assert client.message()["devices"] == []
    request(client, "early")
    assert answer(client)["reason"] == "CUDA is not initialised in this process yet"
    time.sleep(0.3)  # many ticks and setup polls
    assert torch.cuda.standin_lazy_inits() == 0 and not torch.cuda.is_initialized()
    assert not handle.history_on and not torch.cuda.standin_observers()
    handle.stop()
    assert torch.cuda.standin_lazy_inits() == 0


def test_a_torch_without_lazy_call_gets_history_from_the_probes_polling(runtime_dir, monkeypatch):
    monkeypatch.delattr(torch.cuda, "_lazy_call")
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(stats_interval=0.02, record_history=True)
    x = uint8(1)
    wait_for(lambda: handle.history_on, "history recording")
    wait_for(lambda: torch.cuda.standin_observers(), "the OOM observer")
    handle.stop()
    torch.cuda.memory._record_memory_history(enabled=None)
    del x


def test_a_failing_history_call_at_cuda_initialisation_does_not_reach_the_script(
    runtime_dir, monkeypatch, caplog
):
    def refuse(*args, **kwargs):
        raise RuntimeError("no history today")

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", refuse)
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(stats_interval=0.02, record_history=True)
    x = uint8(1)  # no DeferredCudaCallError: CUDA initialises as without the probe
    assert torch.cuda.is_initialized() and handle.running
    assert handle._history_failed and not handle.history_on
    said = [r for r in caplog.records if "no history today" in r.getMessage()]
    assert len(said) == 1
    handle.stop()
    del x


def test_without_record_history_the_probe_leaves_history_off(runtime_dir, monkeypatch):
    monkeypatch.delenv("VRAMTOP_RECORD_HISTORY", raising=False)
    torch.cuda.standin_use_allocator(GIB)
    x = uint8(1)
    handle = vramtop_probe.start(stats_interval=0.02)
    wait_for(lambda: torch.cuda.standin_observers(), "the OOM observer")
    assert handle.record_history is None and not handle.history_on
    assert not torch.cuda._state["history"].enabled
    del x


@pytest.mark.parametrize(
    "env, wanted", [("1", 100_000), ("true", 100_000), ("250", 250), ("0", None), ("", None)]
)
def test_record_history_env_applies_when_the_option_is_not_given(runtime_dir, monkeypatch, env, wanted):
    monkeypatch.setenv("VRAMTOP_RECORD_HISTORY", env)
    assert vramtop_probe.start().record_history == wanted
    vramtop_probe.stop()
    # An explicit option wins over the env.
    assert vramtop_probe.start(record_history=7).record_history == 7
    vramtop_probe.stop()
    assert vramtop_probe.start(record_history=False).record_history is None


def test_a_bad_record_history_is_one_warning_and_no_probe(runtime_dir, monkeypatch, caplog):
    monkeypatch.setenv("VRAMTOP_RECORD_HISTORY", "lots")
    handle = vramtop_probe.start()
    assert not handle.running and "VRAMTOP_RECORD_HISTORY" in handle.error
    monkeypatch.delenv("VRAMTOP_RECORD_HISTORY")
    handle = vramtop_probe.start(record_history=-5)
    assert not handle.running and "record_history" in handle.error
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 2


def test_a_torch_without_record_memory_history_is_said_once(runtime_dir, monkeypatch, caplog, client_of):
    monkeypatch.delattr(torch.cuda.memory, "_record_memory_history")
    handle = vramtop_probe.start(stats_interval=0.02, record_history=True)
    wait_for(lambda: handle._history_failed, "the probe to give up on history")
    assert handle.running and not handle.history_on
    assert client_of(handle).message()["record_history"] is None
    said = [r for r in caplog.records if "_record_memory_history" in r.getMessage()]
    assert len(said) == 1


# ---- OOM snapshots ------------------------------------------------------------------------------


def test_an_oom_snapshot_holds_the_state_at_the_oom(live, client_of):
    client = client_of(live)
    client.until("hello")
    address = fill_then_oom(300 * MIB)
    # The failing step's tensor is gone now...
    now = {b["address"]: b["state"] for s in torch.cuda.memory_snapshot() for b in s["blocks"]}
    assert now.get(address, "inactive") == "inactive"
    oom = client.until("oom")
    assert oom["v"] == 2 and oom["snapshot_error"] is None
    assert oom["alloc_bytes"] == 2 * GIB
    assert os.path.dirname(oom["snapshot"]) == live.snapshots.directory
    assert NAME.fullmatch(os.path.basename(oom["snapshot"]))["kind"] == "oom"
    # ...but the snapshot shows it live, and the trace ends with the oom.
    snapshot = load(oom["snapshot"])
    blocks = {b["address"]: b for s in snapshot["segments"] for b in s["blocks"]}
    assert blocks[address]["state"] == "active_allocated"
    assert blocks[address]["requested_size"] == 300 * MIB
    trace = snapshot["device_traces"][0]
    assert trace[-1]["action"] == "oom" and trace[-1]["size"] == 2 * GIB
    assert any(e["action"] == "alloc" and e["addr"] == address for e in trace)


def test_a_client_connecting_after_an_oom_is_told_of_it_as_earlier(live, client_of):
    first = client_of(live)
    first.until("hello")
    fill_then_oom(300 * MIB)
    oom = first.until("oom")
    assert "earlier" not in oom, "sent as it happens"
    later = client_of(live)
    assert later.until("hello")["type"] == "hello"
    again = later.message()
    assert again["type"] == "oom" and again["earlier"] is True
    assert again["snapshot"] == oom["snapshot"] and again["alloc_bytes"] == oom["alloc_bytes"]


def test_an_oom_without_history_or_snapshot_on_oom_writes_nothing(runtime_dir, snapshot_dir, client_of):
    torch.cuda.standin_use_allocator(GIB)
    x = uint8(1)
    handle = vramtop_probe.start(stats_interval=0.02, record_history=False, snapshot_on_oom=False,
                                 snapshot_dir=snapshot_dir)
    wait_for(lambda: torch.cuda.standin_observers(), "the OOM observer")
    client = client_of(handle)
    client.until("hello")
    fill_then_oom(MIB)
    oom = client.until("oom")
    assert oom["snapshot"] is None and oom["snapshot_error"] is None
    assert not os.path.exists(snapshot_dir)
    del x


def test_snapshot_on_oom_without_history_has_segments_and_no_trace(runtime_dir, snapshot_dir, client_of):
    torch.cuda.standin_use_allocator(GIB)
    x = uint8(1)
    handle = vramtop_probe.start(stats_interval=0.02, record_history=False, snapshot_on_oom=True,
                                 snapshot_dir=snapshot_dir)
    wait_for(lambda: torch.cuda.standin_observers(), "the OOM observer")
    client = client_of(handle)
    client.until("hello")
    address = fill_then_oom(5 * MIB)
    oom = client.until("oom")
    snapshot = load(oom["snapshot"])
    assert snapshot["device_traces"] == [[]]
    states = {b["address"]: b["state"] for s in snapshot["segments"] for b in s["blocks"]}
    assert states[address] == "active_allocated"
    del x


def test_snapshot_on_oom_env(runtime_dir, monkeypatch):
    monkeypatch.setenv("VRAMTOP_SNAPSHOT_ON_OOM", "1")
    assert vramtop_probe.start().snapshot_on_oom is True
    vramtop_probe.stop()
    monkeypatch.setenv("VRAMTOP_SNAPSHOT_ON_OOM", "0")
    assert vramtop_probe.start().snapshot_on_oom is False


def test_a_failing_snapshot_at_the_oom_is_said_in_the_oom_message(live, client_of, monkeypatch):
    client = client_of(live)
    client.until("hello")

    def broken():
        raise RuntimeError("allocator busy")

    monkeypatch.setattr(torch.cuda.memory, "_snapshot", broken)
    fill_then_oom(MIB)
    oom = client.until("oom")
    assert oom["snapshot"] is None
    assert oom["snapshot_error"] == "torch.cuda.memory._snapshot() failed: RuntimeError: allocator busy"


# ---- on-demand snapshots ----------------------------------------------------------------------


def test_a_request_is_answered_started_then_done_with_the_file(live, client_of):
    client = client_of(live)
    client.until("hello")
    x = uint8(3 * MIB)
    request(client, "a1b2c3")
    started = answer(client, ("snapshot_started",))
    assert started["id"] == "a1b2c3" and started["v"] == 2
    done = answer(client)
    assert done["type"] == "snapshot_done" and done["id"] == "a1b2c3"
    # Where the file goes is said before it is written: a client that stops waiting names it.
    assert started["dir"] == os.path.dirname(done["path"])
    snapshot = load(done["path"])
    assert done["bytes"] == os.path.getsize(done["path"])
    assert done["segments"] == len(snapshot["segments"])
    assert done["trace_entries"] == len(snapshot["device_traces"][0]) > 0
    assert done["has_trace"] is True
    assert any(b["address"] == x.data_ptr() for s in snapshot["segments"] for b in s["blocks"])
    assert NAME.fullmatch(os.path.basename(done["path"]))["kind"] == "demand"
    del x


def test_answers_go_to_the_asking_client_only(live, client_of):
    asking, other = client_of(live), client_of(live)
    asking.until("hello")
    other.until("hello")
    request(asking, "mine")
    assert answer(asking)["type"] == "snapshot_done"
    live.stop()
    assert not [m for m in other.rest() if m["type"].startswith("snapshot_")]


def test_a_path_in_a_request_is_ignored(live, client_of, tmp_path):
    client = client_of(live)
    client.until("hello")
    elsewhere = tmp_path / "elsewhere.pickle"
    request(client, "p1", path=str(elsewhere), dir=str(tmp_path))
    done = answer(client)
    assert done["type"] == "snapshot_done"
    assert os.path.dirname(done["path"]) == live.snapshots.directory
    assert not elsewhere.exists()
    assert sorted(os.listdir(tmp_path)) == ["snapshots"]


@pytest.mark.parametrize(
    "line, echoed",
    [
        (b"not json\n", None),
        (b"[1, 2]\n", None),
        (b'{"v":2,"type":"stats","id":"s1"}\n', "s1"),
        (b'{"v":2,"type":"snapshot_request","id":"../etc/passwd"}\n', None),
        (b'{"v":2,"type":"snapshot_request","id":"' + b"a" * 65 + b'"}\n', None),
        (b'{"v":2,"type":"snapshot_request","id":""}\n', None),
        (b'{"v":2,"type":"snapshot_request","id":7}\n', None),
        (b'{"v":2,"type":"snapshot_request","id":"ok","pad":"' + b"x" * 5000 + b'"}\n', None),
        (b"\xff\xfe\n", None),
    ],
)
def test_a_bad_request_is_answered_and_the_connection_kept(live, client_of, line, echoed):
    client = client_of(live)
    client.until("hello")
    client.sock.sendall(line)
    failed = answer(client)
    assert failed["type"] == "snapshot_failed"
    assert failed["reason"] == "bad request" and failed["id"] == echoed
    request(client, "after")
    done = answer(client)
    assert done["type"] == "snapshot_done" and done["id"] == "after"


def test_an_over_long_line_without_a_newline_is_answered_once(live, client_of):
    client = client_of(live)
    client.until("hello")
    client.sock.sendall(b"x" * 10_000)
    assert answer(client)["reason"] == "bad request"
    client.sock.sendall(b"y" * 3000 + b"\n")  # the rest of the same line: skipped, no answer
    request(client, "next")
    assert answer(client)["id"] == "next"


def test_more_than_four_queued_requests_are_refused(live, client_of):
    client = client_of(live)
    client.until("hello")
    lines = b"".join(
        json.dumps({"v": 2, "type": "snapshot_request", "id": f"r{i}"}).encode() + b"\n"
        for i in range(6)
    )
    client.sock.sendall(lines)
    answers = [answer(client) for _ in range(6)]
    refused = [a for a in answers if a["type"] == "snapshot_failed"]
    assert [(a["id"], a["reason"]) for a in refused] == [("r4", "too many requests"), ("r5", "too many requests")]
    done = [a for a in answers if a["type"] == "snapshot_done"]
    assert [a["id"] for a in done] == ["r0", "r1", "r2", "r3"]
    assert len({a["path"] for a in done}) == 4


def test_a_request_before_cuda_is_initialised_fails_with_the_reason(runtime_dir, snapshot_dir, client_of):
    torch.cuda.standin_use_allocator(GIB)
    handle = vramtop_probe.start(record_history=True, snapshot_dir=snapshot_dir)
    client = client_of(handle)
    client.until("hello")
    request(client, "early")
    failed = answer(client)
    assert failed == {**failed, "type": "snapshot_failed", "id": "early",
                      "reason": "CUDA is not initialised in this process yet"}
    assert not os.path.exists(snapshot_dir)


def test_a_request_without_torch_fails_with_the_reason(runtime_dir, client_of, monkeypatch):
    monkeypatch.delitem(sys_modules(), "torch")
    handle = vramtop_probe.start()
    client = client_of(handle)
    client.until("hello")
    request(client, "no-torch")
    assert answer(client)["reason"] == "torch is not imported"


def sys_modules():
    import sys

    return sys.modules


def test_a_client_asking_during_an_oom_gets_its_own_snapshot(live, client_of):
    client = client_of(live)
    client.until("hello")
    seen: list[dict] = []

    def ask_while_failing(device, alloc, total, free):
        # Runs on the allocating thread inside the OOM, after the probe's observer: the probe
        # thread must still serve the request (the oom message may come first or later).
        request(client, "during")
        while not seen or seen[-1]["type"] != "snapshot_done":
            message = client.message()
            assert message is not None
            seen.append(message)

    torch._C._cuda_attach_out_of_memory_observer(ask_while_failing)
    address = fill_then_oom(64 * MIB)
    done = seen[-1]
    assert done["id"] == "during"
    ooms = [m for m in seen if m["type"] == "oom"]
    oom = ooms[0] if ooms else client.until("oom")
    assert oom["snapshot"] and oom["snapshot"] != done["path"]
    for path in (oom["snapshot"], done["path"]):
        states = {b["address"]: b["state"] for s in load(path)["segments"] for b in s["blocks"]}
        assert states[address] == "active_allocated"


# ---- files ----------------------------------------------------------------------------------


def test_files_are_0600_in_a_created_0700_folder_named_per_the_spec(live, client_of, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    client = client_of(live)
    client.until("hello")
    old = os.umask(0)
    try:
        request(client, "m")
        path = answer(client)["path"]
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(live.snapshots.directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    name = NAME.fullmatch(os.path.basename(path))
    assert name["host"] == re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())
    assert int(name["pid"]) == os.getpid()
    assert name["rank"] == "x"  # the rank is read at start, before RANK was set
    assert client_of(live).message()["rank"] is None  # and so is hello's
    assert not [f for f in os.listdir(live.snapshots.directory) if f.endswith(".tmp")]


def test_the_rank_is_in_the_file_name(runtime_dir, snapshot_dir, client_of, monkeypatch):
    monkeypatch.setenv("RANK", "6")
    torch.cuda.standin_use_allocator(GIB)
    x = uint8(1)
    handle = vramtop_probe.start(snapshot_dir=snapshot_dir)
    client = client_of(handle)
    client.until("hello")
    request(client, "r")
    assert NAME.fullmatch(os.path.basename(answer(client)["path"]))["rank"] == "6"
    del x


def test_the_folder_comes_from_the_env_then_xdg_state_home_then_home(monkeypatch, tmp_path):
    assert protocol.snapshot_dir({"VRAMTOP_SNAPSHOT_DIR": "/x/y", "XDG_STATE_HOME": "/s"}) == "/x/y"
    assert protocol.snapshot_dir({"XDG_STATE_HOME": "/s"}) == "/s/vramtop/snapshots"
    assert protocol.snapshot_dir({"XDG_STATE_HOME": "relative", "HOME": "/h"}) == (
        "/h/.local/state/vramtop/snapshots"
    )
    monkeypatch.setenv("VRAMTOP_SNAPSHOT_DIR", str(tmp_path / "from-env"))
    assert _files.SnapshotStore(None, None).directory == str(tmp_path / "from-env")


def test_at_most_eight_files_per_kind_are_kept(live, client_of):
    client = client_of(live)
    client.until("hello")
    paths = []
    for i in range(11):
        request(client, f"k{i}")
        paths.append(answer(client)["path"])
    remaining = sorted(os.path.join(live.snapshots.directory, f) for f in os.listdir(live.snapshots.directory))
    assert remaining == sorted(paths[-8:])
    # An OOM file is another kind: it does not push a demand file out.
    fill_then_oom(MIB)
    oom = client.until("oom")
    assert os.path.exists(oom["snapshot"]) and all(os.path.exists(p) for p in paths[-8:])


def test_a_full_disk_is_logged_once_and_never_raised(live, client_of, monkeypatch, caplog):
    real_write = os.write

    def full(fd, data):
        if threading.current_thread().name == "vramtop-probe":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    client = client_of(live)
    client.until("hello")
    reasons = []
    for i in range(2):
        request(client, f"full{i}")
        failed = answer(client)
        assert failed["type"] == "snapshot_failed"
        reasons.append(failed["reason"])
    assert all(r.startswith("disk full: ") and "-demand.pickle: No space left on device" in r for r in reasons)
    fill_then_oom(MIB)  # the training script sees its own OOM, nothing from the probe
    oom = client.until("oom")
    assert oom["snapshot"] is None and oom["snapshot_error"].startswith("disk full: ")
    warnings = [r for r in caplog.records if r.name == "vramtop_probe" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "disk full" in warnings[0].getMessage()
    assert live.running
    assert os.listdir(live.snapshots.directory) == []  # no temp file left behind


def test_another_owners_folder_is_refused(live, client_of, monkeypatch, caplog):
    os.makedirs(live.snapshots.directory, 0o700)
    real_uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 1)
    client = client_of(live)
    client.until("hello")
    request(client, "theirs")
    failed = answer(client)
    assert failed["type"] == "snapshot_failed"
    assert f"belongs to uid {real_uid}, not to this user" in failed["reason"]
    assert os.listdir(live.snapshots.directory) == []
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_file_in_place_of_the_folder_is_refused(live, client_of):
    os.makedirs(os.path.dirname(live.snapshots.directory), exist_ok=True)
    with open(live.snapshots.directory, "w") as f:
        f.write("not a folder")
    client = client_of(live)
    client.until("hello")
    request(client, "f")
    assert "is not a directory" in answer(client)["reason"]
