"""``python -m vramtop_probe [--interval S] [--segments-interval S] script.py ARGS...``

Starts the probe, then runs the script as ``__main__`` with ``sys.argv = [script.py, ARGS...]``,
as ``python script.py ARGS...`` would.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from . import _server


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m vramtop_probe",
        description="Run a Python script with the vramtop probe started.",
    )
    parser.add_argument(
        "--interval", type=_seconds, default=1.0, metavar="S",
        help="seconds between stats messages (default 1.0)",
    )
    parser.add_argument(
        "--segments-interval", type=_seconds, default=5.0, metavar="S",
        help="seconds between segments messages (default 5.0)",
    )
    parser.add_argument("script", help="the Python script to run as __main__")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    options = parser.parse_args(argv)

    script = options.script
    if not os.path.isfile(script):
        parser.exit(2, f"python -m vramtop_probe: can't open file {script!r}\n")
    # As `python script.py` does: argv[0] is the script, its folder is first on sys.path.
    sys.argv = [script, *options.args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    _server.start(options.interval, options.segments_interval)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
