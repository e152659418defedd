"""``rlplat train ddpg``: DDPG on a continuous-control task, actors on Ray (``rlplat.launch.rl_run``)."""

import argparse
import functools

from rlplat_agents.ddpg.config import DDPGConfig  # light: no TensorFlow
from rlplat import config_fields
from rlplat.launch import common
from rlplat.launch import rl_run

NAME = AGENT = "ddpg"
HELP = "DDPG (deterministic policy gradient, scalar critic) on a control-suite task with N Ray actors"
CONFIG_CLASS = DDPGConfig
CONFIG_NESTED = True  # config.json: {"agent": {...}, "layout": {...}, ...}
BUILDER_NAME = "DDPGBuilder"
CONFIG_FLAGS = config_fields.flag_helps(DDPGConfig)  # every field, with the help text it is declared with
SHAPE_FIELDS = ("policy_layer_sizes", "critic_layer_sizes")  # `--resume` may not change them
REPLAY_FIELDS = ("samples_per_insert", "min_replay_size", "max_replay_size", "global_batch_size")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    rl_run.add_run_flags(parser, AGENT, "cartpole:swingup", "control-suite task DOMAIN:TASK")
    common.add_config_flags(parser, DDPGConfig, CONFIG_FLAGS)


def run(args: argparse.Namespace) -> int:
    """Parsed flags -> ``run_on_ray`` -> exit code (0 done, 1 run failed, 2 usage, 130/143 signal)."""
    return rl_run.run_agent(args, *prepare(args))


def prepare(args: argparse.Namespace):
    """Every check of the flags, before Ray (the config bounds the replay ratio); ``(logdir, make_builder)``."""
    logdir = rl_run.check_run_args(args, AGENT)
    config = common.config_from_args(DDPGConfig, args, CONFIG_FLAGS)
    rl_run.check_config(args, logdir, AGENT, config, SHAPE_FIELDS, REPLAY_FIELDS)
    rl_run.check_env(args.env, AGENT, continuous_actions=True)
    from rlplat_agents.ddpg.builder import DDPGBuilder  # pylint: disable=g-import-not-at-top

    return logdir, functools.partial(DDPGBuilder, config=config)
