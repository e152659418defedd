"""The digits classifier's declaration: ``rlplat train supervised`` trains it in the rlplat process."""

from typing import Any, Dict

from rlplat_agents.supervised.config import SupervisedConfig  # light: no TensorFlow
from rlplat.agent_spec import AgentSpec


def describe(summary: Dict[str, Any]) -> str:
    """The run's last line: held-out accuracy and time."""
    return (f"done: step {summary['step']}, held-out accuracy {summary['held_out_accuracy']:.4f}, "
            f"{summary['seconds']:.1f} s; logs in {summary['logdir']}")


SPEC = AgentSpec(
    name="supervised",
    help="train the digits classifier (scikit-learn digits, sync batch norm) on N replicas",
    config_class=SupervisedConfig,
    train="rlplat_agents.supervised.train",
    shape_fields=("hidden_sizes",),
    describe=describe,
)
