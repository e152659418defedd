"""What produced a run: its config, package versions and git commit.

``write_run_info(logdir, config)`` writes ``<logdir>/config.json`` (the
config alone, easy to diff) and ``<logdir>/run_info.json`` (config, package
versions, git SHA, Python, host, command line, start time). A resumed run
keeps the earlier records under ``"previous"``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from typing import Any, Dict, Mapping, Optional

from rlplat import run_dir

PACKAGES = ("tensorflow", "dm-reverb", "ray", "dm-control", "mujoco", "numpy")
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def package_versions(packages=PACKAGES) -> Dict[str, Optional[str]]:
    """Installed version of each distribution, None where it is not installed."""
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_sha(path: str = _REPO_ROOT) -> str:
    """The commit checked out at ``path`` (with "-dirty" if changed), or "unknown"."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        sha = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    try:
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        dirty = False
    return sha + ("-dirty" if dirty else "")


def write_run_info(logdir: str, config: Mapping[str, Any],
                   extra: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Writes ``config.json`` and ``run_info.json`` into ``logdir``; returns the record."""
    os.makedirs(logdir, exist_ok=True)
    config = dict(config)
    record: Dict[str, Any] = {
        "config": config,
        "versions": package_versions(),
        "git_sha": git_sha(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),  # with hostname: `rlplat status` tells a live run from an ended one
        "argv": list(sys.argv),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **dict(extra or {}),
    }
    path = run_dir.run_info_path(logdir)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                earlier = json.load(f)
            if not record.get("agent") and earlier.get("agent"):
                record["agent"] = earlier["agent"]  # recorded by the command that made the run
            record["previous"] = earlier.pop("previous", []) + [earlier]
        except (OSError, ValueError):
            pass  # an unreadable record is replaced rather than blocking the run
    run_dir.write_json(run_dir.config_path(logdir), config)
    run_dir.write_json(path, record)
    return record
