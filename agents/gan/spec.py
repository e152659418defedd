"""The GAN's declaration: ``rlplat train gan`` trains it in the rlplat process on N replicas."""

from typing import Any, Dict

from rlplat_agents.gan.config import GANConfig  # light: no TensorFlow
from rlplat.agent_spec import AgentSpec


def describe(summary: Dict[str, Any]) -> str:
    """The run's last line: the MMD to held-out digits before and after."""
    before = "" if summary["initial_mmd"] is None else format(summary["initial_mmd"], ".4f") + " -> "
    return (f"done: step {summary['step']}, MMD to held-out digits {before}{summary['mmd']:.4f}, "
            f"{summary['seconds']:.1f} s; sample grids: tensorboard --logdir {summary['logdir']}/tb")


SPEC = AgentSpec(
    name="gan",
    help="train a spectral-norm GAN on the digits on N replicas (sample grids in TensorBoard)",
    config_class=GANConfig,
    train="rlplat_agents.gan.train",
    shape_fields=("noise_dim", "generator_sizes", "discriminator_sizes", "spectral_norm"),
    describe=describe,
)
