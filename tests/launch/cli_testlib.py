"""Helpers shared by the CLI tests: run `rlplat` as a user would, check usage errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The console script `pip install` made next to this interpreter (what a user types).
RLPLAT = os.path.join(os.path.dirname(sys.executable), "rlplat")


def run_rlplat(*args, timeout=180):
    """`python -m rlplat.launch.cli ARGS` in the repo, outside any TF_CONFIG."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "rlplat.launch.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def run_rlplat_as_user(*args, cwd, timeout=60, extra_path=None, extra_env=None):
    """The `rlplat` command from a user's shell: no TF_CPP_MIN_LOG_LEVEL, no TF_CONFIG.

    Runs in ``cwd`` (where default run directories would land). ``extra_path``
    goes first on PYTHONPATH (e.g. stand-in modules); ``extra_env`` adds
    variables. Returns ``(CompletedProcess, seconds)``.
    """
    env = dict(os.environ, **(extra_env or {}))
    for key in ("TF_CPP_MIN_LOG_LEVEL", "TF_CONFIG"):
        env.pop(key, None)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
    command = [RLPLAT] if os.path.exists(RLPLAT) else [sys.executable, "-m", "rlplat.launch.cli"]
    start = time.monotonic()
    result = subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    return result, time.monotonic() - start


def assert_usage_error(result, *fragments):
    """Exit 2 with exactly one `rlplat: error:` line containing every fragment."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlplat: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr
