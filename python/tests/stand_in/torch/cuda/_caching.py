"""A small model of PyTorch's native CUDA caching allocator, for the stand-in torch.

Written from /work/shared/reference/pytorch-caching-allocator.md (default settings, one stream,
no expandable segments, no record_stream): sizes rounded to 512 bytes, a small pool (rounded
size <= 1 MiB) carved from 2 MiB segments, large requests below 10 MiB from 20 MiB segments and
larger ones from segments rounded up to 2 MiB; best fit by (stream, size, address); a found block
is split when the rest is >= 512 bytes (small) or > 1 MiB (large); a freed block merges with free
neighbours. When the device is full, cached whole free segments are released and the cudaMalloc
retried once; if it still fails, an ``oom`` trace entry is recorded, the OOM observers are called
(without the allocator lock, as PyTorch does) and OutOfMemoryError is raised.

The "device" is a capacity in bytes and an address counter: cudaMalloc fails when the reserved
bytes plus the new segment would pass the capacity. Trace entries are kept only while history
recording is on, in a ring buffer of ``max_entries``, with the shapes PyTorch writes.
"""

from __future__ import annotations

import bisect
import collections
import os
import sys
import threading
import time

KIB = 1 << 10
MIB = 1 << 20
MIN_BLOCK_SIZE = 512
SMALL_SIZE = MIB
SMALL_BUFFER = 2 * MIB
MIN_LARGE_ALLOC = 10 * MIB
LARGE_BUFFER = 20 * MIB
ROUND_LARGE = 2 * MIB
# Requests of at least this many bytes fail before the allocator looks at anything.
ONE_EB = 1 << 60
# cudaMalloc addresses of device d start at BASE + d * STRIDE and only grow.
BASE_ADDRESS = 0x7F0000000000
DEVICE_STRIDE = 1 << 40
POOLS = ("all", "small_pool", "large_pool")
ARRAY_STATS = (
    "allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
    "active_bytes", "inactive_split_bytes", "requested_bytes",
)


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError): a RuntimeError subclass."""


OutOfMemoryError.__module__ = "torch"


def round_size(n: int) -> int:
    if n < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    return -(-n // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE


def allocation_size(size: int) -> int:
    """The cudaMalloc size for a rounded request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def format_size(n: int) -> str:
    """PyTorch's format_size: bytes, then two-decimal KiB / MiB / GiB."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= MIB:
        return f"{n / KIB:.2f} KiB"
    if n <= 1 << 30:
        return f"{n / MIB:.2f} MiB"
    return f"{n / (1 << 30):.2f} GiB"


class _Stat:
    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def add(self, amount: int) -> None:
        if amount >= 0:
            self.current += amount
            self.allocated += amount
            self.peak = max(self.peak, self.current)
        else:
            self.current += amount
            self.freed -= amount


class _Block:
    __slots__ = ("addr", "size", "requested", "allocated", "prev", "next", "small", "frames")

    def __init__(self, addr: int, size: int, small: bool) -> None:
        self.addr = addr
        self.size = size
        self.requested = 0
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.small = small
        self.frames: list = []

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


# Frames inside the stand-in torch are left out of recorded stacks: the user's code is what counts.
_TORCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_frames() -> list[dict]:
    """The caller's Python stack outside the stand-in, innermost first, as PyTorch lists it."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(_TORCH_DIR):
            frames.append({"filename": code.co_filename, "line": frame.f_lineno, "name": code.co_name})
        frame = frame.f_back
    return frames


class History:
    """Process-wide recording settings (PyTorch's _record_memory_history is process-wide)."""

    def __init__(self) -> None:
        self.enabled = False
        self.context = False
        self.max_entries = 1


