"""``rlplat train <agent>``: one sub-command per registered ``AgentSpec``.

Every agent gets the same treatment from its spec: the run flags (Ray agents,
``rl_run``; in-process agents, ``in_process``), one flag per config field,
and, before Ray or TensorFlow start, the flags, the config, the agent's own
``check`` against the run, ``--resume`` against the run directory and the
environment. An agent writes no command-line code of its own.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from rlplat import agent_spec
from rlplat.agent_spec import AgentSpec, RunFacts
from rlplat.launch import common


def add_agent_subcommands(parser: argparse.ArgumentParser, specs: Any, dest: str = "agent") -> None:
    """One sub-parser per spec in ``specs`` (name -> ``AgentSpec``)."""
    subparsers = parser.add_subparsers(title="agents", dest=dest, metavar=dest.upper(), required=True)
    for spec in specs.values():
        sub = subparsers.add_parser(spec.name, help=spec.help, description=spec.help)
        add_arguments(sub, spec)
        sub.set_defaults(run=functools.partial(run, spec))


def add_arguments(parser: argparse.ArgumentParser, spec: AgentSpec) -> None:
    """The run flags of the agent's kind of run, then one flag per config field."""
    if spec.on_ray:
        from rlplat.launch import rl_run  # pylint: disable=g-import-not-at-top

        rl_run.add_run_flags(parser, spec.name, spec.default_env, spec.env_help)
        common.add_config_flags(parser, spec.config_class, spec.flag_helps())
    else:
        from rlplat.launch import in_process  # pylint: disable=g-import-not-at-top

        in_process.add_arguments(parser, spec.name, spec.config_class, spec.flag_helps())


def run(spec: AgentSpec, args: argparse.Namespace) -> int:
    """Parsed flags -> the run -> exit code (0 done, 1 run failed, 2 usage, 130/143 signal)."""
    if not spec.on_ray:
        from rlplat.launch import in_process  # pylint: disable=g-import-not-at-top

        return in_process.run_in_process(args, spec, config_from_args(spec, args))
    from rlplat.launch import rl_run  # pylint: disable=g-import-not-at-top

    return rl_run.run_agent(args, prepare(spec, args))


def prepare(spec: AgentSpec, args: argparse.Namespace) -> Any:
    """Every check of a Ray agent's flags, before Ray; returns the ``rl_run.PreparedRun``.

    Cheap checks first, the run directory next, the environment (dm_control,
    ~2 s) last.
    """
    from rlplat.launch import rl_run  # pylint: disable=g-import-not-at-top

    if not spec.replay_checkpoint:
        if args.replay_checkpoint:
            raise common.UsageError(spec.replay_checkpoint_refusal)
        args.replay_checkpoint = False  # a resume of an older run that recorded it does not restore it
    logdir = rl_run.check_run_args(args, spec.name)
    config = config_from_args(spec, args)
    prepared = rl_run.describe_run(args, logdir, spec.make_builder(config))
    rl_run.check_run_dir(args, logdir, spec.name, config, spec.shapes(config), spec.replay_fields)
    rl_run.check_env(args.env, spec.name, continuous_actions=spec.continuous_actions)
    return prepared


def config_from_args(spec: AgentSpec, args: argparse.Namespace) -> Any:
    """The agent's config from its flags, after its ``check`` against the run; errors name flags."""
    names = spec.flag_helps()
    config = common.config_from_args(spec.config_class, args, names)
    facts = RunFacts(env=getattr(args, "env", ""), num_actors=getattr(args, "num_actors", 1),
                     envs_per_actor=getattr(args, "envs_per_actor", 1),
                     given=frozenset(n for n in names if getattr(args, n, None) is not None))
    try:
        return spec.checked(config, facts)
    except ValueError as e:
        raise common.UsageError(common.as_flags(str(e), names.keys() | {"envs_per_actor", "num_actors"})) from None


def agents() -> Any:
    """The registered specs; a broken or empty registry is a one-line usage error."""
    try:
        return agent_spec.specs()
    except agent_spec.NoAgentsError as e:
        raise common.UsageError(str(e)) from None
