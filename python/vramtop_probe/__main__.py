"""``python -m vramtop_probe [OPTIONS] script.py ARGS...`` or ``... [OPTIONS] -m MODULE ARGS...``

Starts the probe, then runs the script as ``__main__`` with ``sys.argv = [script.py, ARGS...]``,
as ``python script.py ARGS...`` would (a module as ``python -m MODULE ARGS...`` would).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys

from . import _server

# Probe options that take a separate value (the scan for --record-history=N skips it).
_VALUED = ("--interval", "--segments-interval", "--snapshot-dir")


# What an interval may be written as: bare seconds (the probe's first form) or, as vramtop's own
# --interval, a number with its unit.
_UNIT_RULE = "seconds (0.5, 2s) or milliseconds (500ms)"


def _seconds(text: str) -> float:
    """An interval in seconds from ``0.5``, ``2s`` or ``500ms``."""
    number, scale = text, 1.0
    if text.endswith("ms"):
        number, scale = text[:-2], 0.001
    elif text.endswith("s"):
        number = text[:-1]
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of {_UNIT_RULE}: {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number of {_UNIT_RULE}: {text!r}")
    return value


def _entries(text: str) -> int | None:
    """The N of ``--record-history=N``, or None when it is not a positive integer."""
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        return None
    return int(text)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (no usage block), as the docs promise."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (--help for usage)\n")


def _split_history_value(argv: list[str]) -> list[str]:
    """``--record-history=N`` among the probe's options becomes ``--record-history-entries N``.

    ``--record-history`` alone takes no value, so that ``--record-history train.py`` runs
    train.py; only the ``=N`` form sets the number. Arguments after the script are not looked at.
    """
    out: list[str] = []
    items = iter(argv)
    for item in items:
        if item.startswith("--record-history="):
            out += ["--record-history-entries", item.split("=", 1)[1]]
            continue
        out.append(item)
        if item in _VALUED:
            following = next(items, None)
            if following is not None:
                out.append(following)
        elif item == "--" or not item.startswith("-"):
            out.extend(items)  # the script and its arguments, untouched
            break
    return out


def _split_module(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """The probe's options, the module of ``-m MODULE`` (or ``-mMODULE``) and its arguments.

    Without ``-m`` before the script: ``(argv, None, [])``. As with ``python -m``, everything after
    the module is the module's.
    """
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        if item == "-m":
            if i + 1 >= len(items):
                return items[:i], "", []  # said below: the module is missing
            return items[:i], items[i + 1], items[i + 2:]
        if item.startswith("-m") and not item.startswith("--"):
            return items[:i], item[2:], items[i + 1:]
        if item in _VALUED:
            i += 2
            continue
        if item == "--" or not item.startswith("-"):
            break
        i += 1
    return argv, None, []


def _count_after_bare_history(argv: list[str], script: str) -> bool:
    """Whether the script argument is a bare count typed right after ``--record-history``."""
    if not (script.isascii() and script.isdigit()):
        return False
    return any(a == "--record-history" and b == script for a, b in zip(argv, argv[1:]))


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        # A missing parent package, or a name that is no module name.
        return False


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(
        prog="python -m vramtop_probe",
        description="Run a Python script with the vramtop probe started.",
    )
    parser.add_argument(
        "--interval", type=_seconds, default=1.0, metavar="S",
        help="time between stats messages: 0.5, 2s, 500ms (default 1s)",
    )
    parser.add_argument(
        "--segments-interval", type=_seconds, default=5.0, metavar="S",
        help="time between segments messages (default 5s)",
    )
    parser.add_argument(
        "--record-history", action="store_true", default=None,
        help="record PyTorch's allocator history from CUDA initialisation on "
        "(--record-history=MAX_ENTRIES, default 100000; env VRAMTOP_RECORD_HISTORY)",
    )
    # The N of --record-history=N, checked below so that the error names what was typed.
    parser.add_argument("--record-history-entries", help=argparse.SUPPRESS)
    parser.add_argument(
        "--snapshot-on-oom", action="store_true", default=None,
        help="write a snapshot at an out-of-memory error even without history "
        "(env VRAMTOP_SNAPSHOT_ON_OOM=1)",
    )
    parser.add_argument(
        "--snapshot-dir", metavar="DIR",
        help="folder for snapshot files (env VRAMTOP_SNAPSHOT_DIR; default "
        "$XDG_STATE_HOME/vramtop/snapshots or ~/.local/state/vramtop/snapshots)",
    )
    # "?" and a check below: argparse's own error would also name the
    # optional arguments as required ("required: script, args").
    parser.add_argument(
        "script", nargs="?",
        help="the Python script to run as __main__ (or -m MODULE, as python -m runs it)",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    raw = list(sys.argv[1:] if argv is None else argv)
    probe_argv, module, module_args = _split_module(raw)
    options = parser.parse_args(_split_history_value(probe_argv))
    record_history = options.record_history
    if options.record_history_entries is not None:
        record_history = _entries(options.record_history_entries)
        if record_history is None:
            parser.error(
                f"argument --record-history={options.record_history_entries}:"
                " must be a positive number of entries, e.g. --record-history=100000"
            )
    if module == "":
        parser.error("argument -m: expected the module to run, e.g. -m mypkg.train")
    if module is not None:
        if options.script is not None:
            parser.error(f"-m {module}: a module runs instead of a script, not beside one")
        if not _module_exists(module):
            parser.exit(2, f"python -m vramtop_probe: no module named {module!r}\n")
        # As `python -m MODULE` does: the current folder is first on sys.path; runpy sets
        # argv[0] to the module's file.
        sys.argv = [module, *module_args]
        sys.path[0] = os.getcwd()
        _start(options, record_history)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    if options.script is None:
        parser.error(
            "the script to run is required: python -m vramtop_probe [OPTIONS] SCRIPT [ARGS...]"
        )

    script = options.script
    if not os.path.isfile(script) and _count_after_bare_history(raw, script):
        parser.error(f"--record-history takes its count after '=': --record-history={script}")
    if not os.path.isfile(script):
        parser.exit(2, f"python -m vramtop_probe: can't open file {script!r}\n")
    # As `python script.py` does: argv[0] is the script, its folder is first on sys.path.
    sys.argv = [script, *options.args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    _start(options, record_history)
    runpy.run_path(script, run_name="__main__")


def _start(options: argparse.Namespace, record_history: bool | int | None) -> None:
    _server.start(
        options.interval,
        options.segments_interval,
        record_history=record_history,
        snapshot_on_oom=options.snapshot_on_oom,
        snapshot_dir=options.snapshot_dir,
    )


if __name__ == "__main__":
    main()
