"""A stand-in training run: allocates and frees like a training loop, on the stand-in torch.

Run it with the stand-in torch first on PYTHONPATH (python/tests/stand_in), usually under the
probe:

    PYTHONPATH=python:python/tests/stand_in python -m vramtop_probe --record-history \\
        python/tests/standin_train.py --capacity 1GiB --steps 0 --ready-file /tmp/ready

Each step allocates weights once (kept), then activations of mixed sizes (small and large
pool, some not multiples of 512), frees half of them mid-step and the rest at the end, and
grows a kept cache by --leak bytes. With --oom-at-step K, step K asks for more than the device
holds while its activations are live, and the OutOfMemoryError ends the run (exit status 1) —
or is caught and the run goes on with --catch-oom.

Options:
  --capacity SIZE      device memory of the stand-in (bytes, or with KiB/MiB/GiB; default 1GiB)
  --steps N            steps to run; 0 = until --stop-file exists or SIGTERM (default 20)
  --step-sleep S       seconds to sleep after each step (default 0.01)
  --leak SIZE          bytes kept for good after each step (default 0)
  --oom-at-step K      at step K (1-based), allocate more than the capacity (default: never)
  --catch-oom          catch the OutOfMemoryError and go on
  --ready-file PATH    written once the first step is done (CUDA is initialised then)
  --stop-file PATH     the run ends after the step in which PATH appears
  --seed N             seed of the allocation sizes (default 1)

Under the probe with --record-history the whole run is traced from its first allocation (the
probe turns history on as CUDA initialises), so its snapshots replay from an empty allocator.

It prints one line per OOM it caught ("caught OOM at step K") and "done N steps" at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "k": 1 << 10,
         "m": 1 << 20, "g": 1 << 30}


def size(text: str) -> int:
    lower = text.strip().lower()
    number = lower.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = lower[len(number):]
    if unit not in UNITS or not number:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(number) * UNITS[unit])


def step(index: int, rng: random.Random, args, kept: list) -> None:
    activations = []
    for _ in range(rng.randint(4, 12)):
        kind = rng.random()
        if kind < 0.5:
            nbytes = rng.randint(1, 1 << 20)  # small pool
        elif kind < 0.9:
            nbytes = rng.randint((1 << 20) + 1, 12 << 20)  # 20 MiB segments and up
        else:
            nbytes = rng.randint(12 << 20, 48 << 20)
        activations.append(torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
    del activations[::2]  # free half mid-step
    oom_now = args.oom_file is not None and os.path.exists(args.oom_file)
    if oom_now:
        os.remove(args.oom_file)  # one OOM per file written
    if args.oom_at_step == index or oom_now:
        # The failing allocation: the step's live activations are in the OOM snapshot.
        torch.empty(args.capacity + 1, dtype=torch.uint8, device="cuda")
    if args.leak:
        kept.append(torch.empty(args.leak, dtype=torch.uint8, device="cuda"))
    del activations


def main() -> int:
    parser = argparse.ArgumentParser(description="stand-in training run")
    parser.add_argument("--capacity", type=size, default=1 << 30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-sleep", type=float, default=0.01)
    parser.add_argument("--leak", type=size, default=0)
    parser.add_argument("--oom-at-step", type=int, default=None)
    parser.add_argument("--catch-oom", action="store_true")
    # A test that must be watching first writes this file to get the OOM then.
    parser.add_argument("--oom-file")
    parser.add_argument("--ready-file")
    parser.add_argument("--stop-file")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.cuda.standin_use_allocator(args.capacity)
    rng = random.Random(args.seed)
    weights = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (4 << 20, 300_000, 16 << 20)]
    kept: list = []
    index = 0
    while args.steps == 0 or index < args.steps:
        index += 1
        try:
            step(index, rng, args, kept)
        except torch.OutOfMemoryError:
            if not args.catch_oom:
                raise
            print(f"caught OOM at step {index}", flush=True)
        if index == 1 and args.ready_file:
            with open(args.ready_file, "w") as f:
                f.write(str(os.getpid()))
        if args.stop_file and os.path.exists(args.stop_file):
            break
        time.sleep(args.step_sleep)
    print(f"done {index} steps", flush=True)
    del weights, kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
