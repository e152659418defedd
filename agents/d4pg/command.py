"""``rlplat train d4pg``: D4PG on a control-suite task, actors on Ray, replicated learner.

With nothing but ``--env`` it starts a local Ray instance sized for this
machine and an embedded Reverb server; ``--address`` joins a cluster instead.

Before Ray starts, besides the shared checks (``rl_run``): the replay rate
limiter must not stall (``check_rate_limiter``) and the environment must have
continuous actions.
"""

from __future__ import annotations

import argparse
import re

from rlplat_agents.d4pg.config import D4PGConfig  # light: no TensorFlow
from rlplat.launch import common
from rlplat.launch import rl_run

NAME = "d4pg"
HELP = "D4PG (distributional DPG) on a control-suite task with N Ray actors"
AGENT = "d4pg"
CONFIG_CLASS = D4PGConfig
CONFIG_NESTED = True  # config.json: {"agent": {...}, "layout": {...}, ...}
BUILDER_NAME = "D4PGBuilder"
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
# Config fields that decide the checkpoint's variables: `--resume` may not change them.
SHAPE_FIELDS = ("policy_layer_sizes", "critic_layer_sizes")
# Fields the replay table and its rate limiter are built from: a restored
# replay checkpoint keeps its own, so `--resume --replay-checkpoint` may not change them.
REPLAY_FIELDS = ("samples_per_insert", "min_replay_size", "max_replay_size", "global_batch_size")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    rl_run.add_run_flags(parser, AGENT, DEFAULT_ENV, "control-suite task DOMAIN:TASK")
    common.add_config_flags(parser, D4PGConfig, CONFIG_FLAGS)


def check_rate_limiter(config: D4PGConfig, num_actors: int) -> None:
    """Refuses replay settings that would stall one side of the replay table.

    First the rules the builder applies when it makes the table
    (``rlplat.replay_rules.validate_rate_limiter``: at least one batch before
    sampling starts, a table that can hold that many, ...), then a bound on
    the samples-per-insert ratio.

    The rate limiter holds sampled / inserted at ``samples_per_insert``, so a
    learner step (one global batch) waits for ``batch / spi`` new transitions
    and an inserted transition waits for ``spi / batch`` learner steps. Either
    wait may be at most one warm-up (``min_replay_size``): beyond that the
    run crawls and then times out (e.g. spi 0.001 at batch 256: 256,000 env
    steps per learner step).
    """
    from rlplat import replay_rules  # pylint: disable=g-import-not-at-top  (plain Python)

    try:
        replay_rules.validate_rate_limiter(config.samples_per_insert, config.min_replay_size,
                                           config.global_batch_size, num_actors,
                                           max_replay_size=config.max_replay_size)
    except ValueError as e:  # names config fields: show them as the flags to change
        raise common.UsageError(re.sub(r"\b(samples_per_insert|min_replay_size|max_replay_size|"
                                       r"global_batch_size)\b",
                                       lambda m: common.flag_name(m.group(1)), str(e))) from None
    spi, batch, warmup = config.samples_per_insert, config.global_batch_size, config.min_replay_size
    if batch / spi > warmup:
        raise common.UsageError(
            f"--samples-per-insert {spi:g} would stall the learner: each learner step "
            f"(--global-batch-size {batch}) waits for {batch / spi:,.0f} new transitions, more than "
            f"the whole warm-up (--min-replay-size {warmup}); use --samples-per-insert "
            f">= {batch / warmup:g} (e.g. 32), or raise --min-replay-size")
    if spi / batch > warmup:
        raise common.UsageError(
            f"--samples-per-insert {spi:g} would stall the actors: each transition they insert "
            f"waits for {spi / batch:,.0f} learner steps (--global-batch-size {batch}), more than "
            f"--min-replay-size {warmup}; use --samples-per-insert <= {batch * warmup:g} (e.g. 32)")


def run(args: argparse.Namespace) -> int:
    """Parsed flags -> ``run_on_ray`` -> exit code (0 done, 1 run failed, 2 usage, 130/143 signal)."""
    logdir, make_builder = prepare(args)
    return rl_run.run_agent(args, logdir, make_builder)


def prepare(args: argparse.Namespace):
    """Every check of the flags (no Ray); returns ``(logdir, make_builder)``."""
    logdir = rl_run.check_run_args(args, AGENT)
    config = common.config_from_args(D4PGConfig, args, CONFIG_FLAGS)
    rl_run.check_config(args, logdir, AGENT, config, SHAPE_FIELDS, REPLAY_FIELDS)
    check_rate_limiter(config, args.num_actors)
    rl_run.check_env(args.env, AGENT, continuous_actions=True)

    def make_builder():
        from rlplat_agents.d4pg.builder import D4PGBuilder  # pylint: disable=g-import-not-at-top

        return D4PGBuilder(config=config)

    return logdir, make_builder
