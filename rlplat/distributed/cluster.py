"""Connecting the driver to Ray: a private local instance, or a running cluster.

``connect()`` with no address starts a LOCAL Ray instance sized for this
machine, with no dashboard, quiet logs and nothing reachable from the
network: every Ray server is bound to 127.0.0.1, its sockets and logs are
in a folder only this user can enter (``shared_host.private_temp_dir``),
and the servers inside its workers that take only a port (Reverb,
TensorFlow's gRPC) are kept on loopback by the LD_PRELOAD shim
(``loopback``). Token authentication is
switched on explicitly, with a token of this instance only (``ray_auth``).

``connect("HOST:PORT")`` / ``connect("auto")`` join an existing cluster (one
started with ``ray start --head`` or ``ray up``). Ray's own connect can retry
for a long time when the address is wrong, so the GCS port is checked with a
plain socket first and ``ray.init`` itself runs under a deadline: a bad
address always fails within ``timeout_s`` with ONE line naming the fix. A
cluster that does not require token authentication is refused the same way,
unless ``allow_unauthenticated`` (``--allow-unauthenticated-ray``).

Signals: a local instance's processes (GCS, raylet, agents, and through the
raylet the workers) start in a session of their own, so a signal to the
driver's process group (Ctrl-C in a terminal, ``kill -TERM -PGID``) reaches
only the driver, which then needs them alive for the final checkpoint; they
still die with the driver: Ray's kernel fate-sharing for the head processes,
and a reaper (``reaper.py``) for the agents, which otherwise outlive a
``kill -9`` of the driver by 30 s or more. ``keep_signal_handlers``
stops ``ray.init`` from replacing the caller's SIGINT/SIGTERM handlers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from typing import Optional, Tuple

import ray

from rlplat.distributed import lean_local_ray
from rlplat.distributed import loopback
from rlplat.distributed import process
from rlplat.distributed import ray_auth
from rlplat.distributed import ray_serialization
from rlplat.distributed import reaper as reaper_lib
from rlplat.distributed import shared_host
from rlplat.utils import tf_setup

# Ray picks the node's network IP even when asked for 127.0.0.1
# (`resolve_ip_for_localhost`). This switch, which Ray itself uses on macOS
# and Windows, makes it use loopback instead; it is read in the driver (the
# module constant) and by the processes Ray starts (the environment).
_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# A refused connection means nothing listens there now; waiting the full
# timeout would only delay the error, but a head that is still starting
# deserves a few seconds.
_REFUSED_GRACE_S = 3.0

# Puts back the auth settings a local instance replaced; set while one runs.
_restore_auth = None


class ClusterConnectionError(ConnectionError):
    """Ray could not be reached or started; the message is one line with the fix."""


@dataclasses.dataclass(frozen=True)
class Connection:
    """What ``connect`` did.

    Attributes:
      address: the GCS address (``host:port``) of the instance.
      local: True when this process started the instance (it dies with us).
      owned: True when this ``connect`` call initialised Ray in this process,
        so the matching ``disconnect`` should shut it down; False when Ray was
        already initialised (e.g. by a test fixture) and is left running.
      session_dir: Ray's session directory (worker logs are under ``logs/``).
      node_ip: the driver node's IP as Ray sees it (127.0.0.1 when local).
    """

    address: str
    local: bool
    owned: bool
    session_dir: str
    node_ip: str


def connect(address: Optional[str] = None, num_cpus: Optional[int] = None,
            timeout_s: float = 30.0, *, log_to_driver: bool = False,
            logging_level: int = logging.ERROR,
            allow_unauthenticated: bool = False) -> Connection:
    """Starts or joins Ray; returns a ``Connection``.

    Args:
      address: None starts a local instance; ``"auto"`` joins the cluster
        running on this machine (``ray start --head``) or named by
        ``RAY_ADDRESS``; ``"HOST:PORT"`` joins the cluster whose head's GCS
        listens there. If Ray is already initialised in this process, that
        connection is reused whatever ``address`` says.
      num_cpus: CPUs of a local instance (default: the CPUs this process may
        use). Ignored when joining a cluster (its nodes declare their own).
      timeout_s: bound on reaching a cluster.
      log_to_driver: forward worker stdout/stderr to this process. Off by
        default so the live console line stays readable; worker logs are in
        ``<session_dir>/logs``.
      logging_level: level of Ray's own Python loggers in this process.
      allow_unauthenticated: join a cluster even if it does not require
        token authentication (otherwise refused).

    Raises:
      ClusterConnectionError: the cluster cannot be reached, refuses us, or
        does not require token authentication.
      ValueError: a malformed address.
    """
    if ray.is_initialized():
        return _current(owned=False)
    ray_serialization.install()
    if address is None or address == "local":
        return _start_local(num_cpus, log_to_driver, logging_level)
    return _join(address, timeout_s, log_to_driver, logging_level, allow_unauthenticated)


def disconnect(connection: Optional[Connection]) -> None:
    """Shuts Ray down if ``connection`` started it; otherwise leaves it alone.

    For a local instance this stops every Ray process (GCS, raylet, workers)
    of the session; for a joined cluster it only disconnects the driver, which
    ends the driver's non-detached actors.
    """
    global _restore_auth  # pylint: disable=global-statement
    if connection is not None and connection.owned and ray.is_initialized():
        ray.shutdown()
        if connection.local:
            _release_reaper()  # sweeps what ray.shutdown left (an agent still reporting)
            if _restore_auth is not None:
                _restore_auth()
                _restore_auth = None
            process.WORKER_ENV_OVERRIDES.pop("MALLOC_ARENA_MAX", None)


def total_cpus() -> float:
    """The CPUs of the connected cluster, all nodes together (``connect`` first)."""
    return float(ray.cluster_resources().get("CPU", 0.0))


def _current(owned: bool, local: Optional[bool] = None) -> Connection:
    context = ray.get_runtime_context()
    node = ray._private.worker.global_worker.node  # pylint: disable=protected-access
    address = context.gcs_address
    node_ip = node.node_ip_address if node is not None else ray.util.get_node_ip_address()
    if local is None:
        local = node is not None and node.head and node_ip in ("127.0.0.1", "::1")
    session_dir = node.get_session_dir_path() if node is not None else ""
    return Connection(address=address, local=bool(local), owned=owned,
                      session_dir=session_dir, node_ip=node_ip)


def _start_local(num_cpus: Optional[int], log_to_driver: bool, logging_level: int) -> Connection:
    num_cpus = tf_setup.available_cpus() if num_cpus is None else int(num_cpus)
    if num_cpus < 1:
        raise ValueError(f"num_cpus must be >= 1 (got {num_cpus})")
    global _restore_auth  # pylint: disable=global-statement
    try:
        # Ray makes its own temp folder 0777: the private one above it keeps others out.
        temp_dir = os.path.join(shared_host.private_temp_dir(), "ray")
    except shared_host.SharedHostError as e:
        raise ClusterConnectionError(str(e)) from None
    session = _own_session()
    restore = ray_auth.local_instance_token()
    try:
        with _loopback_only(), session, loopback.preloaded_children(), _few_malloc_arenas(), \
                lean_local_ray.lean_services(log_to_driver):
            ray.init(
                address="local",  # never RAY_ADDRESS: no address means "start one here"
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=log_to_driver,
                logging_level=logging_level,
                configure_logging=True,
                _temp_dir=temp_dir,  # not /tmp/ray, which every user of the host shares
                _system_config=dict(lean_local_ray.SYSTEM_CONFIG),
            )
    except BaseException:
        if not ray.is_initialized():
            restore()
        raise
    _restore_auth = restore
    _start_reaper(session.spawned)
    return _current(owned=True, local=True)


# The reaper of the local instance this process started (see reaper.py).
_REAPER: Optional[reaper_lib.Reaper] = None


def _start_reaper(spawned_pids) -> None:
    global _REAPER  # pylint: disable=global-statement
    if _REAPER is not None:
        _REAPER.release(timeout_s=0)
        _REAPER = None
    if spawned_pids and reaper_lib.supported():
        _REAPER = reaper_lib.Reaper(spawned_pids)


def _release_reaper() -> None:
    global _REAPER  # pylint: disable=global-statement
    if _REAPER is not None:
        _REAPER.release()
        _REAPER = None


class _loopback_only:  # pylint: disable=invalid-name
    """Makes a ``ray.init`` inside the block bind Ray's servers to 127.0.0.1.

    Restored afterwards, so a later connection to a real cluster in the same
    process resolves the node's network IP again. If a future Ray drops the
    switch, Ray simply binds to the node IP (still behind token auth).
    """

    def __enter__(self):
        from ray._private import ray_constants  # pylint: disable=g-import-not-at-top

        self._constants = ray_constants
        self._saved_env = os.environ.get(_LOOPBACK_SWITCH)
        self._saved_const = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
        os.environ[_LOOPBACK_SWITCH] = "0"
        if self._saved_const is not None:
            ray_constants.ENABLE_RAY_CLUSTER = False
        return self

    def __exit__(self, *exc_info):
        if self._saved_env is None:
            os.environ.pop(_LOOPBACK_SWITCH, None)
        else:
            os.environ[_LOOPBACK_SWITCH] = self._saved_env
        if self._saved_const is not None:
            self._constants.ENABLE_RAY_CLUSTER = self._saved_const
        return False


# glibc's malloc gives threads that allocate at the same time arenas of their
# own, up to 8 per core, and keeps every arena it made. The GCS and raylet,
# whose many gRPC threads allocate small messages, grew 6-7% over a 30-minute
# D4PG soak (gcs 50 -> 53 MiB, raylet 35 -> 37 MiB) and kept growing; with two
# arenas both stayed flat (gcs 41, raylet 27 MiB from minute 3 to 30).
_DAEMON_MALLOC_ARENAS = "2"


class _few_malloc_arenas:  # pylint: disable=invalid-name
    """Ray's daemons started inside the block use two malloc arenas; rlplat's workers keep glibc's default.

    The variable is read when a program starts, so it is set only while
    ``ray.init`` spawns the GCS, raylet and agents. The raylet would pass it
    on to every worker, so workers get glibc's own default (8 per core) back
    through their ``runtime_env`` (``process.WORKER_ENV_OVERRIDES``). A value
    the user set is left alone, for daemons and workers alike.
    """

    def __enter__(self):
        self._set = "MALLOC_ARENA_MAX" not in os.environ
        if self._set:
            os.environ["MALLOC_ARENA_MAX"] = _DAEMON_MALLOC_ARENAS
            process.WORKER_ENV_OVERRIDES["MALLOC_ARENA_MAX"] = str(8 * (os.cpu_count() or 1))
        return self

    def __exit__(self, *exc_info):
        if self._set:
            os.environ.pop("MALLOC_ARENA_MAX", None)
        return False


class _own_session:  # pylint: disable=invalid-name
    """Makes the processes a ``ray.init`` inside the block spawns start a new session.

    Ray 2.60 already blocks SIGINT in them, but a SIGTERM or SIGHUP sent to the
    driver's process group would kill the GCS and raylet (and with them the
    learner) before the driver could save its checkpoint. Ray spawns them all
    through ``services.ConsolePopen``; kernel fate-sharing (PR_SET_PDEATHSIG,
    set in their ``preexec_fn``) still ends them when the driver dies. If a
    future Ray drops that class, they simply stay in the driver's group.
    ``spawned`` collects their PIDs (each its session's ID) for the reaper.
    """

    def __init__(self):
        self.spawned: list = []

    def __enter__(self):
        from ray._private import services  # pylint: disable=g-import-not-at-top

        self._services = services
        self._saved = getattr(services, "ConsolePopen", None)
        if self._saved is not None and os.name == "posix":
            base = self._saved
            spawned = self.spawned

            class NewSessionPopen(base):  # pylint: disable=too-few-public-methods
                def __init__(self, *args, **kwargs):
                    kwargs.setdefault("start_new_session", True)
                    super().__init__(*args, **kwargs)
                    if kwargs["start_new_session"]:
                        spawned.append(self.pid)  # its PID is its session's ID

            services.ConsolePopen = NewSessionPopen
        return self

    def __exit__(self, *exc_info):
        if self._saved is not None:
            self._services.ConsolePopen = self._saved
        return False


class keep_signal_handlers:  # pylint: disable=invalid-name
    """Inside the block, ``signal.signal`` leaves SIGINT and SIGTERM as they are.

    ``ray.init`` installs a SIGTERM handler that calls ``sys.exit(15)``; a
    SIGTERM during the seconds ``ray.init`` takes would then skip the caller's
    clean-up and exit code. Only the main thread's calls are held back (others
    cannot set handlers anyway). Ray's C++ core also hooks SIGTERM, below Python (it logs
    a stack, then calls Python's handler): call ``signal.signal`` again after
    the block to drop that hook.
    """

    def __enter__(self):
        self._original = signal.signal

        def held(signum, handler):
            if (signum in (signal.SIGINT, signal.SIGTERM)
                    and threading.current_thread() is threading.main_thread()):
                return signal.getsignal(signum)
            return self._original(signum, handler)

        signal.signal = held
        return self

    def __exit__(self, *exc_info):
        signal.signal = self._original
        return False


def _join(address: str, timeout_s: float, log_to_driver: bool, logging_level: int,
          allow_unauthenticated: bool) -> Connection:
    shown = address
    if address == "auto":
        address = _resolve_auto()
        shown = f"{address} (--address auto)"
    host, port = parse_address(address)
    _wait_reachable(host, port, timeout_s, shown)
    # Asked before Ray connects: joining already ships and runs our code there.
    if not allow_unauthenticated:
        verdict = ray_auth.requires_token(host, port, min(timeout_s, 10.0))
        if verdict is False:
            raise ClusterConnectionError(ray_auth.refusal(shown))
        if verdict is None:  # fail closed: no proof that it checks tokens is no proof at all
            raise ClusterConnectionError(ray_auth.no_verdict(shown))

    # The port answers; now let Ray connect, under the same deadline (a port
    # that is open but is not a Ray GCS would otherwise keep Ray retrying).
    outcome: list = []

    def init() -> None:
        try:
            ray.init(address=f"{host}:{port}", log_to_driver=log_to_driver,
                     logging_level=logging_level, configure_logging=True)
            outcome.append(None)
        except BaseException as e:  # pylint: disable=broad-except
            outcome.append(e)

    # ray.init warns when it cannot install its SIGTERM handler off the main
    # thread; the layout installs its own handlers anyway.
    worker_log = logging.getLogger("ray._private.worker")
    saved_level = worker_log.level
    worker_log.setLevel(logging.ERROR)
    thread = threading.Thread(target=init, name="ray-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    worker_log.setLevel(saved_level)
    if not outcome:
        raise ClusterConnectionError(
            f"Ray at {shown} accepted a connection but did not finish connecting within "
            f"{timeout_s:g}s; check that it is a Ray head's GCS port (`ray status --address "
            f"{host}:{port}`) or drop --address to run locally")
    error = outcome[0]
    if error is not None:
        if ray.is_initialized():
            ray.shutdown()
        raise ClusterConnectionError(_init_error_message(shown, error)) from error
    return _current(owned=True, local=False)


def parse_address(address: str) -> Tuple[str, int]:
    """Splits ``HOST:PORT`` (IPv6 as ``[::1]:6379``); raises a one-line ValueError."""
    host, sep, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"--address must be 'auto' or HOST:PORT like 10.0.0.5:6379 (got {address!r})")
    return host, int(port_text)


def _resolve_auto(temp_dir: Optional[str] = None) -> str:
    """``RAY_ADDRESS``, else the bootstrap file ``ray start --head`` left, if it can be trusted.

    The file lives in Ray's temp folder, usually under a world-writable /tmp:
    another local user could have written it to point us at a fake GCS that
    collects our token. So it is read only when this user owns it and no
    other user can write its folder.
    """
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address and address != "auto":
        return address
    folder = temp_dir or os.environ.get("RAY_TMPDIR") or "/tmp/ray"
    path = os.path.join(folder, "ray_current_cluster")
    try:
        file_stat, folder_stat = os.stat(path), os.stat(folder)
    except OSError:
        raise ClusterConnectionError(
            "--address auto found no running Ray cluster on this machine (and RAY_ADDRESS is "
            "unset); start one with `ray start --head` or drop --address to run locally") from None
    if file_stat.st_uid != os.geteuid():
        raise ClusterConnectionError(
            f"--address auto: {path} belongs to user id {file_stat.st_uid}, not you, so it may point "
            "anywhere; pass --address HOST:PORT (or set RAY_ADDRESS) of a cluster you trust")
    if folder_stat.st_mode & 0o022:
        raise ClusterConnectionError(
            f"--address auto: other users can write {folder}, so {path} may have been replaced; pass "
            "--address HOST:PORT (or set RAY_ADDRESS) of a cluster you trust")
    with open(path, encoding="utf-8") as f:
        resolved = f.read().strip()
    if not resolved:
        raise ClusterConnectionError(
            f"--address auto: {path} is empty; start a cluster with `ray start --head` "
            "or drop --address to run locally")
    return resolved


def _wait_reachable(host: str, port: int, timeout_s: float, shown: str) -> None:
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(remaining, 2.0))):
                return
        except socket.gaierror as e:
            raise ClusterConnectionError(
                f"could not resolve Ray host {host!r} in {shown} ({e.strerror}); fix --address "
                "or drop it to run locally") from None
        except OSError as e:
            reason = "connection refused" if isinstance(e, ConnectionRefusedError) else (
                e.strerror or type(e).__name__)
            elapsed = time.monotonic() - start
            gave_up = time.monotonic() >= deadline or (
                isinstance(e, ConnectionRefusedError) and elapsed >= min(_REFUSED_GRACE_S, timeout_s))
            if gave_up:
                raise ClusterConnectionError(
                    f"could not reach Ray at {shown} within {max(elapsed, 1):.0f}s ({reason}); start one "
                    "with `ray start --head` or drop --address to run locally") from None
        time.sleep(0.25)


def _init_error_message(shown: str, error: BaseException) -> str:
    text = " ".join(str(error).split())  # one line, whatever Ray printed
    if "auth" in type(error).__name__.lower() or "token" in text.lower():
        return (f"Ray at {shown} rejected this driver's authentication token ({text[:160]}); "
                "copy the head's token (`ray get-auth-token` there) into ~/.ray/auth_token or "
                "RAY_AUTH_TOKEN, or drop --address to run locally")
    return (f"could not connect to Ray at {shown} ({type(error).__name__}: {text[:200]}); "
            "check `ray status` on the head, or drop --address to run locally")
