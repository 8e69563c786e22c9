"""The stand-in torch's allocator model and memory history behave as PyTorch's do."""

from __future__ import annotations

import importlib.util
import os
import pickle
import random
import shutil
import subprocess

import pytest
import torch

MIB = 1 << 20
GIB = 1 << 30
REFERENCE_MODEL = "/work/shared/tools/model.py"


@pytest.fixture
def allocator():
    torch.cuda.standin_use_allocator(GIB)
    yield torch.cuda
    torch.cuda.memory._record_memory_history(enabled=None)


def uint8(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def test_cuda_is_initialised_by_the_first_allocation(allocator):
    assert not torch.cuda.is_initialized()
    assert torch.cuda.memory_stats() == {}
    x = uint8(1)
    assert torch.cuda.is_initialized()
    assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == 512
    del x


def test_no_trace_entries_are_kept_without_recording(allocator):
    keep = [uint8(n) for n in (1, 3 * MIB, 30 * MIB)]
    snapshot = torch.cuda.memory._snapshot()
    assert snapshot["device_traces"] == [[]]
    assert len(snapshot["segments"]) == 3
    assert all(b["frames"] == [] for s in snapshot["segments"] for b in s["blocks"])
    del keep


def test_recorded_entries_have_the_keys_and_actions_pytorch_writes(allocator):
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=100)
    x = uint8(1000)
    del x
    big = uint8(5 * MIB)
    del big
    torch.cuda.empty_cache()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    actions = [e["action"] for e in trace]
    assert actions == [
        "segment_alloc", "alloc", "free_requested", "free_completed",
        "segment_alloc", "alloc", "free_requested", "free_completed",
        "segment_free", "segment_free",
    ]
    for entry in trace:
        assert set(entry) == {"action", "addr", "size", "stream", "time_us", "frames"}
        assert entry["stream"] == 0 and isinstance(entry["time_us"], int)
    assert trace[1]["size"] == 1000  # the unrounded request
    assert trace[0]["size"] == 2 * MIB and trace[4]["size"] == 20 * MIB
    # Frames name the caller, innermost first, with no stand-in frames.
    names = [f["name"] for f in trace[1]["frames"]]
    assert names[:2] == ["uint8", "test_recorded_entries_have_the_keys_and_actions_pytorch_writes"]
    assert set(trace[1]["frames"][0]) == {"filename", "line", "name"}


def test_the_trace_is_a_ring_buffer_of_max_entries(allocator):
    torch.cuda.memory._record_memory_history(max_entries=5)
    for _ in range(10):
        x = uint8(1)
        del x
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    assert len(trace) == 5
    # The newest five, oldest first: ... alloc, free_requested, free_completed.
    assert [e["action"] for e in trace][-3:] == ["alloc", "free_requested", "free_completed"]
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)


def test_turning_history_off_clears_the_trace_and_stops_recording(allocator):
    torch.cuda.memory._record_memory_history(max_entries=100)
    x = uint8(1)
    torch.cuda.memory._record_memory_history(enabled=None)
    del x
    assert torch.cuda.memory._snapshot()["device_traces"] == [[]]


def test_a_snapshot_entry_appears_in_the_next_snapshot(allocator):
    torch.cuda.memory._record_memory_history(max_entries=100)
    x = uint8(1)
    first = torch.cuda.memory._snapshot()["device_traces"][0]
    second = torch.cuda.memory._snapshot()["device_traces"][0]
    assert [e["action"] for e in first] == ["segment_alloc", "alloc"]
    assert second[-1]["action"] == "snapshot" and second[-1]["size"] == 512
    del x


def test_bad_history_arguments_are_refused(allocator):
    with pytest.raises(ValueError):
        torch.cuda.memory._record_memory_history(enabled="everything")
    with pytest.raises(ValueError):
        torch.cuda.memory._record_memory_history(stacks="cpp")


def test_blocks_split_merge_and_keep_stale_requested_sizes(allocator):
    a = uint8(MIB + 1)
    b = uint8(MIB + 1)
    stats = torch.cuda.memory_stats()
    assert stats["reserved_bytes.all.current"] == 20 * MIB
    assert stats["inactive_split.all.current"] == 1
    address_a = a.data_ptr()
    del a
    stats = torch.cuda.memory_stats()
    assert (stats["inactive_split.all.current"], stats["inactive_split_bytes.all.current"]) == (2, 19_922_432)
    del b
    [segment] = torch.cuda.memory_snapshot()
    assert segment["blocks"] == [
        {"address": address_a, "size": 20 * MIB, "requested_size": MIB + 1, "state": "inactive", "frames": []}
    ]
    torch.cuda.empty_cache()
    assert torch.cuda.memory_stats()["reserved_bytes.all.current"] == 0


@pytest.mark.parametrize(
    "request_bytes, segment_bytes, block_bytes",
    [(1, 2 * MIB, 512), (MIB, 2 * MIB, MIB), (MIB + 1, 20 * MIB, MIB + 512),
     (10 * MIB - 1, 10 * MIB, 10 * MIB), (11 * MIB, 12 * MIB, 12 * MIB), (21 * MIB, 22 * MIB, 22 * MIB)],
)
def test_segment_and_block_sizes_follow_the_rounding_rules(allocator, request_bytes, segment_bytes, block_bytes):
    x = uint8(request_bytes)
    [segment] = torch.cuda.memory_snapshot()
    assert segment["total_size"] == segment_bytes
    assert segment["blocks"][0]["size"] == block_bytes
    assert segment["segment_type"] == ("small" if block_bytes <= MIB else "large")
    del x


