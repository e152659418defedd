"""Trust on shared hosts: what `--address auto` believes, a token probe that fails closed,
a private Ray temp folder, and warnings when other users share the host."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from rlplat.distributed import cluster
from rlplat.distributed import ray_auth
from rlplat.distributed import shared_host


@pytest.fixture
def ray_tmp(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    folder = tmp_path / "ray"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / "ray_current_cluster").write_text("127.0.0.1:6379\n")
    return folder


def test_auto_reads_the_users_own_bootstrap_file(ray_tmp):
    assert cluster._resolve_auto(str(ray_tmp)) == "127.0.0.1:6379"  # pylint: disable=protected-access


def test_auto_takes_ray_address_first(ray_tmp, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    assert cluster._resolve_auto(str(ray_tmp)) == "10.1.2.3:6379"  # pylint: disable=protected-access


def test_auto_refuses_a_folder_others_can_write(ray_tmp):
    os.chmod(ray_tmp, 0o1777)  # like /tmp: anyone could have put the file there
    with pytest.raises(cluster.ClusterConnectionError, match="other users can write"):
        cluster._resolve_auto(str(ray_tmp))  # pylint: disable=protected-access


def test_auto_refuses_a_file_of_another_user(ray_tmp):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(ray_tmp / "ray_current_cluster", 12345, 12345)
    with pytest.raises(cluster.ClusterConnectionError, match="belongs to user id 12345"):
        cluster._resolve_auto(str(ray_tmp))  # pylint: disable=protected-access


def test_auto_without_a_cluster_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(cluster.ClusterConnectionError, match="found no running Ray cluster"):
        cluster._resolve_auto(str(tmp_path))  # pylint: disable=protected-access


def test_the_token_probe_fails_closed(monkeypatch):
    # A port that answers but gives no verdict (not a GCS, TLS, a fake): refused before Ray connects.
    monkeypatch.setattr(ray_auth, "requires_token", lambda host, port, timeout_s: None)
    monkeypatch.setattr(cluster, "_wait_reachable", lambda host, port, timeout_s, shown: None)
    monkeypatch.setattr(cluster.ray, "init", lambda **kwargs: pytest.fail("ray.init must not be reached"))
    with pytest.raises(cluster.ClusterConnectionError, match="did not show that it requires token"):
        cluster._join("127.0.0.1:1", 5.0, False, 0, allow_unauthenticated=False)  # pylint: disable=protected-access


# ------------------------------------------------------------- shared hosts
def _as_root():
    if os.geteuid() != 0:
        pytest.skip("acting as another user needs root")


def test_the_private_temp_folder_is_made_0700_and_kept_so(tmp_path):
    folder = shared_host.private_temp_dir(str(tmp_path))
    assert folder == str(tmp_path / f"rlplat-ray-{os.geteuid()}")
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    os.chmod(folder, 0o755)  # loosened by hand: made private again
    assert shared_host.private_temp_dir(str(tmp_path)) == folder
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700


def test_a_planted_link_or_foreign_folder_is_refused(tmp_path):
    planted = tmp_path / f"rlplat-ray-{os.geteuid()}"
    (tmp_path / "elsewhere").mkdir()
    planted.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(shared_host.SharedHostError, match="is not a folder"):
        shared_host.private_temp_dir(str(tmp_path))
    planted.unlink()
    _as_root()
    planted.mkdir(mode=0o700)
    os.chown(planted, 12345, 12345)
    with pytest.raises(shared_host.SharedHostError, match="belongs to user id 12345"):
        shared_host.private_temp_dir(str(tmp_path))


@pytest.mark.multiprocess
def test_a_local_instance_keeps_its_session_in_the_private_folder():
    base = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths are limited
    try:
        os.chmod(base, 0o1777)  # shared, like /tmp
        code = ("from rlplat.distributed import cluster; c = cluster.connect(num_cpus=1); "
                "print(c.session_dir); cluster.disconnect(c)")
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "RAY_TMPDIR": base},
                             capture_output=True, text=True, timeout=120, check=True)
        session_dir = out.stdout.strip().splitlines()[-1]
        private = os.path.join(base, f"rlplat-ray-{os.geteuid()}")
        assert session_dir.startswith(private + os.sep), (session_dir, private)
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
        assert not os.path.exists(os.path.join(base, "session_latest"))  # nothing outside it
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_other_users_processes_are_seen_and_warned_about():
    _as_root()
    assert 12346 not in shared_host.other_users()
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setuid(12346))
    try:
        assert 12346 in shared_host.other_users()
        warning = shared_host.exposure_warning("the debugger")
        assert warning.startswith("warning: the debugger can be reached by any user of this host")
        assert "12346" in warning and "\n" not in warning
    finally:
        sleeper.kill()
        sleeper.wait()
    assert 12346 not in shared_host.other_users()
