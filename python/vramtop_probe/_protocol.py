"""Wire format of the vramtop probe protocol, version 2 (see docs/probe-protocol.md).

Pure functions only: socket paths, message builders and the line encoder. The server in
``_server.py`` decides when to send what.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import sys
import time
from typing import Any, Iterable, Mapping

VERSION = 2
# Longest line a client may send, in bytes, newline included.
MAX_REQUEST_BYTES = 4096
# A request id: what a client may choose, echoed in the answers.
REQUEST_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# The env vars that give a process's rank, local rank and world size, torchrun's names first.
RANK_VARS = {
    "rank": ("RANK", "SLURM_PROCID"),
    "local_rank": ("LOCAL_RANK", "SLURM_LOCALID"),
    "world_size": ("WORLD_SIZE", "SLURM_NTASKS"),
}
CAPABILITIES = ("snapshot",)
# Largest line a client accepts, in bytes, newline included.
MAX_LINE_BYTES = 1_048_576
# Longest single argv item kept in hello, in characters; a longer one is cut (the rest would
# only risk the line bound).
MAX_ARG_CHARS = 4096
# Most argv items kept in hello.
MAX_ARGS = 1000
# Most bytes the encoded argv may take in hello; later items are left off (keeps hello, whose
# other fields are small, well under MAX_LINE_BYTES).
MAX_ARGV_BYTES = 512 * 1024
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")


def username() -> str:
    """The effective user's login name, or the numeric uid when it has no passwd entry.

    Taken from the uid rather than $USER so that vramtop (running as the same user) finds the
    same /tmp directory even under sudo or in containers with a stale environment.
    """
    uid = os.geteuid()
    try:
        import pwd  # Unix only; this module must import anywhere

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


# Names the one folder the probe listens in, replacing the defaults; vramtop reads it too.
PROBE_DIR_ENV = "VRAMTOP_PROBE_DIR"


def socket_dir(env: Mapping[str, str] | None = None) -> str:
    """``$VRAMTOP_PROBE_DIR`` when set and not empty (vramtop then looks there alone), else
    ``$XDG_RUNTIME_DIR/vramtop`` when XDG_RUNTIME_DIR is a directory, else /tmp/vramtop-<user>."""
    env = os.environ if env is None else env
    chosen = env.get(PROBE_DIR_ENV, "")
    if chosen:
        return chosen
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "vramtop")
    return os.path.join("/tmp", f"vramtop-{username()}")


def ranks(env: Mapping[str, str] | None = None) -> dict[str, int | None]:
    """rank, local_rank and world_size from the launcher's env vars; None when unset or bad.

    Each takes torchrun's name (RANK, LOCAL_RANK, WORLD_SIZE) and, when that is absent, SLURM's
    (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS). A value that is not a non-negative decimal
    integer counts as unset.
    """
    env = os.environ if env is None else env
    out: dict[str, int | None] = {}
    for key, names in RANK_VARS.items():
        value = None
        for name in names:
            if name in env:
                text = env[name].strip()
                value = int(text) if text.isdigit() and text.isascii() else None
                break
        out[key] = value
    return out


def snapshot_dir(env: Mapping[str, str] | None = None) -> str:
    """``$VRAMTOP_SNAPSHOT_DIR``, else ``$XDG_STATE_HOME/vramtop/snapshots``, else
    ``~/.local/state/vramtop/snapshots``."""
    env = os.environ if env is None else env
    chosen = env.get("VRAMTOP_SNAPSHOT_DIR", "")
    if chosen:
        return chosen
    state = env.get("XDG_STATE_HOME", "")
    if state and os.path.isabs(state):
        return os.path.join(state, "vramtop", "snapshots")
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".local", "state", "vramtop", "snapshots")


def snapshot_name(host: str, pid: int, rank: int | None, when: float, kind: str, n: int = 0) -> str:
    """``{host}-{pid}-rank{rank or x}-{UTC %Y%m%dT%H%M%SZ}[-{n}]-{kind}.pickle``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    safe_host = re.sub(r"[^A-Za-z0-9_.-]", "_", host) or "host"
    rank_text = "x" if rank is None else str(rank)
    suffix = f"-{n}" if n else ""
    return f"{safe_host}-{pid}-rank{rank_text}-{stamp}{suffix}-{kind}.pickle"


