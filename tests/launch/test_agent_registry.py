"""Agents are found through the ``rlplat.agents`` entry points: a new one edits nothing in ``rlplat/``."""

import textwrap

from cli_testlib import run_rlplat_as_user
from rlplat.launch import agent_registry

TOY_COMMAND = '''
"""A toy agent living outside the repository."""
import dataclasses

NAME = "toy"
HELP = "a toy agent registered by entry point"


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    steps: int = 3


CONFIG_CLASS = ToyConfig


def add_arguments(parser):
    parser.add_argument("--steps", type=int, default=3)


def run(args):
    print(f"toy trained for {args.steps} steps")
    return 0
'''


def _install_toy_agent(site):
    """A distribution with one entry point, as pip would lay it out (no code in rlplat/)."""
    (site / "toy_agent_command.py").write_text(TOY_COMMAND)
    info = site / "toy_agent-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-agent\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [rlplat.agents]
        toy = toy_agent_command
        """))


def test_the_repository_agents_are_registered():
    modules = agent_registry.agent_modules()
    # Installed metadata: after adding an agent to pyproject.toml, run `pip install -e .` again.
    assert modules == {"d4pg": "rlplat_agents.d4pg.command", "ddpg": "rlplat_agents.ddpg.command",
                       "gan": "rlplat_agents.gan.command", "impala": "rlplat_agents.impala.command",
                       "supervised": "rlplat_agents.supervised.command"}
    assert agent_registry.builder_agents() == {"D4PGBuilder": "d4pg", "DDPGBuilder": "ddpg",
                                               "IMPALABuilder": "impala"}
    assert sorted(agent_registry.ray_commands()) == ["d4pg", "ddpg", "impala"]
    for name, (config_class, nested) in agent_registry.config_classes().items():
        assert config_class.__name__.lower().startswith(name[:3]) and nested == (name in ("d4pg", "ddpg", "impala"))


def test_an_agent_installed_elsewhere_appears_in_rlplat_train_and_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_toy_agent(site)
    listed, _ = run_rlplat_as_user("train", "--help", cwd=tmp_path, extra_path=str(site))
    assert listed.returncode == 0, listed.stderr
    assert "toy" in listed.stdout and "a toy agent registered by entry point" in listed.stdout
    ran, _ = run_rlplat_as_user("train", "toy", "--steps", "5", cwd=tmp_path, extra_path=str(site))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith("toy trained for 5 steps")
    # Without a prepare(), it is not offered to `rlplat sweep` (which runs Ray agents).
    swept, _ = run_rlplat_as_user("sweep", "--help", cwd=tmp_path, extra_path=str(site))
    assert swept.returncode == 0 and "toy" not in swept.stdout
