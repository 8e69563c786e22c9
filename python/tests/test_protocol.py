"""What a client receives: message order, shapes and figures (PROBE-PROTOCOL v1)."""

from __future__ import annotations

import json
import os
import random
import socket
import sys

import torch
import vramtop_probe
from vramtop_probe import _protocol as protocol

from conftest import wait_for

GIB = 1 << 30
MIB = 1 << 20


def test_hello_is_the_first_line_and_describes_the_process(probe, client_of):
    client = client_of(probe)
    hello = client.message()
    assert hello["type"] == "hello"
    assert hello["v"] == 2
    assert hello["pid"] == os.getpid()
    assert hello["host"] == socket.gethostname()
    assert hello["argv"] == sys.argv
    assert hello["torch"] == "2.5.1+standin"
    assert hello["devices"] == [0]
    assert hello["stats_interval_s"] == 0.05
    assert hello["segments_interval_s"] == 0.1
    assert isinstance(hello["time"], float)


def test_stats_and_segments_follow_hello_at_once(probe, client_of):
    client = client_of(probe)
    kinds = [client.message()["type"] for _ in range(3)]
    assert kinds == ["hello", "stats", "segments"]


def test_stats_are_exactly_memory_stats_of_each_device(probe, client_of):
    client = client_of(probe)
    stats = client.until("stats")
    assert stats["v"] == 2 and stats["device"] == 0
    assert stats["stats"] == torch.cuda.memory_stats(0)
    assert len(stats["stats"]) == 122
    # The stand-in's default figures, which the Rust end-to-end test also relies on.
    assert stats["stats"]["allocated_bytes.all.current"] == GIB
    assert stats["stats"]["reserved_bytes.all.current"] == 3 * GIB // 2


def test_stats_repeat_every_interval_with_current_figures(probe, client_of):
    client = client_of(probe)
    client.until("stats")
    torch.cuda.standin_configure(segments=7)
    wanted = 7 * 20 * MIB
    for _ in range(200):
        stats = client.until("stats")
        if stats["stats"]["reserved_bytes.all.current"] == wanted:
            break
    else:
        raise AssertionError("new figures never arrived")


def test_segments_are_compact_triples_in_address_order(probe, client_of):
    client = client_of(probe)
    segments = client.until("segments")
    assert segments["device"] == 0
    got = segments["segments"]
    assert len(got) == 3
    assert [s["address"] for s in got] == sorted(s["address"] for s in got)
    assert sum(s["total_size"] for s in got) == 3 * GIB // 2
    first = got[0]
    assert set(first) == {
        "address", "total_size", "stream", "segment_type", "allocated_size", "active_size",
        "requested_size", "is_expandable", "blocks",
    }
    assert first["blocks"] == [[768 * MIB, 768 * MIB - 512, "active_allocated"], [256 * MIB, 0, "inactive"]]
    states = {b[2] for s in got for b in s["blocks"]}
    assert states == {"active_allocated", "active_pending_free", "inactive"}
    allocated = sum(b[0] for s in got for b in s["blocks"] if b[2] == "active_allocated")
    assert allocated == GIB


def test_segments_and_blocks_are_sorted_by_address_whatever_the_snapshot_order():
    snapshot = torch.cuda.memory_snapshot()
    for seg in snapshot:
        seg["blocks"].reverse()
    random.Random(7).shuffle(snapshot)
    message = json.loads(protocol.segments_lines(0, snapshot))
    assert [s["address"] for s in message["segments"]] == sorted(s["address"] for s in snapshot)
    assert message["segments"][0]["blocks"][0] == [768 * MIB, 768 * MIB - 512, "active_allocated"]


def test_segments_of_other_devices_are_left_out():
    torch.cuda.standin_configure(devices=2)
    snapshot = torch.cuda.memory_snapshot()
    assert len(snapshot) == 6
    for device in (0, 1):
        message = json.loads(protocol.segments_lines(device, snapshot))
        assert message["device"] == device
        assert len(message["segments"]) == 3


def test_a_segments_line_over_one_mib_is_cut_to_fit_and_says_how_many_were_left_off():
    torch.cuda.standin_configure(segments=20_000)
    snapshot = torch.cuda.memory_snapshot()
    line = protocol.segments_lines(0, snapshot)
    assert len(line) <= protocol.MAX_LINE_BYTES
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    message = json.loads(line)
    kept = len(message["segments"])
    assert 0 < kept < 20_000
    assert message["truncated"] == 20_000 - kept
    # The kept ones are the lowest addresses, in order.
    lowest = sorted(s["address"] for s in snapshot)[:kept]
    assert [s["address"] for s in message["segments"]] == lowest


def test_every_line_on_the_wire_is_bounded_json_with_version_2(runtime_dir, client_of):
    torch.cuda.standin_configure(segments=20_000)
    # Slow segments: building 20 000 segments takes a while and the client must keep up.
    handle = vramtop_probe.start(stats_interval=0.05, segments_interval=5.0)
    client = client_of(handle)
    for _ in range(6):
        line = client.line()
        assert line is not None and len(line) <= vramtop_probe.MAX_LINE_BYTES
        message = json.loads(line)
        assert message["v"] == 2
    assert {json.loads(l)["type"] for l in client.raw_lines} >= {"hello", "stats", "segments"}


def test_only_devices_the_process_uses_are_reported(runtime_dir, client_of):
    torch.cuda.standin_configure(devices=4, used_devices={0, 2}, current=0)
    handle = vramtop_probe.start(stats_interval=0.05, segments_interval=0.05)
    client = client_of(handle)
    assert client.message()["devices"] == [0, 2]
    seen = {(m["type"], m["device"]) for m in (client.message() for _ in range(4))}
    assert seen == {("stats", 0), ("stats", 2), ("segments", 0), ("segments", 2)}


