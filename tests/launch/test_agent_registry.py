"""Agents are found through the rlplat.agents entry points, each an AgentSpec: a new one edits nothing in rlplat/."""

import os
import textwrap
import tomllib

import pytest

from cli_testlib import run_rlplat_as_user
from rlplat import agent_spec
from rlplat.agent_spec import AgentSpec

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENTS = os.path.join(REPO, "agents")

TOY_SPEC = '''
"""A toy agent living outside the repository, trained in the rlplat process."""
import dataclasses

from rlplat.agent_spec import AgentSpec
from rlplat.config_fields import field


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    steps: int = field(3, "steps to train")

    def to_dict(self):
        return dataclasses.asdict(self)


def train(config, num_replicas, logdir, resume=False, progress=None, debug_eager=False):
    return {"steps": config.steps}


SPEC = AgentSpec(name="toy", help="a toy agent registered by entry point", config_class=ToyConfig,
                 train="toy_agent_spec", describe=lambda summary: f"toy trained for {summary['steps']} steps")
'''


def _install_toy_agent(site):
    """A distribution with one entry point, as pip would lay it out (no code in rlplat/)."""
    (site / "toy_agent_spec.py").write_text(TOY_SPEC)
    info = site / "toy_agent-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-agent\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [rlplat.agents]
        toy = toy_agent_spec:SPEC
        """))


def _agent_folders():
    """Folders under agents/ that declare a spec: the agents, found on disk, not listed here."""
    return sorted(name for name in os.listdir(AGENTS) if os.path.exists(os.path.join(AGENTS, name, "spec.py")))


def test_every_agent_folder_with_a_spec_is_registered_and_installed():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        declared = tomllib.load(f)["project"]["entry-points"]["rlplat.agents"]
    folders = _agent_folders()
    assert len(folders) >= 5  # d4pg, ddpg, impala, supervised, gan at least
    assert declared == {name: f"rlplat_agents.{name}.spec:SPEC" for name in folders}
    # Installed metadata: after adding an agent to pyproject.toml, run `pip install -e .` again.
    specs = agent_spec.specs()
    assert sorted(specs) == folders
    for name, spec in specs.items():
        assert spec.name == name and isinstance(spec, AgentSpec)
        if spec.on_ray:
            builder = spec.builder_class()
            assert builder.__name__ == spec.builder_class_name
            assert agent_spec.agent_of_builder(spec.make_builder(spec.config_class())) == name
            assert agent_spec.agent_of_record({"builder": builder.__name__}) == name
        else:
            assert callable(spec.train_module().train)


def test_agents_import_nothing_from_the_launch_layer():
    for folder in _agent_folders():
        for root, _, files in os.walk(os.path.join(AGENTS, folder)):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(root, name), encoding="utf-8") as f:
                        assert "rlplat.launch" not in f.read(), os.path.join(root, name)


def test_a_run_record_names_its_agent_exactly():
    assert agent_spec.agent_of_record({"agent": "impala", "builder": "D4PGBuilder"}) == "impala"
    assert agent_spec.agent_of_record({"builder": "NoSuchBuilder"}) is None
    assert agent_spec.agent_of_record({}) is None


@pytest.mark.parametrize("kwargs, problem", [
    (dict(builder="", train=""), "exactly one of builder"),
    (dict(builder="a.b:C", train="a.t"), "exactly one of builder"),
    (dict(builder="a.b.C"), "'module:Class'"),
    (dict(builder="a.b:C", shape_fields=("no_such_field",)), "no_such_field"),
])
def test_a_bad_spec_is_refused_where_it_is_declared(kwargs, problem):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Config:
        width: int = 3

    with pytest.raises(ValueError, match=problem):
        AgentSpec(name="bad", help="", config_class=Config, **kwargs)


@pytest.mark.multiprocess
def test_an_agent_installed_elsewhere_appears_in_rlplat_train_and_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_toy_agent(site)
    listed, _ = run_rlplat_as_user("train", "--help", cwd=tmp_path, extra_path=str(site))
    assert listed.returncode == 0, listed.stderr
    assert "toy" in listed.stdout and "a toy agent registered by entry point" in listed.stdout
    ran, _ = run_rlplat_as_user("train", "toy", "--steps", "5", "--logdir", str(tmp_path / "run"),
                                cwd=tmp_path, extra_path=str(site), timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith("toy trained for 5 steps")
    # Trained in process, it is not offered to `rlplat sweep` (which runs Ray agents).
    swept, _ = run_rlplat_as_user("sweep", "--help", cwd=tmp_path, extra_path=str(site))
    assert swept.returncode == 0 and "toy" not in swept.stdout
