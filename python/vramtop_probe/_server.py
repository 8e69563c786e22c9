"""The probe: a daemon thread that serves the vramtop protocol on a Unix socket.

Design rules (see docs/probe-protocol.md):
* The training thread never waits on a client: every socket is non-blocking and all sending
  happens on the probe's own thread. The only things the training thread does are ``start()``
  (bind and listen), ``stop()`` (at most STOP_JOIN_S) and, on an out-of-memory error, appending
  one dict to a deque.
* The probe never raises into the training script: an error anywhere is logged once as a
  warning on the ``vramtop_probe`` logger, and the probe stops.
* The probe never imports torch and never initialises CUDA: it looks at ``sys.modules`` and asks
  only once ``torch.cuda.is_initialized()`` is true, so no CUDA context appears on an idle GPU.
* CUDA setup (the OOM observer, history recording) happens at CUDA initialisation itself: the
  probe queues one function with ``torch.cuda._lazy_call``, which PyTorch runs inside
  ``torch.cuda._lazy_init()`` on the thread that initialises CUDA, after the device is usable and
  before the first allocation (at once when CUDA is initialised already). It is queued from
  ``start()`` when torch.cuda is imported already, else right after torch.cuda is imported (a
  ``sys.meta_path`` finder watches for it), else from the probe thread's polling. The function
  makes two calls into torch (attach the observer, turn history on) and never raises: PyTorch
  would turn an exception into a DeferredCudaCallError in the script. A torch without
  ``_lazy_call`` gets the same setup from the probe thread, polled every SETUP_POLL_S once CUDA
  is initialised (allocations made before that poll have no stack).
* Snapshots (protocol v2): an OOM snapshot is taken inside PyTorch's OOM observer (on the
  allocating thread, before the error unwinds and frees tensors) and pickled and written on the
  probe thread; an on-demand snapshot is taken and written on the probe thread and answered to
  the asking client only.
"""

from __future__ import annotations

import atexit
import collections
import logging
import math
import os
import selectors
import signal
import socket
import stat
import sys
import threading
import time
from typing import Any

from . import _files
from . import _protocol as protocol

log = logging.getLogger("vramtop_probe")

# How long stop() (and so process exit) waits for the probe thread, in seconds.
STOP_JOIN_S = 2.0
# How long the probe tries to deliver bye and what is still queued to slow clients, in seconds.
FLUSH_AT_STOP_S = 0.5
# Unsent bytes a client may have queued before it counts as stuck and is dropped: two full
# lines, so a client that is merely busy for one segments message is not dropped.
DEFAULT_MAX_PENDING_BYTES = 2 * protocol.MAX_LINE_BYTES
# Largest share of one core's time each kind of tick may take (stats and segments each); ticks
# that cost more are spaced out (see _next_tick).
OVERHEAD_BUDGET = 0.005
# Bytes per recv of what a client sends (snapshot requests).
RECV_BYTES = 65536
# max_entries asked of PyTorch when history recording is turned on without a number.
DEFAULT_HISTORY_ENTRIES = 100_000
# Requests one client may have waiting; more are refused.
MAX_QUEUED_REQUESTS = 4
# Seconds between looks at whether CUDA is initialised yet, while the OOM observer or history
# recording waits for it (short runs can fail within the first stats interval).
SETUP_POLL_S = 0.05

_lock = threading.Lock()
# The running probe of this process, if any.
_active: Probe | None = None
# torch's OOM observers cannot be detached, so one forwarding function is attached once per
# process and sends to whichever probe is active.
_observer_attached = False
_observer_missing_logged = False
# Serialises the one-time CUDA setup (observer, history) between the thread that initialises
# CUDA (inside torch.cuda._lazy_init) and the probe thread. The probe thread takes it only once
# CUDA is initialised, when no thread can be inside the first _lazy_init: neither waits long.
_setup_lock = threading.Lock()
# Whether _on_cuda_init is queued with torch.cuda._lazy_call: "no", "queued" (once per process:
# PyTorch keeps the calls it ran) or "unavailable" (this torch has no _lazy_call: polling only).
_cuda_hook = "no"
_hook_lock = threading.Lock()


class ProbeSetupError(Exception):
    """start() could not set up the socket (the message says why)."""


