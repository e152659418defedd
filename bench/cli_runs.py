"""Benches that run ``rlplat`` commands as a user would, and read the run directories they leave.

``run`` starts one command with its output in a log file; ``trial_dirs`` finds
the runs of a sweep or scale-check directory; ``eval_points`` reads one run's
evaluation curve as ``[[env steps, return], ...]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence


def _rlplat() -> List[str]:
    script = os.path.join(os.path.dirname(sys.executable), "rlplat")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "rlplat.launch.cli"]


def run(argv: Sequence[str], log: str, ok_codes: Sequence[int] = (0,), bench: str = "bench",
        env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None) -> float:
    """Runs ``rlplat ARGV`` (in ``env`` and ``cwd``, default this process's) with its output in ``log``;
    returns its wall seconds.

    Exits the bench with one line when the command's exit code is not in ``ok_codes``.
    """
    print("$ rlplat " + " ".join(argv), flush=True)
    start = time.monotonic()
    with open(log, "w") as f:
        code = subprocess.call(_rlplat() + list(argv), stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    seconds = time.monotonic() - start
    if code not in ok_codes:
        sys.exit(f"{bench}: `rlplat {argv[0]}` exited {code}; see {log}")
    return seconds


def trial_dirs(directory: str) -> Dict[str, str]:
    """Run directory name -> path, for every trial in a sweep or scale-check directory."""
    return {name: os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if os.path.exists(os.path.join(directory, name, "config.json"))}


def eval_points(path: str) -> list:
    """The run's evaluations, ``[[env steps, mean return], ...]``."""
    from rlplat.utils import curves  # pylint: disable=g-import-not-at-top

    return curves.points(curves.load_run(path), "eval_return", "env_steps").tolist()
