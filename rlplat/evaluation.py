"""Watch a trained policy: a run's checkpointed weights in its greedy actor, for whole episodes.

What ``rlplat eval`` is made of, usable on its own:

* ``read_run(logdir)``: what a training run recorded (``config.json``,
  ``run_info.json``'s builder) and which checkpoints it kept, from the file
  system only, so bad input is refused before TensorFlow loads.
* ``make_builder(run)``: the agent's builder from its recorded config. The
  builder class is the one ``run_info.json`` names, found in
  ``agents.<agent>.builder``; its config class is the type of the builder's
  ``config`` default, so no agent is named here.
* ``restore_policy(builder, environment_spec, prefix)``: the builder's acting
  network (``AgentBuilder.make_policy_network``) with ONLY its weights read
  from the checkpoint (critic, targets and optimizer slots stay on disk),
  served by a ``CheckpointVariableSource``; ``restore_policy_network`` gives
  the restored network itself (``rlplat export`` serves it as a SavedModel).
* ``run_episodes(...)``: greedy episodes by the builder's own evaluation
  actor (``make_actor(..., evaluation=True)``) in the ``EnvironmentLoop`` the
  layouts' evaluators use, so what is watched is what training evaluated.

Determinism: the environment and the actor are seeded with ``seed``; greedy
actors draw no noise, so the same checkpoint and seed give the same returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import dm_env
import numpy as np

from rlplat import core
from rlplat import run_dir



class RunError(ValueError):
    """A run directory that cannot be evaluated; the message is one line naming the fix."""


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a training run recorded, read without TensorFlow.

    Attributes:
      logdir: the run directory.
      builder: the builder's class name (``run_info.json``), e.g. "D4PGBuilder".
      agent: the registered agent that trained it (``run_info.json``; runs
        from before agents were recorded: the one whose builder it names).
      agent_config: the agent config's fields (``config.json``'s ``agent``).
      env, env_kwargs: the environment the run trained on.
      checkpoints: learner step -> checkpoint prefix (``.../ckpt-<step>``), oldest first.
    """

    logdir: str
    builder: str
    agent: Optional[str]
    agent_config: Mapping[str, Any]
    env: str
    env_kwargs: Mapping[str, Any]
    checkpoints: Mapping[int, str]

    def checkpoint(self, step: Optional[int] = None) -> Tuple[int, str]:
        """``(step, prefix)`` of learner step ``step``, or of the newest checkpoint when None.

        Raises:
          RunError: no checkpoint, or none at ``step`` (the message lists those kept).
        """
        if not self.checkpoints:
            raise RunError(f"{self.logdir} has no checkpoint in {run_dir.CHECKPOINTS}/ (named by its state file); "
                           "evaluate a run that saved one (runs checkpoint every --checkpoint-period "
                           "seconds and when they end)")
        if step is None:
            step = max(self.checkpoints)
        if step not in self.checkpoints:
            kept = ", ".join(str(s) for s in self.checkpoints)
            raise RunError(f"--checkpoint {step}: {self.logdir} has no checkpoint at learner step "
                           f"{step}; it keeps {kept}")
        return step, self.checkpoints[step]


def checkpoint_steps(logdir: str) -> Dict[int, str]:
    """Learner step -> prefix of every intact checkpoint the state file names, oldest first.

    Files a crashed writer left without naming them (orphans) are not checkpoints.
    """
    return {step: run_dir.checkpoint_prefix(logdir, step) for step in run_dir.checkpoint_steps(logdir)}


def read_run(logdir: str) -> RunRecord:
    """Reads ``logdir``'s config.json, run_info.json and checkpoint list (no TensorFlow).

    Raises:
      RunError: not a directory, or config.json / run_info.json missing,
        unreadable or not from an rlplat RL training run.
    """
    if not os.path.isdir(logdir):
        raise RunError(f"--logdir {logdir} is not a directory; pass a run directory "
                       "(`rlplat train ... --logdir RUN`)")
    config = _read_json(run_dir.config_path(logdir))
    info = _read_json(run_dir.run_info_path(logdir))
    builder, agent, env = info.get("builder"), config.get("agent"), config.get("env")
    if not isinstance(builder, str) or not isinstance(agent, dict) or not isinstance(env, str):
        raise RunError(f"{logdir} does not look like an rlplat RL training run (config.json needs "
                       "'agent' and 'env', run_info.json 'builder'); check --logdir")
    env_kwargs = config.get("env_kwargs") or {}
    from rlplat import agent_spec  # pylint: disable=g-import-not-at-top

    try:
        agent_name = agent_spec.agent_of_record(info)
    except agent_spec.NoAgentsError as e:
        raise RunError(str(e)) from None
    return RunRecord(logdir=logdir, builder=builder, agent=agent_name, agent_config=agent, env=env,
                     env_kwargs=dict(env_kwargs), checkpoints=checkpoint_steps(logdir))


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise RunError(f"{path} is missing; pass a run directory that `rlplat train` wrote") from None
    except (OSError, ValueError) as e:
        raise RunError(f"cannot read {path} ({e}); restore it or evaluate another run") from None
    if not isinstance(value, dict):
        raise RunError(f"{path} is not a JSON object; restore it or evaluate another run")
    return value


