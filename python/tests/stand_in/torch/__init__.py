"""A stand-in for torch, for vramtop_probe's tests and overhead bench (no GPU, no real torch).

It offers only what the probe calls: torch.__version__, torch.cuda.{is_available,
is_initialized, device_count, current_device, memory_stats, memory_snapshot} and
torch._C._cuda_attach_out_of_memory_observer, with realistic shapes (memory_stats: the 122 keys
of PyTorch's native allocator; memory_snapshot: segments with blocks). Test hooks live in
torch.cuda (names start with ``standin_``).

Default figures (deterministic, used by the Rust end-to-end test too): 1 device, CUDA
initialised, allocated 1 GiB, reserved 1.5 GiB, 3 segments.
"""

__version__ = "2.5.1+standin"

from . import _C, cuda  # noqa: E402,F401