class _Client:
    __slots__ = ("sock", "pending", "received", "discarding", "queued")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        # Bytes accepted from the probe but not yet taken by the kernel.
        self.pending = bytearray()
        # Bytes of an unfinished request line.
        self.received = bytearray()
        # Inside an over-long line, already answered: skip to its newline.
        self.discarding = False
        # Requests of this client waiting to be served.
        self.queued = 0


def _loaded(name: str) -> Any:
    """The module ``name`` if the script has imported it completely, else None."""
    module = sys.modules.get(name)
    if module is None:
        return None
    spec = getattr(module, "__spec__", None)
    if getattr(spec, "_initializing", False):
        return None  # the script's thread is still importing it
    return module


def torch_version() -> str | None:
    """torch.__version__ when torch is imported, else the installed distribution's, else None."""
    torch = _loaded("torch")
    if torch is not None and getattr(torch, "__version__", None) is not None:
        return str(torch.__version__)
    try:
        from importlib import metadata

        return metadata.version("torch")
    except Exception:
        return None


def _on_cuda_init() -> None:
    """Queued with torch.cuda._lazy_call: the active probe's CUDA setup, at CUDA initialisation.

    PyTorch runs it inside torch.cuda._lazy_init() on the thread that initialises CUDA (the
    device usable, is_initialized() still false, no allocation made yet), or at once when CUDA
    is initialised already. Never raises: PyTorch would raise DeferredCudaCallError into the
    script and leave CUDA uninitialised.
    """
    try:
        probe = _active
        cuda = sys.modules.get("torch.cuda")
        if probe is not None and cuda is not None and os.getpid() == probe._owner_pid:
            probe._set_up_cuda(cuda)
    except Exception:
        pass


def _queue_cuda_hook(cuda: Any) -> bool:
    """Queue _on_cuda_init with ``cuda._lazy_call``, once per process. Never raises.

    True when this call queued it (and so ran it, when CUDA is initialised already). A call
    while another thread is queueing it waits for that one (one ``_lazy_call``): on return the
    hook is in PyTorch's queue, so a CUDA initialisation that follows runs it.
    """
    global _cuda_hook
    try:
        with _hook_lock:
            if _cuda_hook != "no":
                return False
            lazy_call = getattr(cuda, "_lazy_call", None)
            if not callable(lazy_call):
                _cuda_hook = "unavailable"
                log.info(
                    "vramtop_probe: this PyTorch (%s) has no torch.cuda._lazy_call; the probe sets"
                    " up history and the OOM observer when it next looks after CUDA is initialised",
                    torch_version(),
                )
                return False
            lazy_call(_on_cuda_init)
            _cuda_hook = "queued"
            return True
    except Exception as exc:
        log.debug("vramtop_probe: could not queue the CUDA hook: %s", exc)
        return False


