"""Two OS processes under MultiWorkerMirroredStrategy on loopback == one process."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

WORKER = os.path.join(os.path.dirname(__file__), "mwms_worker.py")
TIMEOUT_S = 180


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tf_config=None):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    # gRPC honours proxy variables even for loopback; the collectives must not.
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy"):
        env.pop(key, None)
    env["TF_NUM_INTRAOP_THREADS"] = "1"
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


@pytest.mark.multiprocess
def test_two_workers_match_one_process(tmp_path):
    ref_path = tmp_path / "single.npz"
    subprocess.run([sys.executable, WORKER, str(ref_path)], env=_env(), check=True, timeout=TIMEOUT_S)

    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        out = tmp_path / f"worker{index}.npz"
        procs.append((subprocess.Popen([sys.executable, WORKER, str(out)], env=_env(tf_config),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT), out))
    try:
        for proc, _ in procs:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
            assert proc.returncode == 0, output.decode()[-3000:]
    finally:
        for proc, _ in procs:
            proc.kill()

    ref = np.load(ref_path)
    results = [np.load(out) for _, out in procs]
    assert [int(r["num_replicas"]) for r in results] == [2, 2]
    assert [bool(r["is_chief"]) for r in results] == [True, False]
    weight_keys = [k for k in ref.files if k.startswith("w")]
    # Training moved the weights, so equality below is not equality of initial values.
    assert max(np.abs(ref[k] - ref["init" + k[1:]]).max() for k in weight_keys) > 1e-2
    for key in weight_keys:
        # Both workers hold identical weights, equal to the one-process run.
        np.testing.assert_array_equal(results[0][key], results[1][key])
        np.testing.assert_allclose(results[0][key], ref[key], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[0]["losses"], ref["losses"], rtol=1e-5, atol=1e-5)
