"""vramtop_probe: let vramtop see inside a PyTorch process's CUDA caching allocator.

Usage, in a training script::

    import vramtop_probe
    vramtop_probe.start()          # stats every 1 s, segments every 5 s

or with no code change::

    python -m vramtop_probe train.py --lr 3e-4

The probe serves ``torch.cuda.memory_stats()`` and ``torch.cuda.memory_snapshot()`` to vramtop
over a Unix socket (``$XDG_RUNTIME_DIR/vramtop/<pid>.sock`` or ``/tmp/vramtop-<user>/<pid>.sock``;
``$VRAMTOP_PROBE_DIR/<pid>.sock`` instead where that is set, for vramtop too) from a daemon thread. It never imports torch, never initialises CUDA and never raises into the
script: errors are logged once on the ``vramtop_probe`` logger and the probe stops.

Snapshots (protocol v2): ``start(record_history=True)`` or ``--record-history`` records PyTorch's
allocator history from CUDA's initialisation on (before the first allocation); an out-of-memory error writes a snapshot taken inside
PyTorch's OOM observer, and vramtop can ask for one on demand. Files go to ``snapshot_dir()``.
"""

from ._protocol import (
    MAX_LINE_BYTES,
    VERSION as PROTOCOL_VERSION,
    snapshot_dir,
    socket_dir,
    socket_path,
)
from ._server import Probe, current, start, stop

__version__ = "0.1.0"

__all__ = [
    "MAX_LINE_BYTES",
    "PROTOCOL_VERSION",
    "Probe",
    "current",
    "snapshot_dir",
    "socket_dir",
    "socket_path",
    "start",
    "stop",
    "__version__",
]
