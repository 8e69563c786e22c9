"""Stand-in for torch.cuda (see torch/__init__.py). Test hooks: standin_*.

CUDA initialisation is lazy as in PyTorch: ``_lazy_init()`` (called by ``init()``,
``current_device()`` and the first allocation) runs the callables queued with ``_lazy_call(fn)``,
in order, on the initialising thread, after the device is usable and before ``is_initialized()``
turns true; a callable that raises makes ``_lazy_init`` raise DeferredCudaCallError and leaves
CUDA uninitialised. ``_lazy_call(fn)`` once CUDA is initialised calls ``fn`` at once.

The layout mode counts as initialised from the import on (so a script that only imports torch
shows figures); ``standin_use_allocator`` then stands for a process that has not initialised
CUDA: every callable given to ``_lazy_call`` so far is queued again, as it would have been.

Two modes. The default "layout" mode serves fixed figures (configurable with
standin_configure). ``standin_use_allocator(capacity)`` switches to the "allocator" mode: a model
of PyTorch's caching allocator (_caching.py) that torch.empty() allocates from, with memory
history (torch.cuda.memory._record_memory_history / _snapshot / _dump_snapshot) and real OOMs.
"""

import threading
import traceback

from . import _caching

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
BASE_ADDRESS = 0x7F0000000000
# Address distance between devices, in bytes.
DEVICE_STRIDE = 1 << 40

_lock = threading.Lock()
_state = {}
# As PyTorch's torch/cuda/__init__.py: (callable, the stack that queued it) waiting for
# _lazy_init; a thread-local flag set while the queued calls run; the lock _lazy_init holds.
_queued_calls = []
_tls = threading.local()
_initialization_lock = threading.Lock()


class DeferredCudaCallError(Exception):
    pass


def _default_segments():
    """3 segments, 1.5 GiB reserved, 1 GiB allocated (+127 MiB pending free)."""
    return [
        {
            "total_size": GIB,
            "segment_type": "large",
            "blocks": [(768 * MIB, 768 * MIB - 512, "active_allocated"), (256 * MIB, 0, "inactive")],
        },
        {
            "total_size": 510 * MIB,
            "segment_type": "large",
            "blocks": [
                (255 * MIB, 255 * MIB, "active_allocated"),
                (127 * MIB, 127 * MIB, "active_pending_free"),
                (128 * MIB, 0, "inactive"),
            ],
        },
        {
            "total_size": 2 * MIB,
            "segment_type": "small",
            "blocks": [(1 * MIB, 1000 * KIB, "active_allocated"), (1 * MIB, 0, "inactive")],
        },
    ]


def _many_segments(count):
    """``count`` segments of 20 MiB, each 2 allocated blocks and 1 free one (for the bench)."""
    return [
        {
            "total_size": 20 * MIB,
            "segment_type": "large",
            "blocks": [
                (8 * MIB, 8 * MIB - 256, "active_allocated"),
                (4 * MIB, 4 * MIB, "active_allocated"),
                (8 * MIB, 0, "inactive"),
            ],
        }
        for _ in range(count)
    ]


def standin_reset():
    """Back to the default figures; drops observers and injected failures."""
    with _lock:
        _state.clear()
        _state.update(
            initialized=True,
            devices=1,
            used_devices=None,  # None: all devices have the layout; else a set of indices
            current=0,
            layout=_default_segments(),
            observers=[],
            fail=None,
            stats_calls=0,
            allocators=None,  # None: layout mode; else device -> _caching.DeviceAllocator
            capacity=0,
            history=_caching.History(),
            lazy_inits=0,
            lazy_calls=[],  # every (callable, stack) given to _lazy_call
        )
        _state["cache"] = None
        _queued_calls.clear()


def standin_use_allocator(capacity, devices=1):
    """Switch to the allocator model: ``capacity`` bytes per device, CUDA not initialised yet.

    CUDA becomes initialised at the first allocation (torch.empty), as in PyTorch.
    """
    with _lock:
        _state.update(
            allocators={}, capacity=int(capacity), devices=int(devices), initialized=False,
            used_devices=None, current=0, cache=None,
        )
        _queued_calls[:] = _state["lazy_calls"]


