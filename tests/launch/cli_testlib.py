"""Helpers shared by the CLI tests: run `rlplat` as a user would, check usage errors."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_rlplat(*args, timeout=180):
    """`python -m rlplat.launch.cli ARGS` in the repo, outside any TF_CONFIG."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "rlplat.launch.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_usage_error(result, *fragments):
    """Exit 2 with exactly one `rlplat: error:` line containing every fragment."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlplat: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr
