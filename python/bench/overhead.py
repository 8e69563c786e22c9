"""Overhead of the vramtop probe on a training loop, with the stand-in torch (no GPU needed).

A "training step" is a pure-Python CPU loop of about --step-ms milliseconds. Pure Python holds
the GIL the whole time, so every millisecond the probe thread spends is taken from the step:
this is the worst case for a real training loop, whose CUDA calls mostly release the GIL.

Four figures:
1. steps/s without the probe and with the probe plus one connected client (a separate process
   that reads everything), alternating in rounds; on a busy machine the noise between rounds
   can be larger than the probe's cost, so the spread is printed too;
1b. process CPU seconds per step (training plus probe thread) without and with the probe, which
   other processes' load does not disturb;
2. the probe thread's CPU time per second of wall time during the "with" phases;
3. the cost of one stats tick and one segments tick, timed directly over many repetitions,
   and what they add up to per second at the chosen rates;
4. history recording (``--record-history``): process CPU per step of an allocating step
   (--history-allocs torch.empty calls and as many frees, on the stand-in's allocator model)
   with recording off and on (100 000 entries, stacks as the probe asks), alternating in rounds,
   plus the size of a snapshot taken with the full ring buffer and what taking it costs.

Usage: python3 python/bench/overhead.py [--rounds 5] [--seconds 6] [--step-ms 50]
       [--segments 300] [--stats-interval 1.0] [--segments-interval 5.0]
       [--history-allocs 200] [--history-steps 200] [--only-history]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(PYTHON_DIR, "tests", "stand_in"))
sys.path.insert(0, PYTHON_DIR)

import torch  # noqa: E402  (the stand-in)
import vramtop_probe  # noqa: E402
from vramtop_probe import _server  # noqa: E402

READER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "s.connect(sys.argv[1])\n"
    "while s.recv(1 << 20):\n"
    "    pass\n"
)


def busy(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i
    return total


def calibrate(step_s: float) -> int:
    iterations = 100_000
    while True:
        started = time.perf_counter()
        busy(iterations)
        took = time.perf_counter() - started
        if took > 0.2:
            return max(1, int(iterations * step_s / took))
        iterations *= 2


def run_steps(iterations: int, seconds: float) -> tuple[float, float]:
    """(steps per wall second, process CPU seconds per step) over about ``seconds``."""
    steps = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        busy(iterations)
        steps += 1
    wall = time.perf_counter() - started
    return steps / wall, (time.process_time() - cpu_started) / steps


def per_call_ms(function, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        function()
    return (time.perf_counter() - started) * 1000 / repeat


def allocating_step(allocs: int, sizes: list[int]) -> None:
    """``allocs`` tensors alive at once, then all freed: what a step does to the allocator."""
    live = [torch.empty(sizes[i % len(sizes)], dtype=torch.uint8, device="cuda") for i in range(allocs)]
    del live


def history_overhead(rounds: int, steps: int, allocs: int) -> None:
    """Figure 4: CPU per allocating step with history recording off and on."""
    torch.cuda.standin_use_allocator(80 << 30)
    sizes = [1000, 4096, 300_000, 2 << 20, 6 << 20, 24 << 20, 512, 70_000]
    allocating_step(allocs, sizes)  # warm: segments exist, later steps reuse cached blocks
    off, on = [], []
    for _ in range(rounds):
        for recording, out in ((False, off), (True, on)):
            torch.cuda.memory._record_memory_history(
                enabled="all" if recording else None, context="all", stacks="all",
                max_entries=_server.DEFAULT_HISTORY_ENTRIES,
            )
            started = time.process_time()
            for _ in range(steps):
                allocating_step(allocs, sizes)
            out.append((time.process_time() - started) / steps)
    # The ring buffer is full now (rounds * steps * allocs * 3 entries > 100 000 for defaults).
    taken = time.perf_counter()
    snapshot = torch.cuda.memory._snapshot()
    snapshot_ms = (time.perf_counter() - taken) * 1000
    taken = time.perf_counter()
    data = pickle.dumps(snapshot, protocol=4)
    pickle_ms = (time.perf_counter() - taken) * 1000
    entries = sum(len(t) for t in snapshot["device_traces"])
    torch.cuda.memory._record_memory_history(enabled=None)
    step_off, step_on = statistics.median(off), statistics.median(on)
    print(
        f"history recording: step of {allocs} allocations + {allocs} frees on the stand-in "
        f"allocator model: off {step_off * 1000:.3f} ms, on {step_on * 1000:.3f} ms CPU per step "
        f"(+{(step_on - step_off) * 1e6 / (3 * allocs):.2f} us per trace entry, "
        f"{(step_on / step_off - 1) * 100:+.1f} % of this allocation-only step; medians of "
        f"{rounds} rounds x {steps} steps)"
    )
    print(
        f"snapshot with a full ring buffer: {entries} trace entries, "
        f"{len(snapshot['segments'])} segments, pickle {len(data) / (1 << 20):.1f} MiB; "
        f"_snapshot() {snapshot_ms:.0f} ms, pickling {pickle_ms:.0f} ms (on the probe thread)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds per phase")
    parser.add_argument("--step-ms", type=float, default=50.0)
    parser.add_argument("--segments", type=int, default=300)
    parser.add_argument("--stats-interval", type=float, default=1.0)
    parser.add_argument("--segments-interval", type=float, default=5.0)
    parser.add_argument("--history-allocs", type=int, default=200)
    parser.add_argument("--history-steps", type=int, default=200)
    parser.add_argument("--only-history", action="store_true", help="figure 4 only")
    options = parser.parse_args()
    if options.only_history:
        history_overhead(options.rounds, options.history_steps, options.history_allocs)
        return

    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="vt")
    torch.cuda.standin_configure(segments=options.segments)
    iterations = calibrate(options.step_ms / 1000)

    # 3. Direct cost of each tick, on this thread (same code the probe thread runs).
    probe = _server.Probe(options.stats_interval, options.segments_interval)
    stats_ms = per_call_ms(lambda: probe._stats_lines(probe._collect_stats()), 200)
    segments_ms = per_call_ms(lambda: probe._segments_lines([0]), 50)
    segments_bytes = len(probe._segments_lines([0])[0])
    stats_bytes = len(probe._stats_lines(probe._collect_stats())[0])
    tick_ms_per_s = stats_ms / options.stats_interval + segments_ms / options.segments_interval

    # 1 and 2. Steps per second without and with the probe and a reading client.
    without, with_probe, busy_share = [], [], []
    cpu_without, cpu_with = [], []
    for _ in range(options.rounds):
        rate, cpu = run_steps(iterations, options.seconds)
        without.append(rate)
        cpu_without.append(cpu)
        handle = vramtop_probe.start(options.stats_interval, options.segments_interval)
        if handle.error:
            sys.exit(f"the probe did not start: {handle.error}")
        reader = subprocess.Popen([sys.executable, "-c", READER, handle.path])
        while handle.clients < 1:
            time.sleep(0.01)
        busy_before, wall_before = handle.busy_s, time.perf_counter()
        rate, cpu = run_steps(iterations, options.seconds)
        with_probe.append(rate)
        cpu_with.append(cpu)
        busy_share.append((handle.busy_s - busy_before) / (time.perf_counter() - wall_before))
        handle.stop()
        reader.wait(10)

    mean_without, mean_with = statistics.mean(without), statistics.mean(with_probe)
    spread = (max(without) - min(without)) / mean_without * 100
    print(
        f"workload: {options.step_ms:.0f} ms pure-Python steps; stand-in torch with "
        f"{len(torch.cuda.memory_stats(0))} stats keys and {options.segments} segments "
        f"(stats line {stats_bytes / 1024:.1f} KiB, segments line {segments_bytes / 1024:.1f} KiB); "
        f"rates: stats every {options.stats_interval:g} s, segments every {options.segments_interval:g} s"
    )
    print(
        f"steps/s without probe: {mean_without:.3f}  with probe + 1 client: {mean_with:.3f}  "
        f"slowdown: {(1 - mean_with / mean_without) * 100:+.2f} %  "
        f"(round-to-round spread without probe: {spread:.2f} %; {options.rounds} rounds x "
        f"{options.seconds:g} s)"
    )
    step_cpu_without, step_cpu_with = statistics.median(cpu_without), statistics.median(cpu_with)
    print(
        f"process CPU per step (main + probe threads; less sensitive to other processes' load): "
        f"without {step_cpu_without * 1000:.2f} ms, with {step_cpu_with * 1000:.2f} ms, "
        f"overhead {(step_cpu_with / step_cpu_without - 1) * 100:+.2f} % (medians of the rounds)"
    )
    print(
        f"probe thread CPU: {statistics.mean(busy_share) * 1000:.3f} ms per second "
        f"= {statistics.mean(busy_share) * 100:.3f} % of wall time"
    )
    print(
        f"cost per tick: stats {stats_ms:.3f} ms, segments {segments_ms:.3f} ms -> "
        f"{tick_ms_per_s:.3f} ms per second = {tick_ms_per_s / 10:.3f} % of wall time"
    )
    history_overhead(options.rounds, options.history_steps, options.history_allocs)


if __name__ == "__main__":
    main()
