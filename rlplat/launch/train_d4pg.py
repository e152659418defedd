"""``rlplat train d4pg``: D4PG on a control-suite task, actors on Ray, replicated learner.

With nothing but ``--env`` it starts a local Ray instance sized for this
machine and an embedded Reverb server; ``--address`` joins a cluster instead.
"""

from __future__ import annotations

import argparse

from agents.d4pg.config import D4PGConfig  # light: no TensorFlow
from rlplat.launch import common
from rlplat.launch import rl_run

NAME = "d4pg"
HELP = "D4PG (distributional DPG) on a control-suite task with N Ray actors"
AGENT = "d4pg"
DEFAULT_ENV = "cartpole:swingup"
CONFIG_FLAGS = {
    "n_step": "n-step return length",
    "discount": "per-step discount gamma",
    "sigma": "std of the Gaussian exploration noise (actions in [-1, 1])",
    "global_batch_size": "learner batch over all replicas",
    "samples_per_insert": "replay sampled-to-inserted ratio the rate limiter holds",
    "min_replay_size": "transitions in replay before learning starts",
    "max_replay_size": "replay capacity",
    "policy_learning_rate": "Adam learning rate of the policy",
    "critic_learning_rate": "Adam learning rate of the critic",
    "target_update_period": "learner steps between target-network copies",
    "policy_layer_sizes": "policy MLP widths, comma-separated",
    "critic_layer_sizes": "critic MLP widths, comma-separated",
    "clipping": "clip policy and critic gradients by global norm --max-gradient-norm",
    "max_gradient_norm": "global-norm threshold of the gradient clipping",
    "dqda_clip_norm": "clip each example's dQ/da to this norm in the policy update (0: off)",
    "torso_init": "torso weight init: fan_out (reference) or fan_in",
    "variable_update_period": "actor steps between weight pulls",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    rl_run.add_run_flags(parser, AGENT, DEFAULT_ENV, "control-suite task DOMAIN:TASK")
    common.add_config_flags(parser, D4PGConfig, CONFIG_FLAGS)


def run(args: argparse.Namespace) -> int:
    """Parsed flags -> ``run_on_ray`` -> exit code (0 done, 1 run failed, 2 usage, 130/143 signal)."""
    logdir = rl_run.check_run_args(args, AGENT)
    config = common.config_from_args(D4PGConfig, args, CONFIG_FLAGS)

    def make_builder():
        from agents.d4pg.builder import D4PGBuilder  # pylint: disable=g-import-not-at-top

        return D4PGBuilder(config=config)

    return rl_run.run_agent(args, logdir, make_builder)