class _CudaHookLoader:
    """Runs torch.cuda's own loader, then queues the CUDA hook: before any code can use CUDA."""

    def __init__(self, loader: Any, watcher: _TorchCudaWatcher) -> None:
        self.loader = loader
        self.watcher = watcher

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # The module keeps its own loader: nothing after the import sees this wrapper.
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        self.loader.exec_module(module)
        self.watcher.remove()
        _queue_cuda_hook(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _TorchCudaWatcher:
    """A ``sys.meta_path`` finder that sees torch.cuda imported, for a probe started first.

    It finds nothing itself: for torch.cuda it asks the finders after it and wraps the loader of
    what they found, so that the CUDA hook is queued as soon as torch.cuda has run, before the
    script can initialise CUDA (polling could miss the first allocations). Any error here only
    leaves the import to the other finders.
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch.cuda" or _cuda_hook != "no":
            return None
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is None:
                    continue
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CudaHookLoader(spec.loader, self)
                return spec
        except Exception:
            pass
        return None

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def _watch_for_cuda() -> None:
    """From start(): queue the CUDA hook now if torch.cuda is imported, else when it is.

    Never raises (the probe thread's polling is the fallback).
    """
    try:
        cuda = _loaded("torch.cuda")
        if cuda is not None:
            # Queueing runs the setup at once when CUDA is initialised; a hook queued before
            # (by the probe thread, or for an earlier probe) has run already if CUDA is up.
            if not _queue_cuda_hook(cuda) and cuda.is_initialized():
                _on_cuda_init()
            return
        if "torch.cuda" in sys.modules:
            return  # being imported right now: the probe thread's polling queues the hook
        if not any(isinstance(f, _TorchCudaWatcher) for f in sys.meta_path):
            sys.meta_path.insert(0, _TorchCudaWatcher())
    except Exception as exc:
        log.debug("vramtop_probe: not watching for torch.cuda: %s", exc)


def _oom_observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    """Called by PyTorch's allocator on the allocating thread, just before it raises."""
    try:
        probe = _active
        if probe is not None:
            probe._on_oom(device, alloc, device_allocated, device_free)
    except Exception:
        pass  # never disturb the allocator; the OOM error itself still reaches the script


def _next_tick(previous: float, interval: float, now: float, spent: float = 0.0) -> float:
    """The next deadline after a tick that began at deadline ``previous`` and cost ``spent``.

    Missed ticks are skipped, not sent in a burst. A tick that cost ``spent`` CPU seconds waits
    at least ``spent / OVERHEAD_BUDGET`` before the next one, so however slow torch is (a
    memory_snapshot() with recorded history can take seconds) the probe stays within budget.
    """
    interval = max(interval, spent / OVERHEAD_BUDGET)
    deadline = previous + interval
    return deadline if deadline > now else now + interval


class Probe:
    """Handle returned by ``vramtop_probe.start()``.

    Attributes: ``path`` (the socket, or None), ``error`` (why the probe is not running, or
    None), ``running``, ``clients`` (connected now), ``dropped`` (clients dropped as stuck),
    ``record_history`` (max_entries the probe records, or None), ``history_on`` (recording
    turned on), ``snapshot_on_oom``, ``snapshots`` (the snapshot file store: ``directory``,
    ``written``).
    """

    def __init__(
        self,
        stats_interval: float = 1.0,
        segments_interval: float = 5.0,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        record_history: int | None = None,
        snapshot_on_oom: bool = False,
        snapshot_dir: str | None = None,
    ) -> None:
        self.stats_interval = stats_interval
        self.segments_interval = segments_interval
        # max_entries of history recording the probe turns on, or None.
        self.record_history = record_history
        self.snapshot_on_oom = snapshot_on_oom
        self.ranks = protocol.ranks()
        self.snapshots = _files.SnapshotStore(snapshot_dir, self.ranks["rank"])
        # Whether the probe has turned history recording on / could not.
        self.history_on = False
        self._history_failed = False
        # Snapshot requests waiting: (client, id).
        self._requests: collections.deque[tuple[_Client, str]] = collections.deque()
        self.path: str | None = None
        self.error: str | None = None
        self.dropped = 0
        # CPU seconds the probe thread spent building and sending messages (overhead bench).
        self.busy_s = 0.0
        self._max_pending = max_pending_bytes
        self._owner_pid = os.getpid()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._clients: list[_Client] = []
        self._stop_reason: str | None = None
        self._ooms: collections.deque[dict[str, Any]] = collections.deque()
        # The last OOM, sent again to every client that connects later (marked "earlier"), so that
        # a dashboard started after the OOM still offers its snapshot.
        self._last_oom: bytes | None = None

    # ---- public -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and os.getpid() == self._owner_pid

    @property
    def clients(self) -> int:
        return len(self._clients)

    def stop(self, reason: str = "stop") -> None:
        """Send bye to every client, close the socket and remove its file. Never raises."""
        try:
            thread = self._thread
            if thread is None or os.getpid() != self._owner_pid:
                return
            if self._stop_reason is None:
                self._stop_reason = reason
            self._wake()
            if threading.current_thread() is not thread:
                thread.join(STOP_JOIN_S)
        except Exception as exc:  # pragma: no cover - defensive
            log.warning("vramtop_probe: stopping failed: %s", exc)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the probe thread has ended; True when it has."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def __repr__(self) -> str:
        state = "running" if self.running else f"stopped ({self.error})" if self.error else "stopped"
        return f"<vramtop_probe.Probe {state} path={self.path!r} clients={self.clients}>"

    # ---- setup (training thread) --------------------------------------------------------

    def _open(self) -> None:
        if not hasattr(socket, "AF_UNIX"):
            raise ProbeSetupError("this platform has no Unix sockets (AF_UNIX); the probe does nothing")
        for name in ("stats_interval", "segments_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value > 0
            ):
                raise ProbeSetupError(f"{name} must be a positive number of seconds, not {value!r}")
            setattr(self, name, float(value))
        directory = protocol.socket_dir()
        _private_dir(directory)
        path = os.path.join(directory, f"{os.getpid()}.sock")
        _remove_stale(path)
        # Bound and listening under a name no client looks for, then renamed into place: a client
        # that finds <pid>.sock can connect at once (between bind and listen it would be refused,
        # and a refused socket looks stale).
        binding = path + ".binding"
        _remove_stale(binding)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(binding)
            self.path = binding
            os.chmod(binding, 0o600)
            st = os.stat(binding)
            self._inode = (st.st_dev, st.st_ino)
            listener.listen(16)
            listener.setblocking(False)
            os.rename(binding, path)
            self.path = path
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
        except BaseException:
            listener.close()
            self._unlink()
            self.path = None
            for sock in (self._wake_r, self._wake_w):
                if sock is not None:
                    sock.close()
            raise
        self._listener = listener
        self._thread = threading.Thread(target=self._run, name="vramtop-probe", daemon=True)
        self._thread.start()

    # ---- the probe thread ---------------------------------------------------------------

    def _run(self) -> None:
        reason = "error"
        try:
            self._serve()
            reason = self._stop_reason or "stop"
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("vramtop_probe stopped after an error: %s", self.error)
            log.debug("vramtop_probe error details", exc_info=True)
        finally:
            try:
                self._close(reason)
            except Exception as exc:  # pragma: no cover - defensive
                log.debug("vramtop_probe: closing failed: %s", exc)

    def _serve(self) -> None:
        sel = self._selector = selectors.DefaultSelector()
        assert self._listener is not None and self._wake_r is not None
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        now = time.monotonic()
        next_stats = now + self.stats_interval
        next_segments = now + self.segments_interval
        self._set_up_when_ready()
        while self._stop_reason is None:
            timeout = max(0.0, min(next_stats, next_segments) - time.monotonic())
            if self._requests or self._ooms:
                timeout = 0.0
            elif self._setup_pending():
                timeout = min(timeout, SETUP_POLL_S)
            for key, events in sel.select(timeout):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    self._drain_wake()
                else:
                    client: _Client = key.data
                    if events & selectors.EVENT_READ:
                        self._read(client)
                    if events & selectors.EVENT_WRITE and client in self._clients:
                        self._flush(client)
            if self._stop_reason is not None:
                break
            if self._ooms:
                self._send_ooms()
            if self._requests:
                self._serve_request()
            if self._setup_pending():
                self._set_up_when_ready()
            now = time.monotonic()
            if now >= next_stats:
                started = time.thread_time()
                if self._clients:
                    self._broadcast(self._stats_lines(self._collect_stats()))
                spent = time.thread_time() - started
                self.busy_s += spent
                next_stats = _next_tick(next_stats, self.stats_interval, now, spent)
            if now >= next_segments:
                started = time.thread_time()
                if self._clients:
                    devices = [d for d, _ in self._collect_stats()]
                    self._broadcast(self._segments_lines(devices))
                spent = time.thread_time() - started
                self.busy_s += spent
                next_segments = _next_tick(next_segments, self.segments_interval, now, spent)

    def _close(self, reason: str) -> None:
        sel = self._selector
        if self._ooms and reason != "error":
            try:
                self._send_ooms(with_stats=False)
            except Exception:
                pass
        while self._requests:
            client, request_id = self._requests.popleft()
            if client in self._clients:
                self._send(client, protocol.encode(
                    protocol.snapshot_failed(request_id, "the probe is stopping")
                ))
        bye = protocol.encode(protocol.bye(reason))
        for client in list(self._clients):
            self._send(client, bye)
        deadline = time.monotonic() + FLUSH_AT_STOP_S
        while sel is not None and any(c.pending for c in self._clients):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, events in sel.select(remaining):
                if key.data is not None and events & selectors.EVENT_WRITE:
                    self._flush(key.data)
        for client in list(self._clients):
            self._drop(client, None)
        self._unlink()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass
        if sel is not None:
            sel.close()
        global _active
        with _lock:
            if _active is self:
                _active = None

    # ---- torch --------------------------------------------------------------------------

    def _cuda(self) -> Any:
        """torch.cuda once the script has imported it and CUDA is initialised, else None."""
        if _loaded("torch") is None:
            return None
        cuda = _loaded("torch.cuda")
        if cuda is None or not cuda.is_initialized():
            return None
        return cuda

    def _collect_stats(self) -> list[tuple[int, Any]]:
        """(device, memory_stats) for each device this process uses.

        A device counts when it is the current device or its allocator has reserved memory or
        ever called cudaMalloc. memory_stats(d) only reads the allocator's host-side counters,
        so asking about an idle device creates no CUDA context on it.
        """
        cuda = self._cuda()
        if cuda is None:
            return []
        current = cuda.current_device()
        used = []
        for device in range(cuda.device_count()):
            figures = cuda.memory_stats(device)
            if not figures:
                continue
            if (
                device == current
                or figures.get("reserved_bytes.all.current", 0) > 0
                or figures.get("num_device_alloc", 0) > 0
            ):
                used.append((device, figures))
        return used

    def _stats_lines(self, collected: list[tuple[int, Any]]) -> list[bytes]:
        now = time.time()
        return [protocol.encode(protocol.stats(d, figures, now)) for d, figures in collected]

    def _segments_lines(self, devices: list[int]) -> list[bytes]:
        if not devices:
            return []
        cuda = self._cuda()
        if cuda is None:
            return []
        snapshot = cuda.memory_snapshot()
        now = time.time()
        return [protocol.segments_lines(d, snapshot, now) for d in devices]

    def _set_up_when_ready(self) -> None:
        """Probe thread: queue the CUDA hook if torch.cuda is imported, set up if CUDA is up."""
        if _cuda_hook == "no":
            cuda = _loaded("torch.cuda")
            if cuda is not None:
                _queue_cuda_hook(cuda)
        cuda = self._cuda()
        if cuda is not None:
            self._set_up_cuda(cuda)

    def _set_up_cuda(self, cuda: Any) -> None:
        """Attach the OOM observer and turn history on, each once; CUDA must be usable.

        Called at CUDA initialisation (_on_cuda_init, is_initialized() still false) or by the
        probe thread once CUDA is initialised. Never raises.
        """
        with _setup_lock:
            self._attach_oom_observer()
            self._turn_history_on(cuda)

    def _attach_oom_observer(self) -> None:
        """Attach the forwarding OOM observer (once per process); CUDA must be usable."""
        global _observer_attached, _observer_missing_logged
        if _observer_attached or _observer_missing_logged:
            return
        torch = _loaded("torch")
        if torch is None:
            return  # torch is still being imported: a later look attaches it
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            _observer_missing_logged = True
            log.info(
                "vramtop_probe: this PyTorch (%s) has no torch._C._cuda_attach_out_of_memory_observer;"
                " out-of-memory errors will not be reported to vramtop",
                torch_version(),
            )
            return
        try:
            attach(_oom_observer)
        except Exception as exc:
            _observer_missing_logged = True
            log.warning("vramtop_probe: could not attach the OOM observer: %s: %s",
                        type(exc).__name__, exc)
            return
        _observer_attached = True

    def _setup_pending(self) -> bool:
        """Whether the OOM observer or history recording still waits for CUDA."""
        observer = not (_observer_attached or _observer_missing_logged)
        history = self.record_history is not None and not (self.history_on or self._history_failed)
        return observer or history

    def _turn_history_on(self, cuda: Any) -> None:
        """Ask PyTorch to record history (process-wide), once; CUDA must be usable."""
        if self.record_history is None or self.history_on or self._history_failed:
            return
        record = getattr(getattr(cuda, "memory", None), "_record_memory_history", None)
        if record is None:
            self._history_failed = True
            log.warning(
                "vramtop_probe: this PyTorch (%s) has no torch.cuda.memory._record_memory_history;"
                " history is not recorded",
                torch_version(),
            )
            return
        try:
            record(enabled="all", context="all", stacks="all", max_entries=self.record_history)
        except Exception as exc:
            self._history_failed = True
            log.warning("vramtop_probe: could not turn history recording on: %s: %s",
                        type(exc).__name__, exc)
            return
        self.history_on = True
        log.info("vramtop_probe: recording allocator history (max_entries=%d)", self.record_history)

    def _hello_record_history(self) -> int | None:
        """hello's record_history: what the probe records (or will, once CUDA is up), or None."""
        if self.record_history is None or self._history_failed:
            return None
        return self.record_history

    def _on_oom(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """On the allocating (training) thread, before the OOM error is raised.

        Queues the message and wakes the probe thread. When an OOM snapshot is wanted, the
        allocator's state is taken here and now, while the tensors of the failing step are still
        alive; pickling and writing it is left to the probe thread.
        """
        if self._stop_reason is not None or os.getpid() != self._owner_pid:
            return
        message = protocol.oom(device, alloc, device_allocated, device_free)
        snapshot = None
        error = None
        if self.history_on or self.snapshot_on_oom:
            snapshot, error = _take_snapshot()
        self._ooms.append((message, snapshot, error))
        self._wake()

    def _send_ooms(self, with_stats: bool = True) -> None:
        lines = []
        while self._ooms:
            message, snapshot, error = self._ooms.popleft()
            if snapshot is not None:
                path, _, error = self.snapshots.write(snapshot, "oom")
                message["snapshot"] = path
            message["snapshot_error"] = error
            lines.append(protocol.encode(message))
            self._last_oom = protocol.encode({**message, "earlier": True})
        if with_stats and self._clients:
            # The allocator's figures right after the failure, which is what the user wants.
            lines.extend(self._stats_lines(self._collect_stats()))
        self._broadcast(lines)

    # ---- clients ------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None and self._selector is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.debug("vramtop_probe: accept failed: %s", exc)
                return
            conn.setblocking(False)
            client = _Client(conn)
            self._selector.register(conn, selectors.EVENT_READ, client)
            self._clients.append(client)
            started = time.thread_time()
            collected = self._collect_stats()
            devices = [d for d, _ in collected]
            hello = protocol.hello(
                devices, self.stats_interval, self.segments_interval, torch_version(),
                record_history=self._hello_record_history(), rank_figures=self.ranks,
            )
            lines = [protocol.encode(hello)]
            if self._last_oom is not None:
                lines.append(self._last_oom)
            lines.extend(self._stats_lines(collected))
            lines.extend(self._segments_lines(devices))
            self._send(client, b"".join(lines))
            self.busy_s += time.thread_time() - started

    def _broadcast(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = b"".join(lines)
        for client in list(self._clients):
            self._send(client, data)

    def _send(self, client: _Client, data: bytes) -> None:
        if client.pending:
            # Give what the client has read since the last select a chance to make room before
            # the new line is queued and counted against it: a client that reads, only late,
            # must not be judged on bytes the kernel would already take.
            self._flush(client)
            if client not in self._clients:
                return
        if client.pending:
            client.pending += data
        else:
            try:
                sent = client.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(client, "connection lost")
                return
            if sent == len(data):
                return
            client.pending += memoryview(data)[sent:]
            self._watch(client, write=True)
        if len(client.pending) > self._max_pending:
            self.dropped += 1
            self._drop(client, f"stopped reading ({len(client.pending)} bytes unsent)")

    def _flush(self, client: _Client) -> None:
        try:
            sent = client.sock.send(client.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(client, "connection lost")
            return
        del client.pending[:sent]
        if not client.pending:
            self._watch(client, write=False)

    def _watch(self, client: _Client, write: bool) -> None:
        if self._selector is not None:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
            self._selector.modify(client.sock, events, client)

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client, None)  # the client hung up
            return
        while data:
            newline = data.find(b"\n")
            piece, data = (data, b"") if newline < 0 else (data[:newline], data[newline + 1:])
            if client.discarding:
                if newline >= 0:
                    client.discarding = False
                continue
            client.received += piece
            if newline < 0:
                if len(client.received) >= protocol.MAX_REQUEST_BYTES:
                    # Over-long: answer now, skip the rest of the line whenever it comes.
                    client.received.clear()
                    client.discarding = True
                    self._answer(client, protocol.snapshot_failed(None, "bad request"))
                continue
            line = bytes(client.received)
            client.received.clear()
            self._request(client, line)
            if client not in self._clients:
                return

    def _request(self, client: _Client, line: bytes) -> None:
        """One client line (newline removed): queue a snapshot request or answer why not."""
        if not line.strip():
            return
        request_id, problem = protocol.parse_request(line + b"\n")
        if problem is not None:
            self._answer(client, protocol.snapshot_failed(request_id, problem))
        elif client.queued >= MAX_QUEUED_REQUESTS:
            self._answer(client, protocol.snapshot_failed(request_id, "too many requests"))
        else:
            client.queued += 1
            self._requests.append((client, request_id))

    def _answer(self, client: _Client, message: dict[str, Any]) -> None:
        self._send(client, protocol.encode(message))

    def _serve_request(self) -> None:
        """Take and write one on-demand snapshot, answering the client that asked."""
        client, request_id = self._requests.popleft()
        client.queued -= 1
        if client not in self._clients:
            return  # it hung up: nobody to answer, nothing to write
        started = time.thread_time()
        self._answer(client, protocol.snapshot_started(request_id, self.snapshots.directory))
        if _loaded("torch") is None:
            self._answer(client, protocol.snapshot_failed(request_id, "torch is not imported"))
            return
        cuda = self._cuda()
        if cuda is None:
            self._answer(client, protocol.snapshot_failed(
                request_id, "CUDA is not initialised in this process yet"
            ))
            return
        self._set_up_cuda(cuda)
        snapshot, error = _take_snapshot()
        if snapshot is None:
            self._answer(client, protocol.snapshot_failed(request_id, error or "no snapshot"))
            return
        path, size, error = self.snapshots.write(snapshot, "demand")
        if path is None:
            self._answer(client, protocol.snapshot_failed(request_id, error or "not written"))
        else:
            self._answer(client, protocol.snapshot_done(request_id, path, size, snapshot))
        self.busy_s += time.thread_time() - started

    def _drop(self, client: _Client, why: str | None) -> None:
        if client not in self._clients:
            return
        self._clients.remove(client)
        if why is not None:
            log.info("vramtop_probe: dropped a client: %s", why)
        try:
            if self._selector is not None:
                self._selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        try:
            client.sock.close()
        except OSError:
            pass

    # ---- small helpers ------------------------------------------------------------------

    def _wake(self) -> None:
        sock = self._wake_w
        if sock is None:
            return
        try:
            sock.send(b"\0")
        except OSError:
            pass  # full (a wake-up is already pending) or closed

    def _drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _unlink(self) -> None:
        """Remove the socket file, but only if it is still the one this probe bound."""
        path = self.path
        if path is None:
            return
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == self._inode or self._inode is None:
                os.unlink(path)
        except OSError:
            pass

    def _abandon_in_child(self) -> None:
        """After fork, in the child: the thread is gone; close the inherited descriptors only."""
        for sock in [self._listener, self._wake_r, self._wake_w] + [c.sock for c in self._clients]:
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass
        self._clients = []
        self._thread = None


def _take_snapshot() -> tuple[dict[str, Any] | None, str | None]:
    """(torch.cuda.memory._snapshot(), None), or (None, a one-line reason). Never raises."""
    memory = _loaded("torch.cuda.memory")
    take = getattr(memory, "_snapshot", None)
    if take is None:
        return None, f"this PyTorch ({torch_version()}) has no torch.cuda.memory._snapshot"
    try:
        snapshot = take()
    except Exception as exc:
        said = " ".join(str(exc).split())  # one line (PyTorch's messages can span several)
        return None, f"torch.cuda.memory._snapshot() failed: {type(exc).__name__}: {said}"
    if not isinstance(snapshot, dict):
        return None, f"torch.cuda.memory._snapshot() returned a {type(snapshot).__name__}"
    return snapshot, None


def _private_dir(directory: str) -> None:
    """Create ``directory`` with mode 0700, or check that an existing one is ours and private."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise ProbeSetupError(f"{directory} exists and is not a directory")
    if st.st_uid != os.geteuid():
        raise ProbeSetupError(f"{directory} belongs to uid {st.st_uid}, not to this user")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(directory, 0o700)


def _remove_stale(path: str) -> None:
    """Remove a socket left at ``path`` by a process that is gone (nobody accepts on it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ProbeSetupError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        log.info("vramtop_probe: removed the stale socket %s", path)
        return
    except OSError as exc:
        raise ProbeSetupError(f"{path} exists and could not be checked: {exc}") from exc
    finally:
        probe.close()
    raise ProbeSetupError(f"{path} is served by a live process (same pid in another PID namespace?)")


def history_entries(value: Any, source: str) -> int | None:
    """max_entries for a record_history option: None/False/0 off, True the default, an int > 0.

    Raises ProbeSetupError naming ``source`` for anything else.
    """
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_HISTORY_ENTRIES
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, int) and value == 0:
        return None
    raise ProbeSetupError(f"{source} must be True, False or a positive number of entries, not {value!r}")


def _history_from_env() -> int | None:
    """VRAMTOP_RECORD_HISTORY: 1/true/yes/on (default entries), 0/false/no/off/empty, or N > 0."""
    text = os.environ.get("VRAMTOP_RECORD_HISTORY", "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return None
    if text in ("1", "true", "yes", "on"):
        return DEFAULT_HISTORY_ENTRIES
    if text.isdigit() and text.isascii():
        return int(text)
    raise ProbeSetupError(
        f"VRAMTOP_RECORD_HISTORY must be 1, true or a positive number of entries, not {text!r}"
    )


def _flag_from_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def start(
    stats_interval: float = 1.0,
    segments_interval: float = 5.0,
    *,
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    record_history: int | bool | None = None,
    snapshot_on_oom: bool | None = None,
    snapshot_dir: str | None = None,
) -> Probe:
    """Start the probe unless it runs already; returns its handle and never raises.

    ``record_history``: True (100 000 entries) or a number of entries turns PyTorch's memory
    history recording on as CUDA initialises (before start() returns, when it is initialised
    already); False or 0 leaves it off; None takes VRAMTOP_RECORD_HISTORY. ``snapshot_on_oom``: write an OOM snapshot even without history
    (None: VRAMTOP_SNAPSHOT_ON_OOM). ``snapshot_dir``: where snapshots go (None:
    VRAMTOP_SNAPSHOT_DIR, else $XDG_STATE_HOME/vramtop/snapshots, else
    ~/.local/state/vramtop/snapshots).
    """
    global _active
    try:
        with _lock:
            if _active is not None and _active.running:
                return _active
            probe = Probe(stats_interval, segments_interval, max_pending_bytes)
            try:
                if record_history is None:
                    probe.record_history = _history_from_env()
                else:
                    probe.record_history = history_entries(record_history, "record_history")
                probe.snapshot_on_oom = (
                    _flag_from_env("VRAMTOP_SNAPSHOT_ON_OOM")
                    if snapshot_on_oom is None else bool(snapshot_on_oom)
                )
                if snapshot_dir is not None:
                    probe.snapshots.directory = os.fspath(snapshot_dir)
                # Active (and the SIGTERM handler in place) before the socket appears: a
                # SIGTERM sent as soon as the socket exists finds the probe to clean up.
                _install_sigterm_handler()
                _active = probe
                probe._open()
                # After _open: a probe that failed to start must not turn history on.
                _watch_for_cuda()
            except Exception as exc:
                _active = None
                probe.error = str(exc) if isinstance(exc, ProbeSetupError) else (
                    f"{type(exc).__name__}: {exc}"
                )
                log.warning("vramtop_probe not started: %s", probe.error)
                return probe
            return probe
    except Exception as exc:  # pragma: no cover - defensive: even the lock failing
        failed = Probe.__new__(Probe)
        Probe.__init__(failed)
        failed.error = f"{type(exc).__name__}: {exc}"
        log.warning("vramtop_probe not started: %s", failed.error)
        return failed


# The SIGTERM handler the probe replaced (SIG_DFL or the script's), once installed.
_previous_sigterm: Any = None
_sigterm_installed = False


def _install_sigterm_handler() -> None:
    """Remove the socket on SIGTERM, then behave as the process would have without the probe.

    Only from the main thread (Python allows no other) and only over SIG_DFL or a handler of
    the script's own, which is chained to; an ignored SIGTERM stays ignored.
    """
    global _previous_sigterm, _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_IGN or previous is None:
            return  # ignored, or set outside Python: leave it alone
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError) as exc:
        log.debug("vramtop_probe: no SIGTERM handler: %s", exc)
        return
    _previous_sigterm = previous
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    probe = _active
    if probe is not None:
        try:
            probe._unlink()
        except Exception:
            pass
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    # SIG_DFL: die of the signal, as without the probe (same exit status for the launcher).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def stop() -> None:
    """Stop the running probe (bye reason "stop"); nothing happens when none runs."""
    probe = _active
    if probe is not None:
        probe.stop("stop")


def current() -> Probe | None:
    """The running probe of this process, or None."""
    probe = _active
    return probe if probe is not None and probe.running else None


def _at_exit() -> None:
    probe = _active
    if probe is not None:
        probe.stop("exit")


def _after_fork_in_child() -> None:
    global _active
    probe = _active
    _active = None
    if probe is not None:
        try:
            probe._abandon_in_child()
        except Exception:
            pass


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
