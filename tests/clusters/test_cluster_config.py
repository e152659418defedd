"""clusters/*.yaml pass Ray's offline validation and rlplat's rules; broken variants fail in one line."""

import copy
import glob
import os

import pytest
import yaml

from rlplat.clusters import check as cluster_config
from rlplat.clusters import rules as cluster_rules
from rlplat.clusters.check import ClusterConfigError, check_cluster_config, validate_cluster_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER_YAMLS = sorted(glob.glob(os.path.join(REPO, "clusters", "*.yaml")))


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
    """A HOME of the test's own: the check reads the token file a YAML ships from ~, and the
    machine's may be anything (tests/clusters/test_ray_up_loopback.py writes one, 0644)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


def _load(name):
    with open(os.path.join(REPO, "clusters", name)) as f:
        return yaml.safe_load(f)


def _ray_validate(config):
    """Ray's own offline validation, as `ray up` begins it."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    with cluster_config._quiet_ray():  # pylint: disable=protected-access
        validate_config(prepare_config(copy.deepcopy(config)))


def _write(tmp_path, config, name="cluster.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def test_the_three_configs_are_there():
    assert [os.path.basename(p) for p in CLUSTER_YAMLS] == ["aws.yaml", "gcp.yaml", "local.yaml"]


@pytest.mark.parametrize("path", CLUSTER_YAMLS, ids=os.path.basename)
def test_shipped_configs_pass_ray_and_rlplat(path):
    with open(path) as f:
        _ray_validate(yaml.safe_load(f))
    assert check_cluster_config(path) == []
    prepared = validate_cluster_config(path)
    assert prepared["cluster_name"].startswith("rlplat")


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_cloud_configs_have_the_layout_of_the_issue(name):
    config = _load(name)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"]["learner"] == 1 and head["max_workers"] == 0
    actor = types["actor"]
    assert actor["resources"]["actor"] == 16
    assert 0 < actor["min_workers"] <= actor["max_workers"] <= config["max_workers"]
    if name == "aws.yaml":
        assert head["node_config"]["InstanceType"].startswith(("g5.", "p3."))
        assert actor["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot"
        rules = config["provider"]["security_group"]["IpPermissions"]
        assert [(r["FromPort"], r["IpRanges"][0]["CidrIp"]) for r in rules] == [(22, "203.0.113.0/24")]
    else:
        assert head["node_config"]["guestAccelerators"][0]["acceleratorCount"] == 1
        assert actor["node_config"]["scheduling"]["provisioningModel"] == "SPOT"
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


def test_local_config_sets_resources_by_node():
    config = _load("local.yaml")
    assert "available_node_types" not in config  # the local provider refuses them
    assert "learner" in config["head_start_ray_commands"][-1]
    assert "actor" in config["worker_start_ray_commands"][-1]
    assert "ssh_port" not in config["auth"]


# Each case: (base file, mutation, text expected in the first problem, does Ray alone accept it?)
def _actor(config):
    return config["available_node_types"]["actor"]


def _min_workers_negative(c):
    _actor(c)["min_workers"] = -1


def _min_above_max(c):
    _actor(c)["min_workers"] = 9


def _misspelled_region(c):
    c["provider"]["regoin"] = c["provider"].pop("region")


def _redis_port_open_to_world(c):
    c["provider"]["security_group"]["IpPermissions"].append(
        {"IpProtocol": "tcp", "FromPort": 6379, "ToPort": 6379, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]})


def _auth_disabled(c):
    c["head_start_ray_commands"][-1] = c["head_start_ray_commands"][-1].replace(
        "RAY_AUTH_MODE=token", "RAY_AUTH_MODE=disabled")


def _token_not_shipped(c):
    del c["file_mounts"]["~/.ray/auth_token"]


def _install_without_pins(c):
    c["setup_commands"] = [cmd.replace("-c constraints.txt ", "") for cmd in c["setup_commands"]]


def _no_learner_resource(c):
    c["available_node_types"]["learner"]["resources"] = {}


def _ssh_port(c):
    c["auth"]["ssh_port"] = 2222


def _head_ip_missing(c):
    del c["provider"]["head_ip"]


def _gcp_default_network(c):
    del _actor(c)["node_config"]["networkInterfaces"]


BROKEN = [
    ("aws.yaml", _min_workers_negative, "`available_node_types.actor.min_workers` is -1", True),
    ("aws.yaml", _min_above_max, "min_workers` (9) is larger than", False),
    ("aws.yaml", _misspelled_region, "did you mean `region`?", True),
    ("aws.yaml", _redis_port_open_to_world, "opens tcp 6379 to 0.0.0.0/0", True),
    ("aws.yaml", _auth_disabled, "RAY_AUTH_MODE=disabled", True),
    ("aws.yaml", _token_not_shipped, "auth token is not shipped", True),
    ("aws.yaml", _install_without_pins, "-c constraints.txt", True),
    ("aws.yaml", _no_learner_resource, "`learner` custom resource", True),
    ("gcp.yaml", _gcp_default_network, "has no networkInterfaces", True),
    ("local.yaml", _ssh_port, "Ray's schema rejects `auth`", False),
    ("local.yaml", _head_ip_missing, "head_ip", False),
]


@pytest.mark.parametrize("base, mutate, expected, ray_accepts", BROKEN,
                         ids=[case[1].__name__.strip("_") for case in BROKEN])
def test_broken_variant_gives_one_line(tmp_path, base, mutate, expected, ray_accepts):
    config = _load(base)
    mutate(config)
    if ray_accepts:  # the point of rlplat's own rules: Ray lets these through
        _ray_validate(config)
    path = _write(tmp_path, config)
    problems = check_cluster_config(path)
    assert problems, "expected a problem"
    assert expected in problems[0], problems
    assert all("\n" not in p and len(p) < 400 for p in problems), problems
    with pytest.raises(ClusterConfigError) as raised:
        validate_cluster_config(path)
    assert isinstance(raised.value, ValueError) and expected in str(raised.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("cluster_name: rlplat\nprovider:\n  type: aws\n  region: [us-west-2\nauth: {}\n")
    (problem,) = check_cluster_config(str(path))
    assert problem.startswith("YAML syntax error at line 5") and "\n" not in problem


def test_duplicate_key_is_an_error(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("cluster_name: a\nprovider:\n  type: aws\n  region: us-west-2\n  region: us-east-1\n")
    (problem,) = check_cluster_config(str(path))
    assert problem.startswith("YAML error at line 5") and "`region` appears twice" in problem


def test_missing_file_and_non_mapping(tmp_path):
    assert check_cluster_config(str(tmp_path / "nope.yaml")) == [
        "no such file; pass the path of a cluster YAML such as clusters/aws.yaml"]
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert "not a mapping" in check_cluster_config(str(listing))[0]


def test_pip_parsing():
    installs = cluster_rules._pip_installs(  # pylint: disable=protected-access
        "cd ~/src && ~/venv/bin/pip install -q --upgrade pip && python -m pip install "
        "--constraint=constraints.txt -e . ; pip3 install boto3==1.0")
    assert [(p, c) for p, c, _ in installs] == [(["pip"], False), (["."], True), (["boto3==1.0"], False)]


def test_a_token_file_others_can_read_is_flagged_and_a_private_one_is_not(tmp_path):
    token = tmp_path / "auth_token"
    token.write_text("0123456789abcdef" * 4)
    config = _load("aws.yaml")
    config["file_mounts"] = {"~/.ray/auth_token": str(token)}
    path = _write(tmp_path, config)
    os.chmod(token, 0o644)
    problems = check_cluster_config(path)
    assert any("can be read by other users (mode 0644)" in p and f"chmod 600 {token}" in p
               for p in problems), problems
    os.chmod(token, 0o600)
    assert check_cluster_config(path) == []
