"""The v2 command line (history and snapshot options, env), SIGTERM, the stand-in training run."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from conftest import HERE, LineClient, subprocess_env, wait_for
from test_cli import run_cli
from vramtop_probe.__main__ import _split_history_value

TRAIN = os.path.join(HERE, "standin_train.py")

# Prints the probe's settings and its hello, as vramtop would see it.
SETTINGS = textwrap.dedent(
    """
    import json, socket
    import vramtop_probe
    probe = vramtop_probe.current()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    client.connect(probe.path)
    hello = json.loads(client.makefile("rb").readline())
    print(json.dumps({"record_history": probe.record_history, "snapshot_on_oom": probe.snapshot_on_oom,
                      "dir": probe.snapshots.directory, "hello": hello}))
    """
)


def settings(tmp_path, *args, **env):
    base = {"XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="vt")}
    for name in ("VRAMTOP_RECORD_HISTORY", "VRAMTOP_SNAPSHOT_ON_OOM", "VRAMTOP_SNAPSHOT_DIR"):
        base[name] = ""
    base.update(env)
    done = run_cli(tmp_path, *args, script_text=SETTINGS, env=subprocess_env(**base))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_record_history_alone_takes_the_default_and_does_not_eat_the_script(tmp_path):
    seen = settings(tmp_path, "--record-history")
    assert seen["record_history"] == 100_000 and seen["hello"]["record_history"] == 100_000
    assert seen["hello"]["argv"][1:] == ["a", "--b", "c"]


def test_record_history_with_a_number_and_the_snapshot_options(tmp_path):
    folder = str(tmp_path / "snaps")
    seen = settings(tmp_path, "--record-history=2500", "--snapshot-on-oom", "--snapshot-dir", folder)
    assert (seen["record_history"], seen["snapshot_on_oom"], seen["dir"]) == (2500, True, folder)


def test_without_options_the_env_decides(tmp_path):
    folder = str(tmp_path / "env-snaps")
    seen = settings(
        tmp_path, VRAMTOP_RECORD_HISTORY="300", VRAMTOP_SNAPSHOT_ON_OOM="1", VRAMTOP_SNAPSHOT_DIR=folder,
        RANK="4", LOCAL_RANK="0", WORLD_SIZE="8",
    )
    assert (seen["record_history"], seen["snapshot_on_oom"], seen["dir"]) == (300, True, folder)
    hello = seen["hello"]
    assert (hello["rank"], hello["local_rank"], hello["world_size"]) == (4, 0, 8)
    off = settings(tmp_path)
    assert (off["record_history"], off["snapshot_on_oom"]) == (None, False)
    assert off["hello"]["record_history"] is None


def test_a_bad_record_history_number_is_refused_by_the_command_line(tmp_path):
    done = run_cli(tmp_path, "--record-history=lots")
    assert done.returncode == 2 and "positive number of entries" in done.stderr
    # One line, naming the option as typed (not the internal --record-history-entries).
    assert done.stderr.count("\n") == 1, done.stderr
    assert "argument --record-history=lots:" in done.stderr, done.stderr
    assert "--record-history-entries" not in done.stderr, done.stderr


def test_only_the_probes_own_record_history_is_rewritten():
    assert _split_history_value(["--record-history=5", "t.py", "--record-history=9"]) == [
        "--record-history-entries", "5", "t.py", "--record-history=9"
    ]
    assert _split_history_value(["--snapshot-dir", "--record-history=1", "t.py"]) == [
        "--snapshot-dir", "--record-history=1", "t.py"
    ]


def test_help_lists_the_snapshot_options():
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", "--help"], env=subprocess_env(),
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0
    for option in ("--record-history", "--snapshot-on-oom", "--snapshot-dir"):
        assert option in done.stdout


# ---- SIGTERM ----------------------------------------------------------------------------------

WAIT_FOR_GO = textwrap.dedent(
    """
    import os, signal, sys, time
    {setup}
    while True:
        time.sleep(0.01)
    """
)


def start_child(tmp_path, setup: str, *, with_module: bool):
    runtime = tempfile.mkdtemp(prefix="vt")
    script = tmp_path / "train.py"
    script.write_text(WAIT_FOR_GO.format(setup=textwrap.indent(setup, "").strip()))
    command = [sys.executable, "-m", "vramtop_probe", str(script)] if with_module else [sys.executable, str(script)]
    child = subprocess.Popen(
        command, env=subprocess_env(XDG_RUNTIME_DIR=runtime), stdout=subprocess.PIPE, text=True
    )
    path = os.path.join(runtime, "vramtop", f"{child.pid}.sock")
    wait_for(lambda: os.path.exists(path), "the probe's socket")
    LineClient(path).close()  # the probe is serving
    return child, path


def test_sigterm_without_a_handler_removes_the_socket_and_kills_as_before(tmp_path):
    child, path = start_child(tmp_path, "import torch", with_module=True)
    try:
        child.send_signal(signal.SIGTERM)
        assert child.wait(60) == -signal.SIGTERM
        assert not os.path.exists(path)
    finally:
        child.kill()
        child.wait()


def test_sigterm_chains_to_the_scripts_own_handler_and_keeps_its_exit_status(tmp_path):
    setup = (
        "def handler(signum, frame):\n"
        "    print('script handler ran', flush=True)\n"
        "    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, handler)\n"
        "import vramtop_probe\n"
        "vramtop_probe.start()\n"
    )
    child, path = start_child(tmp_path, setup, with_module=False)
    try:
        child.send_signal(signal.SIGTERM)
        assert child.wait(60) == 3
        assert child.stdout.read() == "script handler ran\n"
        assert not os.path.exists(path)
    finally:
        child.kill()
        child.wait()


def test_an_ignored_sigterm_stays_ignored(tmp_path):
    setup = (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "import vramtop_probe\n"
        "vramtop_probe.start()\n"
        "print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN, flush=True)\n"
    )
    child, path = start_child(tmp_path, setup, with_module=False)
    try:
        assert child.stdout.readline() == "True\n"
        child.send_signal(signal.SIGTERM)
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


# ---- the stand-in training run ------------------------------------------------------------------


def run_training(tmp_path, *train_args, probe_args=("--record-history",)):
    folder = tmp_path / "snaps"
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", *probe_args, "--snapshot-dir", str(folder), TRAIN,
         *train_args],
        env=subprocess_env(XDG_RUNTIME_DIR=tempfile.mkdtemp(prefix="vt")),
        capture_output=True, text=True, timeout=120,
    )
    return done, folder


def test_the_training_run_ends_with_the_oom_and_leaves_its_snapshot(tmp_path):
    done, folder = run_training(tmp_path, "--capacity", "256MiB", "--steps", "10", "--oom-at-step", "4")
    assert done.returncode == 1
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate" in done.stderr
    [name] = os.listdir(folder)
    assert name.endswith("-oom.pickle")
    with open(folder / name, "rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][0]
    assert trace[-1]["action"] == "oom" and trace[-1]["size"] == 256 * (1 << 20) + 512
    assert trace[0]["action"] == "segment_alloc"  # traced from the first allocation
    maybe_replay(folder / name, from_empty=True)


# Imports torch after the probe started, then says what the import left behind.
AFTER_IMPORT = textwrap.dedent(
    """
    import json, sys
    watching = [type(f).__name__ for f in sys.meta_path if "vramtop" in type(f).__module__]
    import torch
    from importlib.machinery import SourceFileLoader
    from vramtop_probe import _server
    print(json.dumps({
        "before": watching,
        "after": [type(f).__name__ for f in sys.meta_path if "vramtop" in type(f).__module__],
        "loader": type(torch.cuda.__loader__).__name__,
        "spec_loader": type(torch.cuda.__spec__.loader).__name__,
        "hook": _server._cuda_hook,
        "queued": [c.__name__ for c, _ in torch.cuda._state["lazy_calls"]],
    }))
    """
)


def test_torch_cuda_imported_after_the_probe_gets_the_hook_and_keeps_its_own_loader(tmp_path):
    done = run_cli(tmp_path, script_text=AFTER_IMPORT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"] == ["_TorchCudaWatcher"] and seen["after"] == []
    assert seen["loader"] == seen["spec_loader"] == "SourceFileLoader"
    assert seen["hook"] == "queued" and seen["queued"] == ["_on_cuda_init"]


def test_history_at_launch_gives_the_weights_allocated_at_once_their_stack(tmp_path):
    # The script imports torch itself and allocates its weights as soon as it has set the
    # stand-in up: the probe must have history on by then, without the script waiting for it.
    done, folder = run_training(tmp_path, "--capacity", "256MiB", "--steps", "2", "--oom-at-step", "1",
                                "--step-sleep", "0")
    assert done.returncode == 1, done.stderr
    [name] = os.listdir(folder)
    with open(folder / name, "rb") as f:
        snapshot = pickle.load(f)
    sizes = {4 << 20: None, 300_032: None, 16 << 20: None}  # the weights, rounded to 512
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and block["size"] in sizes:
                sizes[block["size"]] = block["frames"]
    for size, frames in sizes.items():
        assert frames, f"the weight of {size} bytes has no stack"
        assert os.path.basename(frames[0]["filename"]) == "standin_train.py", frames[0]


def test_the_training_run_can_catch_its_oom_and_go_on(tmp_path):
    done, folder = run_training(
        tmp_path, "--capacity", "256MiB", "--steps", "6", "--oom-at-step", "2", "--catch-oom",
        "--step-sleep", "0", probe_args=("--snapshot-on-oom",),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["caught OOM at step 2", "done 6 steps"]
    [name] = os.listdir(folder)
    with open(folder / name, "rb") as f:
        assert pickle.load(f)["device_traces"] == [[]]  # no history: segments only


def maybe_replay(path, from_empty=False):
    binary = os.environ.get("VRAMTOP_BIN")
    if not binary:
        return
    done = subprocess.run([binary, "replay", str(path)], capture_output=True, text=True, timeout=120)
    assert "result: FULL MATCH" in done.stdout, done.stdout + done.stderr
    if from_empty:
        assert "from an empty allocator (full history)" in done.stdout, done.stdout


def test_an_oom_snapshot_of_the_training_run_replays_as_a_full_match(tmp_path):
    if not os.environ.get("VRAMTOP_BIN"):
        pytest.skip("VRAMTOP_BIN is not set (the path of a built vramtop binary)")
    done, folder = run_training(tmp_path, "--capacity", "200MiB", "--steps", "0", "--leak", "5MiB",
                                "--step-sleep", "0")
    assert done.returncode == 1
    [name] = os.listdir(folder)
    maybe_replay(folder / name, from_empty=True)


def test_an_on_demand_snapshot_of_the_running_training_is_its_whole_trace(tmp_path):
    runtime = tempfile.mkdtemp(prefix="vt")
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    folder = tmp_path / "snaps"
    child = subprocess.Popen(
        [sys.executable, "-m", "vramtop_probe", "--record-history", "--snapshot-dir", str(folder),
         TRAIN, "--capacity", "1GiB", "--steps", "0",
         "--ready-file", str(ready), "--stop-file", str(stop)],
        env=subprocess_env(XDG_RUNTIME_DIR=runtime), stdout=subprocess.PIPE, text=True,
    )
    try:
        wait_for(ready.exists, "the first step")
        client = LineClient(os.path.join(runtime, "vramtop", f"{child.pid}.sock"))
        hello = client.until("hello")
        assert hello["record_history"] == 100_000 and hello["capabilities"] == ["snapshot"]
        client.sock.sendall(b'{"v":2,"type":"snapshot_request","id":"live-1"}\n')
        done = client.until("snapshot_done")
        assert done["id"] == "live-1" and done["has_trace"] and done["segments"] > 0
        assert os.path.dirname(done["path"]) == str(folder)
        maybe_replay(done["path"], from_empty=True)
        stop.write_text("")
        assert child.wait(60) == 0
        assert child.stdout.read().startswith("done ")
    finally:
        child.kill()
        child.wait()