def standin_allocator(device=None):
    """The allocator model of ``device`` (default: the current one), created on first use."""
    with _lock:
        allocators = _state["allocators"]
        if allocators is None:
            raise RuntimeError("stand-in torch: call torch.cuda.standin_use_allocator() first")
        device = _state["current"] if device is None else int(device)
        if not 0 <= device < _state["devices"]:
            raise RuntimeError(f"Invalid device argument {device}")
        if device not in allocators:
            allocator = _caching.DeviceAllocator(
                device, _state["capacity"], _state["history"], _state["observers"]
            )
            allocator.resize_trace(_state["history"].max_entries)
            allocators[device] = allocator
        return allocators[device]


def _allocators():
    """Every device's allocator model, in device order (allocator mode, CUDA initialised)."""
    return [standin_allocator(d) for d in range(_state["devices"])]


def standin_configure(*, initialized=None, devices=None, used_devices=None, segments=None, current=None):
    """Change the figures. ``segments``: a count (uniform 20 MiB segments) or None to keep."""
    with _lock:
        if initialized is not None:
            _state["initialized"] = initialized
        if devices is not None:
            _state["devices"] = devices
        if used_devices is not None:
            _state["used_devices"] = set(used_devices)
        if current is not None:
            _state["current"] = current
        if segments is not None:
            _state["layout"] = _many_segments(segments)
        _state["cache"] = None


def standin_fail_memory_stats(exc):
    """Make every later memory_stats() call raise ``exc`` (None: stop failing)."""
    _state["fail"] = exc


def standin_fire_oom(device, alloc, device_allocated, device_free):
    """Call the attached OOM observers as PyTorch's allocator does before raising."""
    for observer in list(_state["observers"]):
        observer(device, alloc, device_allocated, device_free)


def standin_observers():
    return list(_state["observers"])


def standin_stats_calls():
    return _state["stats_calls"]


def _uses(device):
    used = _state["used_devices"]
    return used is None or device in used


def _segments_of(device):
    segments = []
    address = BASE_ADDRESS + device * DEVICE_STRIDE
    for layout in _state["layout"]:
        blocks = []
        block_address = address
        for size, requested, state in layout["blocks"]:
            blocks.append(
                {"address": block_address, "size": size, "requested_size": requested, "state": state}
            )
            block_address += size
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        active = sum(b["size"] for b in blocks if b["state"] != "inactive")
        segments.append(
            {
                "device": device,
                "address": address,
                "total_size": layout["total_size"],
                "allocated_size": allocated,
                "active_size": active,
                "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
                "stream": 0,
                "segment_type": layout["segment_type"],
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": blocks,
            }
        )
        address += layout["total_size"]
    return segments


def _stats_of(device):
    """The 122 keys of PyTorch's native allocator, consistent with the segments, sorted."""
    segments = _segments_of(device) if _uses(device) else []
    pools = {"all": segments}
    pools["small_pool"] = [s for s in segments if s["segment_type"] == "small"]
    pools["large_pool"] = [s for s in segments if s["segment_type"] == "large"]
    figures = {}

    def put(name, pool, current):
        figures[f"{name}.{pool}.current"] = current
        figures[f"{name}.{pool}.peak"] = current
        figures[f"{name}.{pool}.allocated"] = current
        figures[f"{name}.{pool}.freed"] = 0

    for pool, segs in pools.items():
        blocks = [b for s in segs for b in s["blocks"]]
        allocated = [b for b in blocks if b["state"] == "active_allocated"]
        active = [b for b in blocks if b["state"] != "inactive"]
        split_free = [
            b for s in segs if len(s["blocks"]) > 1 for b in s["blocks"] if b["state"] == "inactive"
        ]
        put("allocation", pool, len(allocated))
        put("segment", pool, len(segs))
        put("active", pool, len(active))
        put("inactive_split", pool, len(split_free))
        put("allocated_bytes", pool, sum(b["size"] for b in allocated))
        put("reserved_bytes", pool, sum(s["total_size"] for s in segs))
        put("active_bytes", pool, sum(b["size"] for b in active))
        put("inactive_split_bytes", pool, sum(b["size"] for b in split_free))
        put("requested_bytes", pool, sum(b["requested_size"] for b in allocated))
    for name in ("oversize_allocations", "oversize_segments"):
        for field in ("current", "peak", "allocated", "freed"):
            figures[f"{name}.{field}"] = 0
    figures.update(
        num_alloc_retries=0,
        num_ooms=0,
        num_sync_all_streams=0,
        num_device_alloc=len(segments),
        num_device_free=0,
        max_split_size=-1,
    )
    return dict(sorted(figures.items()))


