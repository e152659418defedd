"""What a local run's processes must show: listeners on loopback only, a token-guarded GCS, bounded arenas.

Shared by tests/distributed/test_loopback.py (its shim and multi-worker
cases) and tests/distributed/test_distributed_signals.py, whose SIGKILL case
checks a live one-learner D4PG run with these before it kills it (one run
instead of two).
"""

import ipaddress
import os
import re

import psutil

from rlplat.distributed import loopback
from rlplat.distributed import ray_auth


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def listeners(processes):
    """``(process title, ip, port)`` of every listening TCP socket and bound UDP socket."""
    found = []
    for process in processes:
        try:
            argv = process.cmdline() or [process.name()]
            title = argv[0].strip() if argv[0].startswith("ray::") else " ".join(
                os.path.basename(part) for part in argv[:2])  # e.g. "python3.11 rlplat", "raylet ..."
            for conn in process.net_connections(kind="inet"):
                if conn.laddr and (conn.status == psutil.CONN_LISTEN or conn.type == 2):
                    found.append((title, conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return found


def words(proc) -> str:
    """A process's command line; "" for one that exited or is a zombie (a helper that just ended)."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def check_listeners(processes, expect_two_listeners):
    """Every listener of ``processes`` is on loopback, and each title named has 2 or more; returns them."""
    found = listeners(processes)
    print(f"{len(found)} listeners in {len(processes)} processes:")
    for row in found:
        print("  ", row)
    outside = [row for row in found if not is_loopback(row[1])]
    assert not outside, f"listening beyond loopback: {outside}"
    # The servers that only the shim confines were seen (not just Ray's own).
    for title in expect_two_listeners:
        ports = [row for row in found if title in row[0]]
        assert len(ports) >= 2, (title, found)
    return found


def check_token_auth(gcs, output):
    environ = gcs.environ()
    assert environ.get(ray_auth.MODE_VARIABLE) == "token"
    assert len(environ.get(ray_auth.TOKEN_VARIABLE, "")) == 64  # the run's own token
    address = re.search(r"local Ray at (\S+):(\d+)", output)
    assert address, output
    assert ray_auth.requires_token(address.group(1), int(address.group(2))) is True


def check_malloc_arenas(processes):
    """Ray's GCS and raylet run with 2 malloc arenas (they grew without), rlplat's workers with glibc's default."""
    arenas = {}
    for proc in processes:
        line = words(proc)
        role = next((r for r in ("gcs_server", "raylet/raylet", "ray::LearnerWorker", "ray::ActorWorker")
                     if r in line), None)
        if role:
            arenas.setdefault(role, set()).add(proc.environ().get("MALLOC_ARENA_MAX"))
    assert arenas.get("gcs_server") == {"2"} and arenas.get("raylet/raylet") == {"2"}, arenas
    default = str(8 * os.cpu_count())
    assert arenas.get("ray::LearnerWorker") == {default} and arenas.get("ray::ActorWorker") == {default}, arenas


def _mapped_libraries(proc) -> set:
    """Base names of the shared libraries ``proc`` has mapped."""
    return {os.path.basename(m.path) for m in proc.memory_maps() if m.path.endswith(".so")}


def check_allocators(processes):
    """The learner runs on jemalloc with the loopback shim still first; actors keep glibc's malloc."""
    libraries = {}
    for proc in processes:
        line = words(proc)
        role = next((r for r in ("ray::LearnerWorker", "ray::ActorWorker") if r in line), None)
        if role:
            libraries.setdefault(role, []).append((_mapped_libraries(proc), proc.environ().get("LD_PRELOAD", "")))
    assert set(libraries) == {"ray::LearnerWorker", "ray::ActorWorker"}, libraries.keys()
    for mapped, preload in libraries["ray::LearnerWorker"]:
        assert {"libjemalloc.so", loopback.SHIM_NAME} <= mapped, (mapped, preload)
        assert preload.split()[0] == loopback.shim_path(), preload
    for mapped, preload in libraries["ray::ActorWorker"]:
        assert loopback.SHIM_NAME in mapped and "libjemalloc.so" not in mapped, (mapped, preload)


def check_local_run(processes, output):
    """A live local one-learner run (replay inside the learner): its CLI process and all its descendants.

    Every listener on loopback (the learner's Reverb server among them), the
    GCS requires the run's own token, daemon arenas bounded, the learner on
    jemalloc behind the shim, and no warning about a missing shim.
    """
    check_listeners(processes, expect_two_listeners=["ray::LearnerWorker"])
    gcs = next(p for p in processes if "gcs_server" in words(p))
    check_token_auth(gcs, output)
    check_malloc_arenas(processes)
    check_allocators(processes)
    assert "loopback_bind.so is missing" not in output
