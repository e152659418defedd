"""What the multi-node tests share: scripts/multinode_cluster.sh, its node addresses, and whether it can run here."""

import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "multinode_cluster.sh")
HEAD, W1, W2 = "10.231.7.1", "10.231.7.2", "10.231.7.3"


def namespaces_work() -> bool:
    """Root, the tools, and a kernel/container that lets us make PID + network namespaces."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    if not all(shutil.which(t) for t in ("unshare", "nsenter", "ip")):
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--", "ip", "link",
                            "add", "probe0", "type", "bridge"], capture_output=True, timeout=30)
    return probe.returncode == 0


def script(*args, timeout):
    """Runs ``scripts/multinode_cluster.sh ARGS``; its completed process (text output)."""
    return subprocess.run([SCRIPT, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


#: The marks every module on this cluster carries (each adds ``usefixtures("loopback_cluster_turn")`` itself,
#: where ``tests/test_scheduling.py`` looks for it).
CLUSTER_MARKS = [
    pytest.mark.multiprocess,
    pytest.mark.slow,
    pytest.mark.skipif(not namespaces_work(),
                       reason="needs root, unshare/nsenter/ip and permission to create PID and "
                              "network namespaces (scripts/multinode_cluster.sh)"),
    pytest.mark.skipif(not os.path.exists(os.path.join(REPO, ".venv", "bin", "ray")),
                       reason="needs the project venv (scripts/setup.sh)"),
]