def make_builder(run: RunRecord) -> core.AgentBuilder:
    """The run's builder, from the spec of the agent it records, with its recorded agent config.

    Imports no TensorFlow.

    Raises:
      RunError: an agent rlplat does not have, or a recorded config it refuses.
    """
    from rlplat import agent_spec  # pylint: disable=g-import-not-at-top

    try:
        spec = agent_spec.spec(run.agent or "")
        cls = spec.builder_class()
        config = spec.config_class(**dict(run.agent_config))
    except (KeyError, ImportError, AttributeError, ValueError, agent_spec.NoAgentsError):
        raise RunError(f"{run.logdir}: run_info.json names agent {run.agent!r} (builder {run.builder!r}), "
                       "which rlplat does not have or cannot build; evaluate it with the rlplat "
                       "version that trained it") from None
    except TypeError as e:
        raise RunError(f"{run.logdir}/config.json: the recorded agent config does not fit "
                       f"{run.builder} ({e}); evaluate it with the rlplat version that trained it") from None
    return cls(config=config)


class CheckpointVariableSource(core.VariableSource):
    """Serves fixed ``"policy"`` weights (from a checkpoint) at version ``step``."""

    def __init__(self, step: int, arrays: Sequence[np.ndarray]):
        self.step = int(step)
        self.arrays = [np.asarray(a) for a in arrays]

    def get_variables(self, names: Sequence[str]) -> Tuple[int, Dict[str, Sequence[np.ndarray]]]:
        unknown = [n for n in names if n != "policy"]
        if unknown:
            raise ValueError(f"a checkpoint's policy serves only 'policy' variables (asked for {unknown})")
        return self.step, {name: self.arrays for name in names}


def restore_policy_network(builder: core.AgentBuilder, environment_spec,
                           prefix: str) -> Tuple[Dict[str, Any], List[Any]]:
    """The builder's acting network with the weights of checkpoint ``prefix``.

    Only the acting network is built and read: ``expect_partial`` leaves the
    critic, target networks and optimizer slots in the file, and
    ``assert_existing_objects_matched`` fails loudly if any policy variable
    found no value (a checkpoint of another network shape).

    Returns:
      ``(objects, variables)`` as ``AgentBuilder.make_policy_network`` gives
      them, restored.

    Raises:
      RunError: the checkpoint does not fit the network or cannot be read.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (callers check inputs first)

    objects, variables = builder.make_policy_network(environment_spec)
    try:
        # read(), not restore(): it binds no save_counter, which only CheckpointManager writes.
        status = tf.train.Checkpoint(**objects).read(prefix)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        # The failed restore left a status we cannot reach; when it is
        # collected TF logs ~70 "unrestored value" warnings that bury this error.
        tf.get_logger().setLevel("ERROR")
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise RunError(f"{prefix} does not hold the policy that {type(builder).__name__} builds from "
                       f"config.json ({first}); was the checkpoint or config.json replaced?") from None
    return objects, variables


def restore_policy(builder: core.AgentBuilder, environment_spec, prefix: str,
                   step: int = 0) -> CheckpointVariableSource:
    """The policy weights of checkpoint ``prefix`` (``restore_policy_network``), served at version ``step``.

    Raises:
      RunError: the checkpoint does not fit the network or cannot be read.
    """
    _, variables = restore_policy_network(builder, environment_spec, prefix)
    return CheckpointVariableSource(step, [np.array(v.numpy()) for v in variables])


def run_episodes(builder: core.AgentBuilder, environment: dm_env.Environment,
                 source: core.VariableSource, num_episodes: int, seed: int) -> Iterator[Dict[str, Any]]:
    """Yields each greedy episode's stats (``episode_return``, ``episode_length``) as it ends.

    ``environment`` may be wrapped (e.g. by ``video.FrameRecorder``); the
    actor's spec is taken from it.
    """
    from rlplat import specs  # pylint: disable=g-import-not-at-top
    from rlplat.environment_loop import EnvironmentLoop  # pylint: disable=g-import-not-at-top

    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1 (got {num_episodes})")
    spec = specs.make_environment_spec(environment)
    actor = builder.make_actor(spec, source, None, 0, int(seed), evaluation=True)
    # max_env_errors=0: a failing environment stops the evaluation rather
    # than quietly ending episodes early and skewing the returns.
    loop = EnvironmentLoop(environment, actor, max_env_errors=0)
    for _ in range(int(num_episodes)):
        yield loop.run_episode()