def test_without_cuda_initialised_no_device_is_reported_and_torch_is_not_asked(runtime_dir, client_of):
    torch.cuda.standin_configure(initialized=False)
    handle = vramtop_probe.start(stats_interval=0.02, segments_interval=0.02)
    client = client_of(handle)
    hello = client.message()
    assert hello["type"] == "hello" and hello["devices"] == []
    handle.stop()
    assert [m["type"] for m in client.rest()] == ["bye"]
    # memory_stats is never called before CUDA is initialised (no CUDA context on idle GPUs).
    assert torch.cuda.standin_stats_calls() == 0


def test_devices_appear_once_the_script_initialises_cuda(runtime_dir, client_of):
    torch.cuda.standin_configure(initialized=False)
    handle = vramtop_probe.start(stats_interval=0.02, segments_interval=0.02)
    client = client_of(handle)
    assert client.message()["devices"] == []
    torch.cuda.standin_configure(initialized=True)
    assert client.until("stats")["device"] == 0


def test_before_the_script_imports_torch_hello_has_no_devices(runtime_dir, client_of, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delitem(sys.modules, "torch.cuda")
    handle = vramtop_probe.start(stats_interval=0.02, segments_interval=0.02)
    client = client_of(handle)
    hello = client.message()
    assert hello["devices"] == []
    # The stand-in is no installed distribution, so the version is unknown until import.
    assert hello["torch"] is None
    monkeypatch.undo()
    assert client.until("stats")["device"] == 0


def test_oom_observer_sends_an_oom_message_with_the_figures(probe, client_of):
    client = client_of(probe)
    client.until("hello")
    wait_for(lambda: len(torch.cuda.standin_observers()) == 1, "the OOM observer to be attached")
    # PyTorch's observer arguments: device, alloc, total (or the allowed maximum), free.
    torch.cuda.standin_fire_oom(0, 2 * GIB, 80 * GIB, 5 * MIB)
    oom = client.until("oom")
    assert oom["v"] == 2 and oom["device"] == 0
    assert (oom["alloc_bytes"], oom["device_total"], oom["device_free"]) == (2 * GIB, 80 * GIB, 5 * MIB)
    assert oom["device_allocated"] == oom["device_total"], "the v1 name of the same figure"
    assert oom["message"] == (
        "CUDA out of memory on device 0: tried to allocate 2.00 GiB of 80.0 GiB (the device's "
        "memory or the allowed maximum), 5.00 MiB free on the device"
    )
    # The figures right after the failure follow.
    assert client.message()["type"] == "stats"


def test_the_oom_observer_is_attached_once_per_process(runtime_dir, client_of):
    first = vramtop_probe.start(stats_interval=0.02)
    wait_for(lambda: len(torch.cuda.standin_observers()) == 1, "the OOM observer")
    first.stop()
    second = vramtop_probe.start(stats_interval=0.02)
    assert second is not first and second.running
    client = client_of(second)
    for _ in range(5):  # several ticks, each of which checks the observer
        client.until("stats")
    assert len(torch.cuda.standin_observers()) == 1


def test_a_torch_without_the_oom_observer_is_said_once_in_the_log(runtime_dir, monkeypatch, caplog):
    caplog.set_level("INFO", logger="vramtop_probe")
    monkeypatch.delattr(torch._C, "_cuda_attach_out_of_memory_observer")
    handle = vramtop_probe.start(stats_interval=0.02)
    wait_for(
        lambda: any("out_of_memory_observer" in r.getMessage() for r in caplog.records),
        "the log line",
    )
    handle.stop()
    handle = vramtop_probe.start(stats_interval=0.02)
    handle.stop()
    said = [r for r in caplog.records if "out_of_memory_observer" in r.getMessage()]
    assert len(said) == 1
    assert handle.error is None


def test_stop_sends_bye_and_ends_the_stream(probe, client_of):
    client = client_of(probe)
    client.until("hello")
    probe.stop()
    rest = client.rest()
    assert rest[-1]["type"] == "bye" and rest[-1]["reason"] == "stop" and rest[-1]["v"] == 2
    assert not probe.running
    assert not os.path.exists(probe.path)


def test_module_stop_stops_the_running_probe(probe, client_of):
    client = client_of(probe)
    client.until("hello")
    vramtop_probe.stop()
    assert client.rest()[-1]["type"] == "bye"
    assert vramtop_probe.current() is None


def test_non_finite_floats_in_memory_stats_become_null_and_the_line_stays_json():
    line = protocol.encode(protocol.stats(0, {"a": 1, "b": float("nan"), "c": 2.5, "d": float("inf")}))
    assert json.loads(line)["stats"] == {"a": 1, "b": None, "c": 2.5, "d": None}


def test_a_huge_argv_is_cut_so_that_hello_stays_within_the_line_bound():
    argv = ["train.py"] + ["x" * 10_000] * 5_000
    line = protocol.encode(protocol.hello([0], 1.0, 5.0, "2.5.1", argv))
    assert len(line) <= protocol.MAX_LINE_BYTES
    hello = json.loads(line)
    assert hello["argv"][0] == "train.py"
    assert hello["argv"][1] == "x" * protocol.MAX_ARG_CHARS
    assert 1 < len(hello["argv"]) < protocol.MAX_ARGS
    many = json.loads(protocol.encode(protocol.hello([0], 1.0, 5.0, None, ["a"] * 5_000)))
    assert len(many["argv"]) == protocol.MAX_ARGS
