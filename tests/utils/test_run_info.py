"""run_info: config, versions, git SHA; a resumed run keeps the earlier record."""

import json

from rlplat.utils import run_info


def test_writes_config_versions_and_sha(tmp_path):
    record = run_info.write_run_info(str(tmp_path), {"lr": 0.1, "sizes": (1, 2)}, extra={"num_replicas": 2})
    assert json.loads((tmp_path / "config.json").read_text()) == {"lr": 0.1, "sizes": [1, 2]}
    on_disk = json.loads((tmp_path / "run_info.json").read_text())
    assert set(run_info.PACKAGES) <= set(on_disk["versions"])
    assert on_disk["versions"]["tensorflow"].startswith("2.15")
    assert isinstance(on_disk["git_sha"], str) and on_disk["git_sha"]
    assert on_disk["num_replicas"] == 2 and record["config"]["lr"] == 0.1

    run_info.write_run_info(str(tmp_path), {"lr": 0.2})
    again = json.loads((tmp_path / "run_info.json").read_text())
    assert again["config"] == {"lr": 0.2}
    assert [p["config"]["lr"] for p in again["previous"]] == [0.1]


def test_git_sha_outside_a_repository_is_unknown(tmp_path):
    assert run_info.git_sha(str(tmp_path)) == "unknown"