def test_an_oom_releases_cached_segments_then_calls_the_observers_before_raising(allocator):
    seen = []

    def observer(device, alloc, total, free):
        # Called on the allocating thread while the failing request's caller is still live.
        snapshot = torch.cuda.memory._snapshot()
        seen.append((device, alloc, total, free, snapshot))

    torch._C._cuda_attach_out_of_memory_observer(observer)
    torch.cuda.memory._record_memory_history(max_entries=1000)
    cached = uint8(50 * MIB)
    del cached  # a whole free segment, cached
    held = uint8(100 * MIB)  # too big for the cached one: a segment of its own
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 1000\.00 MiB\. GPU 0"):
        uint8(1000 * MIB)
    [(device, alloc, total, free, snapshot)] = seen
    assert (device, alloc, total, free) == (0, 1000 * MIB, GIB, GIB - 100 * MIB)
    actions = [e["action"] for e in snapshot["device_traces"][0]]
    assert actions[-2:] == ["segment_free", "oom"]  # the cached 600 MiB was released first
    oom = snapshot["device_traces"][0][-1]
    assert oom["device_free"] == GIB - 100 * MIB and oom["size"] == 1000 * MIB and "addr" not in oom
    stats = torch.cuda.memory_stats()
    assert (stats["num_ooms"], stats["num_alloc_retries"], stats["num_device_free"]) == (1, 1, 1)
    assert isinstance(torch.OutOfMemoryError("x"), RuntimeError)
    del held


def test_dump_snapshot_writes_the_snapshot_as_a_pickle(allocator, tmp_path):
    torch.cuda.memory._record_memory_history(max_entries=100)
    x = uint8(12345)
    path = tmp_path / "dump.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert set(loaded) == {"segments", "device_traces", "allocator_settings"}
    assert loaded["segments"][0]["blocks"][0]["requested_size"] == 12345
    assert loaded["allocator_settings"]["max_split_size"] == -1
    del x


def _reference_model():
    if not os.path.exists(REFERENCE_MODEL):
        pytest.skip(f"the reference model {REFERENCE_MODEL} is not on this machine")
    spec = importlib.util.spec_from_file_location("reference_model", REFERENCE_MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_allocations_match_the_reference_model_layout_and_stats(allocator):
    model = _reference_model()
    capacity = 400 * MIB
    torch.cuda.standin_use_allocator(capacity)
    next_address = [torch.cuda._caching.BASE_ADDRESS]
    sizes: dict[int, int] = {}

    def cuda_malloc(n):
        if sum(sizes.values()) + n > capacity:
            return None
        address = next_address[0]
        next_address[0] += n
        sizes[address] = n
        return address

    reference = model.Allocator(cuda_malloc, lambda p: sizes.pop(p))
    rng = random.Random(5)
    live: list[tuple[torch.Tensor, int]] = []
    for _ in range(3000):
        roll = rng.random()
        if roll < 0.55 or not live:
            n = rng.choice([rng.randint(1, MIB), rng.randint(MIB, 12 * MIB), rng.randint(1, 60 * MIB)])
            try:
                expected = reference.malloc(n)
            except MemoryError:
                with pytest.raises(torch.OutOfMemoryError):
                    uint8(n)
                continue
            tensor = uint8(n)
            assert tensor.data_ptr() == expected
            live.append((tensor, expected))
        elif roll < 0.98:
            tensor, address = live.pop(rng.randrange(len(live)))
            reference.free(address)
            del tensor
        else:
            reference.empty_cache()
            torch.cuda.empty_cache()
    got = [
        (s["address"], s["total_size"], s["segment_type"],
         [(b["size"], b["state"], b["requested_size"]) for b in s["blocks"]])
        for s in torch.cuda.memory_snapshot()
    ]
    assert got == reference.segments()
    stats = torch.cuda.memory_stats()
    for key, value in reference.flat_stats().items():
        assert stats[key] == value, key
    assert stats["num_ooms"] == reference.num_ooms > 0
    assert stats["num_alloc_retries"] == reference.num_alloc_retries
    del live


def test_a_dumped_snapshot_replays_as_a_full_match_in_vramtop(allocator, tmp_path):
    binary = os.environ.get("VRAMTOP_BIN")
    if not binary:
        pytest.skip("VRAMTOP_BIN is not set (the path of a built vramtop binary)")
    assert shutil.which(binary) or os.path.exists(binary), binary
    torch.cuda.standin_use_allocator(300 * MIB)
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    rng = random.Random(11)
    live = []
    for _ in range(400):
        if rng.random() < 0.6 or not live:
            try:
                live.append(uint8(rng.choice([rng.randint(1, MIB), rng.randint(MIB, 40 * MIB)])))
            except torch.OutOfMemoryError:
                pass
        else:
            live.pop(rng.randrange(len(live)))
    path = tmp_path / "standin.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    done = subprocess.run([binary, "replay", str(path)], capture_output=True, text=True, timeout=120)
    assert "result: FULL MATCH" in done.stdout, done.stdout + done.stderr
    assert "from an empty allocator (full history)" in done.stdout
    assert done.returncode == 0
    del live
