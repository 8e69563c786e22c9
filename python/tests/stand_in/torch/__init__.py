"""A stand-in for torch, for vramtop_probe's tests and overhead bench (no GPU, no real torch).

It offers what the probe calls: torch.__version__, torch.cuda.{is_available, is_initialized,
device_count, current_device, memory_stats, memory_snapshot, empty_cache, init, _lazy_call,
_lazy_init},
torch.cuda.memory.{_record_memory_history, _snapshot, _dump_snapshot} and
torch._C._cuda_attach_out_of_memory_observer, with realistic shapes (memory_stats: the 122 keys
of PyTorch's native allocator; memory_snapshot: segments with blocks). Test hooks live in
torch.cuda (names start with ``standin_``).

Default figures (deterministic, used by the Rust end-to-end test too): 1 device, CUDA
initialised, allocated 1 GiB, reserved 1.5 GiB, 3 segments. After
``torch.cuda.standin_use_allocator(capacity)``, ``torch.empty(...)`` allocates from a model of
the caching allocator instead (see torch/cuda/_caching.py) and can run out of memory.
"""

__version__ = "2.5.1+standin"

from . import _C, cuda  # noqa: E402,F401
from .cuda import OutOfMemoryError  # noqa: E402,F401


class dtype:
    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __repr__(self):
        return f"torch.{self.name}"


uint8 = dtype("uint8", 1)
float16 = dtype("float16", 2)
bfloat16 = dtype("bfloat16", 2)
float32 = dtype("float32", 4)
float = float32


class Tensor:
    """Owns one block of the allocator model; the block is freed when the tensor is collected."""

    def __init__(self, shape, dtype_, device):
        count = 1
        for n in shape:
            count *= int(n)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype_
        self.nbytes = count * dtype_.itemsize
        self.device = device
        cuda._lazy_init()  # the first allocation initialises CUDA, as in PyTorch
        allocator = cuda.standin_allocator(device)
        self._allocator = None
        self._ptr = allocator.malloc(self.nbytes)
        self._allocator = allocator

    def data_ptr(self):
        return self._ptr

    def __del__(self):
        allocator = getattr(self, "_allocator", None)
        if allocator is not None:
            self._allocator = None
            allocator.free(self._ptr)


def _device_index(device):
    if device is None or device == "cuda":
        return cuda.current_device()
    if isinstance(device, int):
        return device
    text = str(device)
    if text.startswith("cuda:"):
        return int(text[5:])
    raise RuntimeError(f"stand-in torch: only CUDA tensors, not {device!r}")


def empty(*shape, dtype=None, device=None):
    """A CUDA tensor of ``shape`` (sizes in elements of ``dtype``, default float32)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Tensor(shape, dtype or float32, _device_index(device))
