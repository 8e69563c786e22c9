#!/usr/bin/env python3
"""Whole-process timings of vramtop next to the Python tools people use.

Runs, in one run and interleaved (each round runs every row once, both sides,
alternating which side goes first), on the same files:

* `vramtop open FILE --summary`  vs  scripts/segsum-peer.py FILE (what
  PyTorch's `_memory_viz.py segsum` does: the C unpickler, restricted, and
  the segsum figures), on a real training snapshot and a generated one;
* `vramtop replay --verify FILE`  vs  ../shared/tools/replay.py FILE (the
  Python reference model), skipped with a reason when that file is absent;
* parse throughput: `parse_rss parse FILE` (the reader alone, in a fresh
  process) vs a restricted `pickle.load` of the same generated file;
* a 1 GB generated snapshot: the reader's time and peak RSS (VmHWM); the
  Python side is not run by default (it needs several times the file in
  memory; `--python-large` runs it);
* `vramtop --once --json` and `vramtop --once` (text) on 2 fake NVML GPUs
  vs  `nvitop -1`, both loading
  the project's fake `libnvidia-ml.so.1` (tests/fixtures/fake_nvml.c, built
  here with `cc`, plus scripts/fake-nvml-init-flags.c: the one entry point
  pynvml needs to start); skipped with the reason when nvitop is not
  installed, failed when it cannot start on the fake.

Python is started with this interpreter's real path (`sys.executable`,
resolved), never through a version-manager shim, which adds ~50 ms to every
start. Prints a Markdown table (min–median of the rounds, ratio of the
medians) with the machine's load before and after, and writes every sample
as JSON. Standard library only.

    python3 scripts/compare-peers.py [--rounds 9] [--json target/bench-data/compare-peers.json]

Needs the release build: `cargo build --release --bin vramtop --example
make-snapshot --example parse_rss`. Generated files are made once under
target/bench-data/ with make-snapshot.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "target", "bench-data")
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
PYTHON = os.path.realpath(sys.executable)
SEGSUM_PEER = os.path.join(ROOT, "scripts", "segsum-peer.py")
REAL_SUMMARY_FILE = "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle"

# A restricted unpickler, inline, for the parse row (the peer of the reader).
PICKLE_LOAD = (
    "import pickle,sys\n"
    "class P(pickle.Unpickler):\n"
    "    def find_class(self, m, n): raise pickle.UnpicklingError(m + '.' + n)\n"
    "P(open(sys.argv[1], 'rb')).load()\n"
)


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        with open("/proc/loadavg") as f:
            return "load average " + f.read().strip()


def run_once(argv, env=None):
    """Wall seconds and peak RSS (bytes) of one child; raises on failure."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {err.strip()[-400:]}")
    # Linux reports ru_maxrss in KiB.
    return seconds, usage.ru_maxrss * 1024


class Side:
    def __init__(self, label, argv, env=None):
        self.label = label
        self.argv = argv
        self.env = env
        self.seconds = []
        self.peak_rss = []
        self.error = None

    def run(self):
        if self.error:
            return
        try:
            seconds, rss = run_once(self.argv, self.env)
        except (RuntimeError, OSError) as e:
            self.error = str(e)
            return
        self.seconds.append(seconds)
        self.peak_rss.append(rss)

    def summary(self):
        if not self.seconds:
            return None
        return {
            "min_s": min(self.seconds),
            "median_s": statistics.median(self.seconds),
            "peak_rss_bytes": max(self.peak_rss),
        }


class Row:
    def __init__(self, work, ours, peer=None, skip_peer=None, file=None):
        self.work = work
        self.ours = ours
        self.peer = peer
        self.skip_peer = skip_peer
        self.file = file

    def run(self, round_index):
        sides = [self.ours] + ([self.peer] if self.peer else [])
        if round_index % 2:
            sides.reverse()
        for side in sides:
            side.run()


def ms(seconds):
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def span(side):
    s = side.summary()
    if s is None:
        return f"failed: {side.error.strip().splitlines()[-1][:160]}" if side.error else "-"
    low, mid = s["min_s"], s["median_s"]
    if low >= 1:
        return f"{low:.2f}–{mid:.2f} s"
    return f"{low * 1000:.1f}–{mid * 1000:.1f} ms"


def file_mb(path):
    return os.path.getsize(path) / 1e6


def build_fake_nvml():
    """The fake libnvidia-ml.so.1 in its own folder, or (None, why)."""
    out = os.path.join(DATA, "fake-nvml")
    lib = os.path.join(out, "libnvidia-ml.so.1")
    sources = [
        os.path.join(ROOT, "tests", "fixtures", "fake_nvml.c"),
        os.path.join(ROOT, "scripts", "fake-nvml-init-flags.c"),
    ]
    if os.path.exists(lib) and all(os.path.getmtime(lib) >= os.path.getmtime(s) for s in sources):
        return out, None
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return None, f"no C compiler ({cc})"
    os.makedirs(out, exist_ok=True)
    done = subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", lib, *sources, "-lpthread", "-ldl"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None, f"cannot build the fake NVML: {done.stderr.strip()[-300:]}"
    return out, None