def _lazy_call(callable, **kwargs):
    """PyTorch's: call ``callable`` now if CUDA is initialised, else queue it for _lazy_init."""
    call = (callable, traceback.format_stack())
    _state["lazy_calls"].append(call)
    if is_initialized():
        callable()
    else:
        _queued_calls.append(call)


def _lazy_init():
    """PyTorch's: initialise CUDA once, running the queued calls first (see the module doc)."""
    if is_initialized() or hasattr(_tls, "is_initializing"):
        return
    with _initialization_lock:
        if is_initialized():
            return
        _state["lazy_inits"] += 1
        _tls.is_initializing = True
        try:
            # PyTorch iterates the list itself: a call queued while these run also runs.
            for queued_call, orig_traceback in _queued_calls:
                try:
                    queued_call()
                except Exception as e:
                    msg = (
                        f"CUDA call failed lazily at initialization with error: {str(e)}\n\n"
                        f"CUDA call was originally invoked at:\n\n{''.join(orig_traceback)}"
                    )
                    raise DeferredCudaCallError(msg) from e
        finally:
            delattr(_tls, "is_initializing")
        _state["initialized"] = True


def standin_lazy_inits():
    """How many times _lazy_init began initialising CUDA (0: CUDA never initialised)."""
    return _state["lazy_inits"]


def init():
    """torch.cuda.init(): initialise CUDA now (allocator mode: before any allocation)."""
    _lazy_init()


def is_available():
    return True


def is_initialized():
    return _state["initialized"]


def device_count():
    return _state["devices"]


def current_device():
    _lazy_init()  # as PyTorch: asking for the current device initialises CUDA
    return _state["current"]


def memory_stats(device=None):
    _state["stats_calls"] += 1
    if _state["fail"] is not None:
        raise _state["fail"]
    if not _state["initialized"]:
        return {}
    device = _state["current"] if device is None else device
    if not 0 <= device < _state["devices"]:
        raise RuntimeError(f"Invalid device argument {device}")
    if _state["allocators"] is not None:
        return standin_allocator(device).memory_stats()
    with _lock:
        cache = _state["cache"]
        if cache is None:
            cache = _state["cache"] = {}
        if device not in cache:
            cache[device] = _stats_of(device)
        # PyTorch builds a fresh dict on every call; so does the stand-in (same cost shape).
        return dict(cache[device])


def memory_snapshot():
    """Fresh segment dicts for every used device, as PyTorch builds on every call."""
    if not _state["initialized"]:
        return []
    if _state["allocators"] is not None:
        return [s for a in _allocators() for s in a.segment_dicts()]
    with _lock:
        return [s for d in range(_state["devices"]) if _uses(d) for s in _segments_of(d)]


def empty_cache():
    """Release every cached whole free segment (allocator mode; nothing in layout mode)."""
    if _state["allocators"] is not None and _state["initialized"]:
        for allocator in _allocators():
            allocator.empty_cache()


OutOfMemoryError = _caching.OutOfMemoryError

standin_reset()

from . import memory  # noqa: E402,F401
