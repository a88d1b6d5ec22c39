"""The KaTeX server's start (``conf/_ext/tinyformer_site.py``, ``robust_katex_start``): retried until its timeout,
and the server ended on any failure, so that it never holds the build's output.

A fake ``node`` stands in for Node.js: it binds the server's Unix socket and listens only later (the window in
which sphinxcontrib-katex 0.9.11 crashed with ConnectionRefusedError), or never, ignoring SIGTERM.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "conf" / "_ext" / "tinyformer_site.py"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the fake node listens on a Unix socket")

FAKE_NODE = """\
#!{python}
import os, signal, socket, sys, time
mode, pid_file = os.environ["FAKE_KATEX_MODE"], os.environ["FAKE_KATEX_PID"]
open(pid_file, "w").write(str(os.getpid()))
path = sys.argv[sys.argv.index("--socket") + 1]
time.sleep(0.3)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)  # the socket file exists from here on, but connecting is refused until listen()
if mode == "never":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
time.sleep(1.0)
server.listen(1)
connection, _ = server.accept()
sys.stdin.read()  # until the build ends the server
"""


def fake_node(tmp_path: Path, mode: str) -> tuple[Path, Path, dict[str, str]]:
    node = tmp_path / "node"
    node.write_text(FAKE_NODE.format(python=sys.executable))
    node.chmod(0o755)
    pid_file = tmp_path / "node.pid"
    return node, pid_file, {"FAKE_KATEX_MODE": mode, "FAKE_KATEX_PID": str(pid_file)}


def load_katex(node: Path, startup_timeout: float):
    katex = pytest.importorskip("sphinxcontrib.katex")
    spec = importlib.util.spec_from_file_location("tinyformer_site_under_test", SITE)
    site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site)
    site.robust_katex_start(katex)
    katex.NODEJS_BINARY = str(node)
    katex.STARTUP_TIMEOUT = startup_timeout
    return katex


def test_a_server_slow_to_listen_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node, _pid_file, env = fake_node(tmp_path, "slow")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    katex = load_katex(node, startup_timeout=30.0)
    server = katex.KaTeXServer.start()
    try:
        assert server.sock.getpeername()  # connected
        assert server.process.poll() is None
    finally:
        server.terminate()
        server.process.stdin.close()
        server.process.stdout.close()
        # sphinxcontrib-katex ends its server at exit too
        atexit.unregister(katex.KaTeXServer.terminate)
    assert server.process.poll() is not None


def test_a_server_that_never_listens_is_ended_and_does_not_hold_the_output(tmp_path: Path) -> None:
    """In a child process, as a build runs: its caller reads the build's output to the end, which a server left
    running would hold open for ever."""
    node, pid_file, env = fake_node(tmp_path, "never")
    script = textwrap.dedent(f"""
        import importlib.util, sys, time
        import sphinxcontrib.katex as katex
        spec = importlib.util.spec_from_file_location("site", {str(SITE)!r})
        site = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(site)
        site.robust_katex_start(katex)
        katex.NODEJS_BINARY = {str(node)!r}
        katex.STARTUP_TIMEOUT = 2.0
        started = time.monotonic()
        try:
            katex.KaTeXServer.start()
        except katex.KaTeXError as error:
            print(f"refused after {{time.monotonic() - started:.1f}} s: {{error}}")
            sys.exit(1)
        print("started")
    """)
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | env,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "KaTeX server did not came up after 2.0 seconds" in run.stdout, run.stdout + run.stderr
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_that_exits_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\nexit 3\n")
    node.chmod(0o755)
    katex = load_katex(node, startup_timeout=30.0)
    with pytest.raises(katex.KaTeXError, match=r"exited with status 3 before it listened"):
        katex.KaTeXServer.start()