def socket_path(pid: int | None = None, env: Mapping[str, str] | None = None) -> str:
    """The probe's socket path for ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return os.path.join(socket_dir(env), f"{pid}.sock")


def encode(message: Mapping[str, Any]) -> bytes:
    """One protocol line: compact UTF-8 JSON and a newline."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8") + b"\n"


def _number(value: Any) -> Any:
    """A JSON-safe number: ints as they are, finite floats as they are, anything else null."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def hello(
    devices: Iterable[int],
    stats_interval_s: float,
    segments_interval_s: float,
    torch_version: str | None,
    argv: Iterable[str] | None = None,
    record_history: int | None = None,
    rank_figures: Mapping[str, int | None] | None = None,
) -> dict[str, Any]:
    """hello; ``rank_figures`` as ranks() gives them (default: read from the env now)."""
    args = []
    budget = MAX_ARGV_BYTES
    for arg in list(sys.argv if argv is None else argv)[:MAX_ARGS]:
        arg = str(arg)[:MAX_ARG_CHARS]
        budget -= len(json.dumps(arg, ensure_ascii=False).encode("utf-8")) + 1
        if budget < 0:
            break
        args.append(arg)
    return {
        "v": VERSION,
        "type": "hello",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "argv": args,
        "torch": torch_version,
        "devices": list(devices),
        "stats_interval_s": float(stats_interval_s),
        "segments_interval_s": float(segments_interval_s),
        "time": time.time(),
        **(ranks() if rank_figures is None else dict(rank_figures)),
        "record_history": record_history,
        "capabilities": list(CAPABILITIES),
    }


def stats(device: int, memory_stats: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    """``torch.cuda.memory_stats(device)`` as it is (non-finite floats become null)."""
    return {
        "v": VERSION,
        "type": "stats",
        "time": time.time() if now is None else now,
        "device": device,
        "stats": {str(k): _number(v) for k, v in memory_stats.items()},
    }


def compact_segment(segment: Mapping[str, Any]) -> dict[str, Any]:
    """One ``memory_snapshot()`` segment with its blocks as [size, requested_size, state] triples.

    Blocks are put in address order (PyTorch already lists them so; the sort is a guarantee).
    ``requested_size`` is null for a block from a PyTorch too old to report it (before 2.1).
    """
    blocks = list(segment.get("blocks") or ())
    if all("address" in b for b in blocks):
        blocks.sort(key=lambda b: b["address"])
    return {
        "address": int(segment["address"]),
        "total_size": int(segment["total_size"]),
        "stream": int(segment.get("stream", 0)),
        "segment_type": str(segment.get("segment_type", "large")),
        "allocated_size": int(segment.get("allocated_size", 0)),
        "active_size": int(segment.get("active_size", 0)),
        "requested_size": _number(segment.get("requested_size")),
        "is_expandable": bool(segment.get("is_expandable", False)),
        "blocks": [
            [int(b["size"]), _number(b.get("requested_size")), str(b["state"])] for b in blocks
        ],
    }


def segments_lines(
    device: int, snapshot: Iterable[Mapping[str, Any]], now: float | None = None
) -> bytes:
    """The encoded segments line for ``device`` from a whole-process ``memory_snapshot()``.

    Segments go in address order. When the line would pass MAX_LINE_BYTES, segments are left
    off from the high-address end until it fits and ``"truncated"`` says how many were left off
    (an extra key, which clients ignore within v1); the figures of the kept ones are exact.
    """
    mine = [s for s in snapshot if int(s.get("device", 0)) == device]
    mine.sort(key=lambda s: s["address"])
    compact = [compact_segment(s) for s in mine]
    message: dict[str, Any] = {
        "v": VERSION,
        "type": "segments",
        "time": time.time() if now is None else now,
        "device": device,
        "segments": compact,
    }
    line = encode(message)
    if len(line) <= MAX_LINE_BYTES:
        return line
    # Too long: keep the longest address-ordered prefix that fits. Each segment costs its own
    # encoding plus a comma; the envelope (with room for the "truncated" figure) is fixed.
    envelope = len(encode({**message, "segments": [], "truncated": len(compact)}))
    budget = MAX_LINE_BYTES - envelope
    kept = 0
    for seg in compact:
        cost = len(encode(seg)) - 1 + (1 if kept else 0)  # minus the newline, plus a comma
        if cost > budget:
            break
        budget -= cost
        kept += 1
    message["segments"] = compact[:kept]
    message["truncated"] = len(compact) - kept
    return encode(message)


def oom(
    device: int,
    alloc_bytes: int,
    device_total: int,
    device_free: int,
    snapshot: str | None = None,
    snapshot_error: str | None = None,
) -> dict[str, Any]:
    # PyTorch calls its OOM observers with (device, alloc, total, free), where total is
    # the device's memory, or the allowed maximum under set_per_process_memory_fraction.
    # The wire key keeps its version-1 name, device_allocated; device_total says what it is.
    message = (
        f"CUDA out of memory on device {device}: tried to allocate {_human(alloc_bytes)} "
        f"of {_human(device_total)} (the device's memory or the allowed maximum), "
        f"{_human(device_free)} free on the device"
    )
    return {
        "v": VERSION,
        "type": "oom",
        "time": time.time(),
        "device": int(device),
        "alloc_bytes": int(alloc_bytes),
        "device_allocated": int(device_total),
        "device_total": int(device_total),
        "device_free": int(device_free),
        "message": message,
        "snapshot": snapshot,
        "snapshot_error": snapshot_error,
    }


def snapshot_started(request_id: str, directory: str) -> dict[str, Any]:
    """The request is being served; its file will be written into ``directory`` (absolute), so a
    client that stops waiting can say where it may still appear."""
    return {
        "v": VERSION,
        "type": "snapshot_started",
        "id": request_id,
        "time": time.time(),
        "dir": os.path.abspath(directory),
    }


def snapshot_done(request_id: str, path: str, size: int, snapshot: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "v": VERSION,
        "type": "snapshot_done",
        "id": request_id,
        "time": time.time(),
        "path": path,
        "bytes": int(size),
        **snapshot_figures(snapshot),
    }


def snapshot_failed(request_id: str | None, reason: str) -> dict[str, Any]:
    return {
        "v": VERSION,
        "type": "snapshot_failed",
        "id": request_id,
        "time": time.time(),
        "reason": reason,
    }


def snapshot_figures(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """has_trace, trace_entries and segments of a ``_snapshot()`` dict."""
    traces = snapshot.get("device_traces") or []
    entries = sum(len(t) for t in traces if isinstance(t, list))
    return {
        "has_trace": entries > 0,
        "trace_entries": entries,
        "segments": len(snapshot.get("segments") or []),
    }


def parse_request(line: bytes) -> tuple[str | None, str | None]:
    """(request id, None) for a valid snapshot_request line, else (id if readable, reason).

    Keys other than v, type and id (a "path", a "dir") are ignored: the probe alone chooses
    where it writes.
    """
    if len(line) > MAX_REQUEST_BYTES:
        return None, "bad request"
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "bad request"
    if not isinstance(message, dict):
        return None, "bad request"
    request_id = message.get("id")
    readable = request_id if isinstance(request_id, str) and REQUEST_ID.fullmatch(request_id) else None
    if message.get("type") != "snapshot_request" or readable is None:
        return readable, "bad request"
    return readable, None


def bye(reason: str) -> dict[str, Any]:
    return {"v": VERSION, "type": "bye", "time": time.time(), "reason": reason}


def _human(n: int) -> str:
    """Bytes in binary units, three significant figures (e.g. 1.50 GiB)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    if unit == "B":
        return f"{int(n)} B"
    decimals = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.{decimals}f} {unit}"
