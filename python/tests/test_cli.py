"""``python -m vramtop_probe script.py ARGS`` runs the script with the probe, no code change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

from conftest import LineClient, subprocess_env, wait_for

# The script under test asks its own probe for hello, as vramtop would, and prints what it saw.
SELF_CHECK = textwrap.dedent(
    """
    import json, socket, sys
    import torch
    import vramtop_probe
    probe = vramtop_probe.current()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    client.connect(probe.path)
    hello = json.loads(client.makefile("rb").readline())
    print(json.dumps({"name": __name__, "argv": sys.argv, "hello": hello,
                      "path0": sys.path[0], "interval": probe.stats_interval}))
    """
)


def run_cli(tmp_path, *args, script_text=SELF_CHECK, env=None):
    script = tmp_path / "train.py"
    script.write_text(script_text)
    return subprocess.run(
        [sys.executable, "-m", "vramtop_probe", *args, str(script), "a", "--b", "c"],
        env=env or subprocess_env(XDG_RUNTIME_DIR=tempfile.mkdtemp(prefix="vt")),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_module_runs_the_script_as_main_with_its_argv_and_the_probe(tmp_path):
    done = run_cli(tmp_path, "--interval", "0.5")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    script = str(tmp_path / "train.py")
    assert seen["name"] == "__main__"
    assert seen["argv"] == [script, "a", "--b", "c"]
    assert seen["path0"] == str(tmp_path)
    assert seen["interval"] == 0.5
    assert seen["hello"]["type"] == "hello"
    assert seen["hello"]["argv"] == [script, "a", "--b", "c"]
    assert seen["hello"]["stats_interval_s"] == 0.5
    assert seen["hello"]["devices"] == [0]


def test_the_script_exit_code_and_traceback_come_through(tmp_path):
    done = run_cli(tmp_path, script_text="import sys\nprint('ran')\nsys.exit(7)\n")
    assert done.returncode == 7 and done.stdout == "ran\n"
    failed = run_cli(tmp_path, script_text="raise ValueError('from the script')\n")
    assert failed.returncode == 1
    assert "ValueError: from the script" in failed.stderr


def test_a_missing_script_is_a_clear_error_with_exit_code_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", str(tmp_path / "nope.py")],
        env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "can't open file" in done.stderr


def test_a_bad_interval_is_refused_by_the_command_line(tmp_path):
    done = run_cli(tmp_path, "--interval", "0")
    assert done.returncode == 2 and "positive number of seconds" in done.stderr
    # One line, as the docs promise: no usage block.
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("python -m vramtop_probe: error: argument --interval:"), done.stderr


def test_process_exit_sends_bye_with_reason_exit_and_removes_the_socket(tmp_path):
    runtime = tempfile.mkdtemp(prefix="vt")
    go = tmp_path / "go"
    script = tmp_path / "train.py"
    script.write_text(
        "import os, time\nimport torch\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.01)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "vramtop_probe", "--interval", "0.05", str(script)],
        env=subprocess_env(XDG_RUNTIME_DIR=runtime),
    )
    try:
        path = os.path.join(runtime, "vramtop", f"{child.pid}.sock")
        wait_for(lambda: os.path.exists(path), "the probe's socket")
        client = LineClient(path)
        assert client.message()["type"] == "hello"
        assert client.until("stats")["device"] == 0
        go.write_text("")
        rest = client.rest()
        assert rest[-1] == {"v": 2, "type": "bye", "time": rest[-1]["time"], "reason": "exit"}
        assert child.wait(60) == 0
        assert not os.path.exists(path)
    finally:
        child.kill()
        child.wait()


def test_no_script_is_a_usage_error_naming_only_the_script():
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe"],
        env=subprocess_env(XDG_RUNTIME_DIR=tempfile.mkdtemp(prefix="vt")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "the script to run is required" in last, done.stderr
    assert "args" not in last, done.stderr


def test_an_interval_takes_a_unit_as_vramtop_does(tmp_path):
    done = run_cli(tmp_path, "--interval", "500ms")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["interval"] == 0.5
    done = run_cli(tmp_path, "--interval", "2s")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["interval"] == 2.0


def test_an_interval_with_an_unknown_unit_says_which_units_there_are(tmp_path):
    done = run_cli(tmp_path, "--interval", "1m")
    assert done.returncode == 2, done.stderr
    assert "seconds (0.5, 2s) or milliseconds (500ms)" in done.stderr, done.stderr


def test_a_count_after_a_bare_record_history_says_to_join_it_with_equals(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", "--record-history", "100000",
         str(tmp_path / "train.py")],
        env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--record-history takes its count after '=': --record-history=100000" in done.stderr
    assert "can't open file" not in done.stderr


def test_dash_m_runs_a_module_as_main_with_its_argv_and_the_probe(tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(SELF_CHECK)
    env = subprocess_env(XDG_RUNTIME_DIR=tempfile.mkdtemp(prefix="vt"))
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", "--interval", "0.5", "-m", "mypkg.train",
         "a", "--b", "c"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(package / "train.py"), "a", "--b", "c"]
    assert seen["interval"] == 0.5


def test_dash_m_with_a_missing_module_is_a_one_line_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", "-m", "nosuchpkg.train"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "python -m vramtop_probe: no module named 'nosuchpkg.train'\n"


def test_dash_m_without_a_module_names_what_is_missing():
    done = subprocess.run(
        [sys.executable, "-m", "vramtop_probe", "-m"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "argument -m: expected the module to run" in done.stderr, done.stderr