def generated(make_snapshot, size, name, *extra):
    path = os.path.join(DATA, name)
    if os.path.exists(path):
        return path
    os.makedirs(DATA, exist_ok=True)
    print(f"generating {path} ({size}) ...", file=sys.stderr)
    subprocess.run([make_snapshot, "--size", size, *extra, path], check=True, stdout=sys.stderr)
    return path


def trace_entries(vramtop, path):
    done = subprocess.run([vramtop, "replay", "--verify", path, "--json"], capture_output=True, text=True)
    try:
        return json.loads(done.stdout)["trace_entries"]
    except (ValueError, KeyError):
        return "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (>= 7 for the docs)")
    parser.add_argument("--json", default=os.path.join(DATA, "compare-peers.json"))
    parser.add_argument("--profile", default="release", help="the target/ folder of the binaries (debug for a smoke test)")
    parser.add_argument("--parse-size", default="200MB", help="size of the generated file of the parse row")
    parser.add_argument("--large-size", default="1GB", help="size of the large generated file")
    parser.add_argument("--large-rounds", type=int, default=3, help="rounds of the large row")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--python-large", action="store_true", help="also unpickle the large file in Python")
    parser.add_argument("--nvitop", default=None, help="nvitop executable (default: target/bench-data/venv/bin/nvitop, then PATH)")
    args = parser.parse_args()

    binaries = os.path.join(ROOT, "target", args.profile)
    vramtop = os.path.join(binaries, "vramtop")
    make_snapshot = os.path.join(binaries, "examples", "make-snapshot")
    parse_rss = os.path.join(binaries, "examples", "parse_rss")
    for tool in (vramtop, make_snapshot, parse_rss):
        if not os.access(tool, os.X_OK):
            sys.exit(
                f"{tool} not found: cargo build --release --bin vramtop "
                "--example make-snapshot --example parse_rss"
            )
    if "shims" in sys.executable.split(os.sep):
        print(f"note: {sys.executable} is a shim; running Python as {PYTHON}", file=sys.stderr)

    small = generated(make_snapshot, "4MB", "model-4MB.pickle")
    medium = generated(make_snapshot, args.parse_size, f"model-{args.parse_size}.pickle")
    rows = []

    real = os.path.join(SHARED, "snapshots", REAL_SUMMARY_FILE)
    summary_files = [f for f in (real, small) if os.path.exists(f)]
    for path in summary_files:
        rows.append(
            Row(
                f"`open --summary` of {os.path.basename(path)} ({file_mb(path):.1f} MB)",
                Side("vramtop", [vramtop, "open", path, "--summary"]),
                Side("segsum peer", [PYTHON, SEGSUM_PEER, path]),
                file=path,
            )
        )
        # The same work as segsum: the final state's figures, no trace.
        rows.append(
            Row(
                f"`open --summary --no-trace` of {os.path.basename(path)} ({file_mb(path):.1f} MB)",
                Side("vramtop", [vramtop, "open", path, "--summary", "--no-trace"]),
                Side("segsum peer", [PYTHON, SEGSUM_PEER, path]),
                file=path,
            )
        )

    # The reference model replays one stream from an empty allocator: the
    # shared files start mid-run, so the trace is a generated one-stream one.
    replay_py = os.path.join(SHARED, "tools", "replay.py")
    one_stream = generated(make_snapshot, "4MB", "model-4MB-one-stream.pickle", "--one-stream")
    work = f"`replay --verify` of {os.path.basename(one_stream)} ({file_mb(one_stream):.1f} MB, {trace_entries(vramtop, one_stream)} events)"
    ours = Side("vramtop", [vramtop, "replay", "--verify", one_stream])
    if os.path.exists(replay_py):
        rows.append(Row(work, ours, Side("replay.py", [PYTHON, replay_py, one_stream]), file=one_stream))
    else:
        rows.append(Row(work, ours, skip_peer=f"{replay_py} is absent", file=one_stream))

    rows.append(
        Row(
            f"parse throughput, {os.path.basename(medium)} ({file_mb(medium):.0f} MB)",
            Side("parse_rss", [parse_rss, "parse", medium]),
            Side("pickle.load", [PYTHON, "-c", PICKLE_LOAD, medium]),
            file=medium,
        )
    )

    fake_dir, fake_why = build_fake_nvml()
    nvitop = args.nvitop or os.path.join(DATA, "venv", "bin", "nvitop")
    if not os.access(nvitop, os.X_OK):
        nvitop = shutil.which("nvitop")
    if fake_dir:
        env = dict(os.environ, LD_LIBRARY_PATH=fake_dir, FAKE_NVML_GPUS="2")
        ours = Side("vramtop", [vramtop, "--once", "--json", "--backend", "nvml"], env)
        # The text one-shot too: `nvitop -1` prints text, so this row is the
        # like-for-like one.
        ours_text = Side("vramtop", [vramtop, "--once", "--backend", "nvml"], env)
        if nvitop:
            peer = Side("nvitop", [nvitop, "-1"], env)
            rows.append(Row("`--once --json` on 2 fake NVML GPUs", ours, peer))
            rows.append(Row("`--once` (text) on 2 fake NVML GPUs", ours_text, peer))
        else:
            why = "nvitop is not installed (pip install nvitop into target/bench-data/venv)"
            rows.append(Row("`--once --json` on 2 fake NVML GPUs", ours, skip_peer=why))
            rows.append(Row("`--once` (text) on 2 fake NVML GPUs", ours_text, skip_peer=why))
    else:
        print(f"note: no --once row: {fake_why}", file=sys.stderr)

    # Both sides must agree on the figures before their times mean anything.
    checks = []
    for path in summary_files:
        theirs = subprocess.run([PYTHON, SEGSUM_PEER, "--json", path], capture_output=True, text=True)
        for flags in ([], ["--no-trace"]):
            ours = subprocess.run([vramtop, "open", path, "--summary", "--json", *flags],
                                  capture_output=True, text=True)
            if ours.returncode == 0 and theirs.returncode == 0:
                segsum = json.loads(ours.stdout)["total"]["segsum"]
                peer = json.loads(theirs.stdout)
                same = all(segsum[k] == peer[k] for k in ("total_reserved", "total_allocated", "total_free"))
                checks.append(f"{os.path.basename(path)} {' '.join(['--summary', *flags])}: "
                              f"segsum totals {'agree' if same else 'DIFFER'}")

    load_before = uptime()
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for row in rows:
            row.run(r)

    large_row = None
    if not args.skip_large:
        large = generated(make_snapshot, args.large_size, f"model-{args.large_size}.pickle")
        peer = Side("pickle.load", [PYTHON, "-c", PICKLE_LOAD, large]) if args.python_large else None
        large_row = Row(
            f"a {file_mb(large):.0f} MB generated snapshot: read (`parse_rss parse`)",
            Side("parse_rss", [parse_rss, "parse", large]),
            peer,
            skip_peer=None if peer else "not run: Python needs several times the file in memory (--python-large)",
            file=large,
        )
        large_summary = Row(
            f"`open --summary --no-trace` of the {file_mb(large):.0f} MB generated snapshot",
            Side("vramtop", [vramtop, "open", large, "--summary", "--no-trace"]),
            skip_peer="memory_viz fails above 1 GB; the peer reads the whole file",
        )
        for r in range(args.large_rounds):
            print(f"large round {r + 1}/{args.large_rounds}", file=sys.stderr)
            large_row.run(r)
            large_summary.run(r)
        rows.extend([large_row, large_summary])
    load_after = uptime()

    print(f"\nload before: {load_before}\nload after:  {load_after}")
    print(f"python: {PYTHON} ({sys.version.split()[0]}); rounds: {args.rounds}"
          + (f" ({args.large_rounds} for the large file)" if large_row else ""))
    for c in checks:
        print(f"check: {c}")
    print()
    print("| work | vramtop (min–median) | the peer (min–median) | ratio of medians | notes |")
    print("|---|---|---|---|---|")
    result_rows = []
    for row in rows:
        ours = row.ours.summary()
        peer = row.peer.summary() if row.peer else None
        ratio = f"{peer['median_s'] / ours['median_s']:.1f}×" if ours and peer else "-"
        notes = []
        if row.file and ours:
            mb = file_mb(row.file)
            notes.append(f"{mb / ours['median_s']:.0f} MB/s" if mb >= 50 else "")
            if mb >= 50:
                notes.append(f"peak RSS {ours['peak_rss_bytes'] / (1 << 20):.0f} MiB = "
                             f"{ours['peak_rss_bytes'] / os.path.getsize(row.file):.2f}× the file")
        if peer and row.file and file_mb(row.file) >= 50:
            notes.append(f"peer {file_mb(row.file) / peer['median_s']:.0f} MB/s")
        if row.skip_peer:
            notes.append(row.skip_peer)
        peer_text = span(row.peer) if row.peer else "-"
        if row.peer and row.peer.label:
            peer_text = f"{row.peer.label}: {peer_text}"
        print(f"| {row.work} | {span(row.ours)} | {peer_text} | {ratio} | {'; '.join(n for n in notes if n)} |")
        result_rows.append({
            "work": row.work,
            "file": row.file,
            "file_bytes": os.path.getsize(row.file) if row.file else None,
            "vramtop": {"argv": row.ours.argv, "seconds": row.ours.seconds,
                        "peak_rss_bytes": row.ours.peak_rss, "error": row.ours.error, **(ours or {})},
            "peer": None if not row.peer else {
                "label": row.peer.label, "argv": row.peer.argv, "seconds": row.peer.seconds,
                "peak_rss_bytes": row.peer.peak_rss, "error": row.peer.error, **(peer or {})},
            "peer_skipped": row.skip_peer,
        })
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({
            "load_before": load_before,
            "load_after": load_after,
            "python": PYTHON,
            "rounds": args.rounds,
            "checks": checks,
            "rows": result_rows,
        }, f, indent=2)
    print(f"\nsamples: {args.json}")


if __name__ == "__main__":
    main()
