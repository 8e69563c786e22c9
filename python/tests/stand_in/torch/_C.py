"""Stand-in for torch._C: only the out-of-memory observer hook."""

from . import cuda as _cuda


def _cuda_attach_out_of_memory_observer(observer):
    _cuda._state["observers"].append(observer)
