"""``rlplat train impala``: IMPALA (V-trace actor-critic), actors on Ray, replicated learner.

Same flags and outputs as ``rlplat train d4pg``: ``--num-actors``,
``--num-learner-replicas``, ``--address``, ``--max-actor-steps``, ``--logdir``
(TensorBoard, metrics.jsonl, checkpoints, run_info.json), ``--resume`` and the
live console line. Default environment: gym:CartPole-v1.
"""

from __future__ import annotations

import argparse

from rlplat_agents.impala.config import IMPALAConfig  # light: no TensorFlow
from rlplat.launch import common
from rlplat.launch import rl_run

NAME = "impala"
HELP = "IMPALA (V-trace actor-critic) with N Ray actors; discrete or continuous actions"
AGENT = "impala"
DEFAULT_ENV = "gym:CartPole-v1"
CONFIG_CLASS = IMPALAConfig
CONFIG_NESTED = True  # config.json: {"agent": {...}, "layout": {...}, ...}
BUILDER_NAME = "IMPALABuilder"
CONFIG_FLAGS = {
    "unroll_length": "transitions per unroll",
    "global_batch_size": "unrolls per learner step over all replicas",
    "discount": "per-step discount gamma",
    "learning_rate": "Adam learning rate",
    "entropy_cost": "weight of the entropy bonus",
    "baseline_cost": "weight of the value loss",
    "clip_rho_threshold": "V-trace rho-bar",
    "clip_c_threshold": "V-trace c-bar",
    "max_gradient_norm": "clip gradients to this global norm",
    "core": "network core: mlp or lstm",
    "layer_sizes": "MLP torso widths, comma-separated",
    "lstm_size": "LSTM units (with --core lstm)",
    "queue_size": "replay queue capacity in unrolls (actors block when it is full)",
    "variable_update_period": "actor steps between weight pulls",
    "normalize_observations": "normalise observations with the learner's running moments",
    "reward_scale": "multiply rewards by this in the learner's targets",
    "squash": "continuous actions: tanh (squashed Gaussian) or clip",
    "min_log_std": "lower bound of the Gaussian's log-std",
    "max_log_std": "upper bound of the Gaussian's log-std",
    "init_log_std": "the Gaussian's log-std at initialisation",
    "separate_value_network": "give the value head its own MLP torso",
}


# Control-suite rewards lie in [0, 1] per step over 1000 steps: at scale 1 the
# Gaussian policy collapsed on cartpole:balance and :swingup, at 0.1 both
# learned (IMPALAConfig.reward_scale says more). gym: tasks keep the config's 1.
CONTROL_SUITE_REWARD_SCALE = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    rl_run.add_run_flags(parser, AGENT, DEFAULT_ENV, "gym:<id> or DOMAIN:TASK")
    parser.add_argument("--max-policy-lag", type=int, default=None, metavar="STEPS",
                        help="drop unrolls more than this many learner steps behind (counted as "
                             "dropped_unrolls; default: keep all)")
    common.add_config_flags(parser, IMPALAConfig, CONFIG_FLAGS)
    for action in parser._actions:  # pylint: disable=protected-access
        if action.dest == "reward_scale":
            action.help = (f"{CONFIG_FLAGS['reward_scale']} (default: {IMPALAConfig.reward_scale:g} for gym: "
                           f"tasks, {CONTROL_SUITE_REWARD_SCALE:g} for control-suite DOMAIN:TASK tasks)")


def make_config(args: argparse.Namespace) -> IMPALAConfig:
    """The frozen config from the flags; bad values become a one-line UsageError.

    Without ``--reward-scale``, a control-suite task gets
    ``CONTROL_SUITE_REWARD_SCALE``; the run's config.json records the value used.
    """
    config = common.config_from_args(IMPALAConfig, args, CONFIG_FLAGS)
    if args.reward_scale is None and not str(getattr(args, "env", DEFAULT_ENV)).startswith("gym:"):
        config = config.replace(reward_scale=CONTROL_SUITE_REWARD_SCALE)
    if args.max_policy_lag is not None:
        try:
            config = config.replace(max_policy_lag=args.max_policy_lag)
        except ValueError as e:
            raise common.UsageError(str(e)) from None
    return config


# IMPALA keeps no replay worth saving: its learner's input pipeline pulls
# unrolls out of the queue as soon as they are written (a final checkpoint of a
# 1-actor CartPole run found the queue empty), and a resumed run refills the
# queue with fresh on-policy unrolls within its first actor chunk.
REPLAY_CHECKPOINT_REFUSAL = (
    "--replay-checkpoint is for replay-based agents such as d4pg: IMPALA's queue is drained into "
    "the learner as it fills, so there is nothing to restore; drop the flag")


def shape_fields(config: IMPALAConfig) -> tuple:
    """Config fields that decide the checkpoint's variables: `--resume` may not change them."""
    names = ["core", "layer_sizes"] + (["lstm_size"] if config.core == "lstm" else [])
    # Fields that add or remove variables where the config has them.
    names += [n for n in ("normalize_observations", "separate_value_network") if hasattr(config, n)]
    return tuple(names)


def run(args: argparse.Namespace) -> int:
    """Parsed flags -> ``run_on_ray`` -> exit code (0 done, 1 run failed, 2 usage, 130/143 signal)."""
    logdir, make_builder = prepare(args)
    return rl_run.run_agent(args, logdir, make_builder)


def prepare(args: argparse.Namespace):
    """Every check of the flags (no Ray); returns ``(logdir, make_builder)``."""
    if args.replay_checkpoint:
        raise common.UsageError(REPLAY_CHECKPOINT_REFUSAL)
    args.replay_checkpoint = False  # a resume of an older run that recorded it does not restore it

    logdir = rl_run.check_run_args(args, AGENT)
    config = make_config(args)
    if args.envs_per_actor > 1 and config.core == "lstm":
        raise common.UsageError("--envs-per-actor: an LSTM policy acts one environment at a time (each "
                                "keeps its own core state); drop the flag or use --core mlp")
    rl_run.check_config(args, logdir, AGENT, config, shape_fields(config))
    rl_run.check_env(args.env, AGENT)

    def make_builder():
        from rlplat_agents.impala.builder import IMPALABuilder  # pylint: disable=g-import-not-at-top

        return IMPALABuilder(config=config)

    return logdir, make_builder
