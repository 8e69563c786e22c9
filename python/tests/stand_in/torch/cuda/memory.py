"""Stand-in for torch.cuda.memory: memory history and snapshots, with PyTorch's signatures.

``_record_memory_history`` is process-wide, as in PyTorch; trace entries are recorded only while
it is on, in a ring buffer of ``max_entries`` per device. ``_snapshot()`` is the dict PyTorch
returns (segments of every device, one trace list per device, allocator settings) and
``_dump_snapshot`` pickles it to a file.
"""

import pickle
import sys

from . import _lock, _state, _allocators, memory_snapshot, memory_stats  # noqa: F401

# The defaults PyTorch reports in allocator_settings when nothing is configured.
_ALLOCATOR_SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": "",
    "max_split_size": -1,
    "garbage_collection_threshold": 0.0,
    "expandable_segments": False,
    "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False,
    "pinned_use_cuda_host_register": False,
    "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
}


def _record_memory_history(
    enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None
):
    """Turn recording of allocator history on ("all", or "state": one trace slot) or off (None).

    As PyTorch: turning it off clears the recorded trace; ``context`` None records no stacks;
    ``device`` is accepted and ignored (recording is process-wide). A bool ``enabled`` is the
    legacy form (True: "all", False: off).
    """
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    if enabled not in (None, "state", "all"):
        raise ValueError(f"expected enabled to be None, 'state' or 'all', got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"expected context to be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"expected stacks to be 'python' or 'all', got {stacks!r}")
    history = _state["history"]
    with _lock:
        history.enabled = enabled is not None
        history.context = enabled is not None and context is not None
        history.max_entries = 1 if enabled == "state" else max(1, int(max_entries))
        allocators = list((_state["allocators"] or {}).values())
    for allocator in allocators:
        allocator.resize_trace(history.max_entries)
        if enabled is None:
            allocator.clear_trace()


def _snapshot(device=None):
    """The allocator's state: {"segments", "device_traces", "allocator_settings"}."""
    settings = dict(_ALLOCATOR_SETTINGS)
    settings["roundup_power2_divisions"] = dict(_ALLOCATOR_SETTINGS["roundup_power2_divisions"])
    if not _state["initialized"]:
        return {"segments": [], "device_traces": [], "allocator_settings": settings}
    if _state["allocators"] is None:
        return {
            "segments": memory_snapshot(),
            "device_traces": [[] for _ in range(_state["devices"])],
            "allocator_settings": settings,
        }
    allocators = _allocators()
    segments = [s for a in allocators for s in a.segment_dicts()]
    traces = [a.trace_copy() for a in allocators]
    return {"segments": segments, "device_traces": traces, "allocator_settings": settings}


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickle _snapshot() to ``filename``, as PyTorch does."""
    snapshot = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)
