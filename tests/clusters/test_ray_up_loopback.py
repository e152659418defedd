"""`ray up` for real: clusters/local.yaml on this machine over SSH on loopback.

Two "machines" on one host: sshd on 127.0.0.2 (the head) and on 127.0.0.3 (the
worker), each inside its own PID and mount namespace (scripts/sshd_loopback.sh).
The test renders a variant of clusters/local.yaml with the loopback specifics,
runs `ray up`, submits `rlplat train d4pg` with `ray job submit` (token auth
on), checks the job succeeded and finished its run, then runs `ray down` and
checks that no Ray process of the cluster is left.

Isolation from other Ray users of the machine: `ray stop` (run by `ray up` and
`ray down`) sees only its namespace; every Ray port is a free one picked here,
never a default; each node has its own --temp-dir, so no address file lands in
/tmp/ray and a bare `ray.init()` elsewhere cannot find this cluster.
"""

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest
import yaml

from rlplat.clusters.check import check_cluster_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAY = os.path.join(REPO, ".venv", "bin", "ray")
SSHD_SCRIPT = os.path.join(REPO, "scripts", "sshd_loopback.sh")
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
MAX_ACTOR_STEPS = 1000


# Ray's per-node ports, besides the head-only GCS / dashboard / client ports.
_NODE_PORT_FLAGS = ("node-manager-port", "object-manager-port", "metrics-export-port",
                    "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                    "runtime-env-agent-port")


def _free_ports(count, hosts=("0.0.0.0",)):
    """`count` distinct ports free on every address in `hosts` right now."""
    ports = []
    held = []
    while len(ports) < count:
        probe = socket.socket()
        probe.bind((hosts[0], 0))
        port = probe.getsockname()[1]
        held.append(probe)
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        ports.append(port)
    for probe in held:
        probe.close()
    return ports


def _flags(ports):
    return " ".join(f"--{flag}={port}" for flag, port in ports.items())


def render_loopback_config(local_yaml, *, cluster_name, key_path, token_path, ssh_port,
                           gcs_port, head_flags, worker_flags):
    """clusters/local.yaml with the loopback specifics; fails loudly if local.yaml changed shape.

    Kept from local.yaml: the provider type, auth user layout, the token
    file_mount, the ~/.bashrc setup line (it puts `ray` on the login PATH, which
    `ray down` needs) and the start commands, including their `ray stop`.
    Changed: addresses, the SSH port (through `nc`, as Ray has no ssh_port),
    no source mounts or pip installs (the nodes use this checkout's .venv as
    ~/rlplat-venv), and Ray ports / temp dirs / CPU counts for a shared host.
    """
    with open(local_yaml) as f:
        config = yaml.safe_load(f)
    bashrc = [c for c in config["setup_commands"] if "bashrc" in c]
    assert len(bashrc) == 1, "local.yaml: expected one setup command that edits ~/.bashrc"
    head_start = list(config["head_start_ray_commands"])
    worker_start = list(config["worker_start_ray_commands"])
    assert "--port=6379" in head_start[-1], "local.yaml: head start command lost --port=6379"
    assert "$RAY_HEAD_IP:6379" in worker_start[-1], "local.yaml: worker start lost $RAY_HEAD_IP:6379"
    head_start[-1] = head_start[-1].replace("--port=6379", f"--port={gcs_port} {head_flags}")
    worker_start[-1] = worker_start[-1].replace(
        "$RAY_HEAD_IP:6379", f"$RAY_HEAD_IP:{gcs_port} {worker_flags}")

    config.update(
        cluster_name=cluster_name,
        min_workers=1,
        max_workers=1,
        idle_timeout_minutes=60,
        file_mounts={"~/.ray/auth_token": token_path},
        setup_commands=[f"test -e ~/rlplat-venv || ln -s {REPO}/.venv ~/rlplat-venv", bashrc[0]],
        head_setup_commands=[],
        worker_setup_commands=[],
        head_start_ray_commands=head_start,
        worker_start_ray_commands=worker_start,
    )
    config["provider"].update(head_ip=HEAD_IP, worker_ips=[WORKER_IP])
    config["auth"] = {"ssh_user": "root", "ssh_private_key": key_path,
                      "ssh_proxy_command": f"nc %h {ssh_port}"}
    return config


def _problems_besides_the_install(path):
    """`rlplat cluster check` problems, less the one the variant has on purpose.

    The nodes use this checkout's .venv, already installed; a pip install there
    would change the venv that other tests are using.
    """
    problems = check_cluster_config(path)
    assert any("no setup command installs rlplat" in p for p in problems), problems
    return [p for p in problems if "no setup command installs rlplat" not in p]


def _run(args, timeout, env, check=True):
    """Runs a CLI step under a deadline; on failure the assertion shows its output."""
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-3000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-3000:]
        pytest.fail(f"{' '.join(args[:3])} did not finish within {timeout}s:\n{out}")
    if check:
        assert done.returncode == 0, (
            f"{' '.join(args[:3])} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def _namespace_processes(pidns):
    """(pid, cmdline) of every process in the PID namespace `pidns` ("pid:[...]")."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != pidns:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace").strip()))
        except OSError:  # gone meanwhile
            continue
    return found


def _ray_processes(pidns):
    """Processes of that namespace other than sshd itself (all Ray's: nothing else runs there)."""
    return [(pid, cmd) for pid, cmd in _namespace_processes(pidns)
            if cmd and not cmd.startswith("sshd")]


@pytest.fixture
def loopback_nodes():
    """Two sshds (head, worker) in their own namespaces; torn down whatever happens."""
    root = tempfile.mkdtemp(prefix="rlup", dir="/tmp")  # short: Ray's socket paths have a limit
    key = os.path.join(root, "key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True, timeout=30)
    ssh_port, = _free_ports(1, hosts=(HEAD_IP, WORKER_IP))
    nodes = {"head": os.path.join(root, "head"), "worker": os.path.join(root, "worker")}
    try:
        for name, ip in (("head", HEAD_IP), ("worker", WORKER_IP)):
            subprocess.run([SSHD_SCRIPT, "start", nodes[name], ip, str(ssh_port), key + ".pub", "600"],
                           check=True, timeout=300)
        # The head's autoscaler reaches the worker through ~/.ssh/config: Ray drops
        # ssh_proxy_command from the config it gives the head.
        with open(os.path.join(nodes["head"], "home", ".ssh", "config"), "w") as f:
            f.write(f"Host {WORKER_IP}\n    Port {ssh_port}\n")
        yield {"root": root, "key": key, "ssh_port": ssh_port, "dirs": nodes,
               "pidns": {n: open(os.path.join(d, "pidns")).read().strip() for n, d in nodes.items()}}
    finally:
        for directory in nodes.values():
            subprocess.run([SSHD_SCRIPT, "stop", directory], timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_loopback_variant_of_local_yaml_passes_the_checks(tmp_path):
    config = render_loopback_config(
        os.path.join(REPO, "clusters", "local.yaml"), cluster_name="rlplat-loopback-check",
        key_path="/k", token_path="/t", ssh_port=22022, gcs_port=40000,
        head_flags="--temp-dir=/tmp/x/head", worker_flags="--temp-dir=/tmp/x/worker")
    path = tmp_path / "loopback.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert _problems_besides_the_install(str(path)) == []
    # What the isolation rests on: the start commands still `ray stop` first, and
    # Ray's default GCS port is gone from them.
    for commands in (config["head_start_ray_commands"], config["worker_start_ray_commands"]):
        assert commands[0].endswith("ray stop") and "6379" not in " ".join(commands)
    assert "--port=40000 --temp-dir=/tmp/x/head" in config["head_start_ray_commands"][-1]
    assert "$RAY_HEAD_IP:40000 --temp-dir=/tmp/x/worker" in config["worker_start_ray_commands"][-1]
    assert config["file_mounts"] == {"~/.ray/auth_token": "/t"}
    # Ray's command runner exports OMP_NUM_THREADS=1, which a bare nproc obeys.
    assert "$(env -u OMP_NUM_THREADS nproc)" in config["worker_start_ray_commands"][-1]


@pytest.mark.usefixtures("loopback_cluster_turn")  # one fake cluster on the machine at a time
@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root: sshd in PID/mount namespaces (scripts/sshd_loopback.sh)")
@pytest.mark.skipif(not os.path.exists(RAY), reason="needs the project venv (scripts/setup.sh)")
def test_ray_up_job_submit_ray_down_on_loopback(loopback_nodes, tmp_path):
    root = loopback_nodes["root"]
    cluster_name = f"rlplat-loopback-{uuid.uuid4().hex[:8]}"
    ports = _free_ports(3 + 2 * len(_NODE_PORT_FLAGS))
    gcs_port, dashboard_port, client_port = ports[:3]
    head_ports = dict(zip(_NODE_PORT_FLAGS, ports[3:3 + len(_NODE_PORT_FLAGS)]))
    worker_ports = dict(zip(_NODE_PORT_FLAGS, ports[3 + len(_NODE_PORT_FLAGS):]))
    head_flags = (f"--node-ip-address={HEAD_IP} --num-cpus=1 --temp-dir={root}/head/ray "
                  f"--dashboard-port={dashboard_port} --ray-client-server-port={client_port} "
                  + _flags(head_ports))
    worker_flags = (f"--node-ip-address={WORKER_IP} --num-cpus=2 --temp-dir={root}/worker/ray "
                    + _flags(worker_ports))

    # A token of this cluster only; clients find it through RAY_AUTH_TOKEN_PATH.
    token_path = os.path.join(root, "auth_token")
    with open(token_path, "w") as f:
        f.write(uuid.uuid4().hex + uuid.uuid4().hex)
    os.chmod(token_path, 0o600)

    config = render_loopback_config(
        os.path.join(REPO, "clusters", "local.yaml"), cluster_name=cluster_name,
        key_path=loopback_nodes["key"], token_path=token_path, ssh_port=loopback_nodes["ssh_port"],
        gcs_port=gcs_port, head_flags=head_flags, worker_flags=worker_flags)
    config_path = os.path.join(root, "cluster.yaml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    assert _problems_besides_the_install(config_path) == []

    env = dict(os.environ, RAY_UP_enable_autoscaler_v2="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=token_path)
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_TOKEN", None)
    dashboard = f"http://127.0.0.1:{dashboard_port}"
    pidns = loopback_nodes["pidns"]
    started = time.monotonic()
    try:
        _run([RAY, "up", "-y", "--no-config-cache", config_path], timeout=150, env=env)
        print(f"[loopback] ray up returned after {time.monotonic() - started:.0f} s")

        # The head's autoscaler brings the worker up after `ray up` returns.
        deadline = time.monotonic() + 90
        while True:
            status = _run([RAY, "status", "--address", f"{HEAD_IP}:{gcs_port}"], timeout=30,
                          env=env, check=False)
            # Only the head offers `learner` and only the worker `actor`.
            if status.returncode == 0 and all(
                    re.search(rf"/\d+(\.\d+)? {name}$", status.stdout, re.M) for name in ("learner", "actor")):
                break
            assert time.monotonic() < deadline, f"worker never joined:\n{status.stdout}{status.stderr}"
            time.sleep(3)
        # local.yaml gives a worker one `actor` per CPU, whatever OMP_NUM_THREADS Ray exports.
        actor_total = float(re.search(r"/(\d+(?:\.\d+)?) actor$", status.stdout, re.M).group(1))
        assert actor_total == len(os.sched_getaffinity(0)), status.stdout
        print(f"[loopback] cluster up with its worker after {time.monotonic() - started:.0f} s")
        assert _ray_processes(pidns["head"]) and _ray_processes(pidns["worker"])
        # No address file where a bare `ray.init()` looks: this cluster stays private.
        default_address_file = os.path.join("/tmp", "ray", "ray_current_cluster")
        if os.path.exists(default_address_file):
            with open(default_address_file) as f:
                assert str(gcs_port) not in f.read()

        logdir = str(tmp_path / "run")
        submission_id = f"rlplat-{uuid.uuid4().hex[:8]}"
        _run([RAY, "job", "submit", "--address", dashboard, "--submission-id", submission_id,
              "--no-wait", "--", "rlplat", "train", "d4pg", "--env", "cartpole:balance",
              "--num-actors", "2", "--max-actor-steps", str(MAX_ACTOR_STEPS), "--address", "auto",
              "--min-replay-size", "200", "--global-batch-size", "32",
              "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32",
              "--eval-period", "1000", "--logdir", logdir], timeout=60, env=env)
        deadline = time.monotonic() + 150
        while True:
            state = _run([RAY, "job", "status", "--address", dashboard, submission_id],
                         timeout=30, env=env, check=False).stdout
            if re.search(r"\b(succeeded|failed|stopped)\b", state, re.I):
                break
            if time.monotonic() > deadline:
                _run([RAY, "job", "stop", "--address", dashboard, submission_id], timeout=30, env=env,
                     check=False)
                pytest.fail(f"job {submission_id} did not finish within 150 s:\n{state}")
            time.sleep(3)
        print(f"[loopback] job finished after {time.monotonic() - started:.0f} s")
        logs = _run([RAY, "job", "logs", "--address", dashboard, submission_id],
                    timeout=30, env=env).stdout
        assert re.search(r"\bsucceeded\b", state, re.I), f"{state}\n{logs[-3000:]}"
        assert f"done: {MAX_ACTOR_STEPS:,} actor steps" in logs, logs[-3000:]
        assert "Ray cluster at" in logs, logs[-3000:]  # joined the cluster, not a local instance
        with open(os.path.join(logdir, "run_info.json")) as f:
            run_info = json.load(f)
        # The driver joined this cluster (on the head) instead of starting its own Ray.
        assert run_info["ray_local"] is False, run_info
        assert run_info["ray_address"] == f"{HEAD_IP}:{gcs_port}", run_info
    finally:
        down = _run([RAY, "down", "-y", config_path], timeout=90, env=env, check=False)
        _remove_client_files(cluster_name)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    # `ray down` reports success whatever happened, so look: it ran `ray stop`
    # on the head, whose namespace must be empty of Ray now.
    assert not _wait_gone(pidns["head"], 20), f"Ray left on the head: {_ray_processes(pidns['head'])}"

    # On a local-provider cluster `ray down` does not touch the workers (the
    # provider only marks them terminated); their Ray loses the head but parts
    # of it keep running. clusters/README.md says to run `ray stop` on each.
    print(f"[loopback] worker processes left by ray down: {len(_ray_processes(pidns['worker']))}")
    _run(["ssh", "-i", loopback_nodes["key"], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
          "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
          "-p", str(loopback_nodes["ssh_port"]), f"root@{WORKER_IP}", "~/rlplat-venv/bin/ray stop"],
         timeout=60, env=env)
    assert not _wait_gone(pidns["worker"], 20), (
        f"Ray left on the worker after ray stop: {_ray_processes(pidns['worker'])}")
    print(f"[loopback] cluster gone after {time.monotonic() - started:.0f} s")


def _remove_client_files(cluster_name):
    """What `ray up`/`ray down` leave in /tmp for this cluster: state, lock, config cache."""
    for suffix in (".state", ".lock"):
        path = os.path.join("/tmp", "ray", f"cluster-{cluster_name}{suffix}")
        if os.path.exists(path):
            os.remove(path)
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "ray-config-*")):
        try:
            with open(path) as f:
                mine = cluster_name in f.read()
            if mine:
                os.remove(path)
        except OSError:
            continue


def _wait_gone(pidns, timeout_s):
    """The Ray processes of `pidns` still there after up to `timeout_s` seconds ([] once gone)."""
    deadline = time.monotonic() + timeout_s
    while (left := _ray_processes(pidns)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
