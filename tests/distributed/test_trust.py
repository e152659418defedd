"""Trust on shared hosts: what `--address auto` believes, and a token probe that fails closed."""

import os

import pytest

from rlplat.distributed import cluster
from rlplat.distributed import ray_auth


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