class DeviceAllocator:
    def __init__(self, device: int, capacity: int, history: History, observers: list) -> None:
        self.device = device
        self.capacity = capacity
        self.history = history
        self.observers = observers
        self.lock = threading.RLock()
        self.next_address = BASE_ADDRESS + device * DEVICE_STRIDE
        # Free blocks of each pool, ordered by (stream, size, address); stream is always 0.
        self.free_small: list[tuple[int, int, int]] = []
        self.free_large: list[tuple[int, int, int]] = []
        self.free_blocks: dict[int, _Block] = {}
        self.active: dict[int, _Block] = {}
        self.segments: dict[int, _Block] = {}  # segment address -> its first block
        self.segment_frames: dict[int, list] = {}
        self.stats = {(name, pool): _Stat() for name in ARRAY_STATS for pool in POOLS}
        self.scalars = dict(
            num_alloc_retries=0, num_ooms=0, num_sync_all_streams=0, num_device_alloc=0,
            num_device_free=0,
        )
        self.trace: collections.deque = collections.deque(maxlen=1)

    # ---- history ------------------------------------------------------------------------

    def resize_trace(self, max_entries: int) -> None:
        with self.lock:
            self.trace = collections.deque(self.trace, maxlen=max_entries)

    def clear_trace(self) -> None:
        with self.lock:
            self.trace.clear()

    def _record(self, action: str, addr: int, size: int) -> None:
        if not self.history.enabled:
            return
        entry = {"action": action}
        entry["device_free" if action == "oom" else "addr"] = addr
        entry["size"] = size
        entry["stream"] = 0
        entry["time_us"] = int(time.time() * 1e6)
        entry["frames"] = _python_frames() if self.history.context else []
        self.trace.append(entry)

    # ---- stats --------------------------------------------------------------------------

    def _update(self, name: str, small: bool, amount: int) -> None:
        if amount:
            self.stats[(name, "all")].add(amount)
            self.stats[(name, "small_pool" if small else "large_pool")].add(amount)

    def memory_stats(self) -> dict:
        with self.lock:
            figures = {}
            for (name, pool), stat in self.stats.items():
                for field in ("current", "peak", "allocated", "freed"):
                    figures[f"{name}.{pool}.{field}"] = getattr(stat, field)
            for name in ("oversize_allocations", "oversize_segments"):
                for field in ("current", "peak", "allocated", "freed"):
                    figures[f"{name}.{field}"] = 0
            figures.update(self.scalars)
            figures["max_split_size"] = -1
            return dict(sorted(figures.items()))

    # ---- pools --------------------------------------------------------------------------

    def _pool(self, small: bool) -> list:
        return self.free_small if small else self.free_large

    def _insert_free(self, block: _Block) -> None:
        bisect.insort(self._pool(block.small), (0, block.size, block.addr))
        self.free_blocks[block.addr] = block

    def _remove_free(self, block: _Block) -> None:
        pool = self._pool(block.small)
        key = (0, block.size, block.addr)
        index = bisect.bisect_left(pool, key)
        if index < len(pool) and pool[index] == key:
            del pool[index]
        del self.free_blocks[block.addr]

    def _best_fit(self, size: int, small: bool) -> _Block | None:
        pool = self._pool(small)
        index = bisect.bisect_left(pool, (0, size, 0))
        if index == len(pool):
            return None
        block = self.free_blocks[pool[index][2]]
        self._remove_free(block)
        return block

    # ---- device -------------------------------------------------------------------------

    def reserved(self) -> int:
        return self.stats[("reserved_bytes", "all")].current

    def _cuda_malloc(self, alloc_size: int, small: bool) -> _Block | None:
        if self.reserved() + alloc_size > self.capacity:
            return None
        addr = self.next_address
        self.next_address += alloc_size
        block = _Block(addr, alloc_size, small)
        self.segments[addr] = block
        self.segment_frames[addr] = _python_frames() if self.history.context else []
        self.scalars["num_device_alloc"] += 1
        self._update("segment", small, 1)
        self._update("reserved_bytes", small, alloc_size)
        self._record("segment_alloc", addr, alloc_size)
        return block

    def _release_cached(self) -> None:
        """Sync all streams, then cudaFree every whole free segment (large pool, then small)."""
        self.scalars["num_sync_all_streams"] += 1
        for pool in (self.free_large, self.free_small):
            for _, _, addr in list(pool):
                block = self.free_blocks[addr]
                if block.is_split():
                    continue
                self._remove_free(block)
                del self.segments[addr]
                self.segment_frames.pop(addr, None)
                self.scalars["num_device_free"] += 1
                self._record("segment_free", addr, block.size)
                self._update("segment", block.small, -1)
                self._update("reserved_bytes", block.small, -block.size)

    def empty_cache(self) -> None:
        with self.lock:
            self._release_cached()

    # ---- malloc / free ------------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        if nbytes >= ONE_EB:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate more than 1EB memory.")
        if nbytes == 0:
            return 0
        self.lock.acquire()
        locked = True
        try:
            size = round_size(nbytes)
            small = size <= SMALL_SIZE
            alloc_size = allocation_size(size)
            block = self._best_fit(size, small)
            if block is None:
                block = self._cuda_malloc(alloc_size, small)
                if block is None:
                    self._release_cached()
                    self.scalars["num_alloc_retries"] += 1
                    block = self._cuda_malloc(alloc_size, small)
            if block is None:
                device_free = self.capacity - self.reserved()
                self._record("oom", device_free, size)
                self.scalars["num_ooms"] += 1
                allocated = self.stats[("allocated_bytes", "all")].current
                reserved = self.reserved()
                message = (
                    f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU "
                    f"{self.device} has a total capacity of {format_size(self.capacity)} of which "
                    f"{format_size(device_free)} is free. Of the allocated memory "
                    f"{format_size(allocated)} is allocated by PyTorch, and "
                    f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. "
                    "If reserved but unallocated memory is large try setting "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
                    "See documentation for Memory Management  "
                    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                )
                observers = list(self.observers)
                # As PyTorch: the observers run without the allocator lock, on this thread,
                # before the error is raised (so they may take a snapshot).
                self.lock.release()
                locked = False
                for observer in observers:
                    observer(self.device, alloc_size, self.capacity, device_free)
                raise OutOfMemoryError(message)
            return self._hand_out(block, size, nbytes).addr
        finally:
            if locked:
                self.lock.release()

    def _hand_out(self, block: _Block, size: int, nbytes: int) -> _Block:
        remaining = block.size - size
        split = remaining >= MIN_BLOCK_SIZE if block.small else remaining > MIB
        was_split = block.is_split()
        if split:
            taken = _Block(block.addr, size, block.small)
            taken.prev = block.prev
            if taken.prev is not None:
                taken.prev.next = taken
            taken.next = block
            block.prev = taken
            if taken.prev is None:
                self.segments[taken.addr] = taken
            block.addr += size
            block.size = remaining
            self._insert_free(block)
            if was_split:
                self._update("inactive_split_bytes", block.small, -size)
            else:
                self._update("inactive_split", block.small, 1)
                self._update("inactive_split_bytes", block.small, remaining)
            block = taken
        elif was_split:
            self._update("inactive_split", block.small, -1)
            self._update("inactive_split_bytes", block.small, -block.size)
        block.allocated = True
        block.requested = nbytes
        block.frames = _python_frames() if self.history.context else []
        self.active[block.addr] = block
        for name, amount in (
            ("allocation", 1), ("allocated_bytes", block.size), ("active", 1),
            ("active_bytes", block.size), ("requested_bytes", nbytes),
        ):
            self._update(name, block.small, amount)
        self._record("alloc", block.addr, nbytes)
        return block

    def free(self, addr: int) -> None:
        if addr == 0:
            return
        with self.lock:
            block = self.active.pop(addr, None)
            if block is None:
                raise RuntimeError("invalid device pointer")
            block.allocated = False
            self._update("allocation", block.small, -1)
            self._update("allocated_bytes", block.small, -block.size)
            self._record("free_requested", block.addr, block.requested)
            self._record("free_completed", block.addr, block.requested)
            block.frames = []
            original = block.size
            requested = block.requested
            split_delta, split_bytes = 0, 0
            for neighbour in (block.prev, block.next):
                if neighbour is None or neighbour.allocated:
                    continue
                self._remove_free(neighbour)
                split_delta -= 1
                split_bytes -= neighbour.size
                if neighbour is block.prev:
                    if self.segments.get(neighbour.addr) is neighbour:
                        self.segments[neighbour.addr] = block
                    block.addr = neighbour.addr
                    block.prev = neighbour.prev
                    if block.prev is not None:
                        block.prev.next = block
                else:
                    block.next = neighbour.next
                    if block.next is not None:
                        block.next.prev = block
                block.size += neighbour.size
            if block.is_split():
                split_delta += 1
                split_bytes += block.size
            self._insert_free(block)
            self._update("inactive_split", block.small, split_delta)
            self._update("inactive_split_bytes", block.small, split_bytes)
            self._update("active", block.small, -1)
            self._update("active_bytes", block.small, -original)
            self._update("requested_bytes", block.small, -requested)

    # ---- snapshot -----------------------------------------------------------------------

    def segment_dicts(self) -> list[dict]:
        with self.lock:
            out = []
            for addr in sorted(self.segments):
                blocks = []
                block = self.segments[addr]
                while block is not None:
                    blocks.append(
                        {
                            "address": block.addr,
                            "size": block.size,
                            "requested_size": block.requested,
                            "state": "active_allocated" if block.allocated else "inactive",
                            "frames": list(block.frames),
                        }
                    )
                    block = block.next
                active = [b for b in blocks if b["state"] != "inactive"]
                out.append(
                    {
                        "device": self.device,
                        "address": addr,
                        "total_size": sum(b["size"] for b in blocks),
                        "allocated_size": sum(b["size"] for b in active),
                        "active_size": sum(b["size"] for b in active),
                        "requested_size": sum(b["requested_size"] for b in active),
                        "stream": 0,
                        "segment_type": "small" if self.segments[addr].small else "large",
                        "segment_pool_id": (0, 0),
                        "is_expandable": False,
                        "frames": list(self.segment_frames.get(addr, [])),
                        "blocks": blocks,
                    }
                )
            return out

    def trace_copy(self) -> list[dict]:
        """The trace, oldest first; then a ``snapshot`` entry is recorded, as PyTorch does."""
        with self.lock:
            copied = [dict(e) for e in self.trace]
            active = self.stats[("active_bytes", "all")].current
            self._record("snapshot", 0, active)
            return copied
