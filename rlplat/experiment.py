"""What a run is, apart from where it runs: the experiment description and its result.

An ``Experiment`` names the agent (its builder), the environment, the seed,
the budget and the evaluation and checkpoint schedule. It imports neither
Ray nor TensorFlow and pickles in microseconds, so the same object runs
unchanged under either runner (``rlplat.runners``)::

    experiment = Experiment(D4PGBuilder(), EnvironmentFactory("cartpole:swingup"),
                            max_actor_steps=50_000, eval_every_actor_steps=10_000)
    result = run_local(experiment)             # one process
    result = run_on_ray(experiment, layout)    # actors, learner and replay on Ray

Both return a ``RunResult``. How the pieces are placed (processes, CPUs,
chunk sizes, timeouts) is the runner's ``layout`` argument, never the
experiment's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from rlplat import config_fields
from rlplat import controller
from rlplat.seeding import MAX_SEED
from rlplat import core


@dataclasses.dataclass(frozen=True)
class EnvironmentFactory:
    """``seed -> dm_env.Environment`` by name, so it pickles and can be recorded.

    Attributes:
      name: ``"domain:task"`` (control suite) or ``"gym:Id"``, as ``envs.make_environment`` takes it.
      kwargs: further ``make_environment`` arguments (``action_repeat``, ...).
    """

    name: str
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"environment name must be a non-empty string such as 'cartpole:swingup' "
                             f"(got {self.name!r})")
        object.__setattr__(self, "kwargs", dict(self.kwargs))

    def __call__(self, seed: int):
        import rlplat_envs as envs  # pylint: disable=g-import-not-at-top  (MuJoCo loads only where an env is made)

        return envs.make_environment(self.name, seed=seed, **self.kwargs)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.kwargs.items()))))


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A run's description: agent, environment, seed, budget, evaluation and checkpoints.

    Attributes:
      builder: the agent's ``core.AgentBuilder`` (holds only its config).
      environment: the ``EnvironmentFactory`` every actor and the evaluator use.
      seed: the global seed; each role's seed is derived from it.
      num_actors: acting streams (processes on Ray; the local runner runs one).
      max_actor_steps: stop after this many environment steps (None: until
        stopped by a target, a signal or ``stop_event``).
      eval_every_actor_steps: actor steps between evaluations (0: none by count).
      eval_every_s: seconds between evaluations (None: none by time). An
        evaluation runs when either is due, and always at the end.
      eval_episodes: greedy episodes per evaluation.
      target_eval_return: stop as soon as an evaluation's mean return reaches it.
      checkpoint_every_s: seconds between periodic checkpoints (the end always saves one).
      video_every_evals: K > 0 records the first episode of every K-th evaluation.
      logdir: the run directory (None: the runner picks one, or writes none locally).
      resume: continue the run in ``logdir`` from its newest checkpoint.
    """

    builder: core.AgentBuilder
    environment: EnvironmentFactory
    seed: int = 0
    num_actors: int = 2
    max_actor_steps: Optional[int] = None
    eval_every_actor_steps: int = 50_000
    eval_every_s: Optional[float] = None
    eval_episodes: int = 2
    target_eval_return: Optional[float] = None
    checkpoint_every_s: float = 600.0
    video_every_evals: int = 0
    logdir: Optional[str] = None
    resume: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.environment, str):
            object.__setattr__(self, "environment", EnvironmentFactory(self.environment))
        if not isinstance(self.environment, EnvironmentFactory):
            raise TypeError(f"environment must be an EnvironmentFactory (got {type(self.environment).__name__})")
        self._check_counts()
        for name in ("eval_every_s", "checkpoint_every_s"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= config_fields.FLOAT32_MAX:
                raise ValueError(f"{name} must be a number of seconds > 0 (got {value:g})")
        target = self.target_eval_return
        if target is not None and not abs(target) <= config_fields.FLOAT32_MAX:
            raise ValueError(f"target_eval_return must be a finite number (got {target:g}); leave it "
                             "out to never stop early")
        if self.video_every_evals and self.environment.name.startswith("gym:"):
            raise ValueError(f"video_every_evals: {self.environment.name} has no MuJoCo scene to render "
                             "(gym: tasks cannot be recorded); drop video_every_evals or pick a control-suite task")
        if self.resume and not self.logdir:
            raise ValueError("resume needs the logdir of the run to continue")

    def _check_counts(self) -> None:
        """The integer fields, in their own names (a command line maps them to its flags)."""
        if self.num_actors < 1:
            raise ValueError(f"num_actors must be >= 1 (got {self.num_actors})")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be in 0..{MAX_SEED} (got {self.seed}), the range MuJoCo's and "
                             "NumPy's seeds take")
        steps = self.max_actor_steps
        if steps is not None and steps < 1:
            raise ValueError(f"max_actor_steps must be >= 1 (got {steps}); leave it out to run until interrupted")
        if steps is not None and steps > config_fields.INT64_MAX:
            raise ValueError(f"max_actor_steps must fit in 64 bits (got {steps}); leave it out to run "
                             "until interrupted")
        if self.eval_episodes < 1:
            raise ValueError(f"eval_episodes must be >= 1 (got {self.eval_episodes})")
        for name in ("eval_every_actor_steps", "video_every_evals"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (got {getattr(self, name)}); 0 is off")

    def config_record(self) -> Dict[str, Any]:
        """What ``config.json`` records of this experiment (``rlplat eval``, ``plot`` and ``status`` read it)."""
        agent_config = getattr(self.builder, "config", None)
        schedule = ("eval_every_actor_steps", "eval_every_s", "eval_episodes", "target_eval_return",
                    "checkpoint_every_s", "video_every_evals")
        return {"agent": agent_config.to_dict() if hasattr(agent_config, "to_dict") else {},
                "env": self.environment.name, "env_kwargs": dict(self.environment.kwargs),
                "num_actors": self.num_actors, "max_actor_steps": self.max_actor_steps, "seed": self.seed,
                "schedule": {name: getattr(self, name) for name in schedule}}

    @property
    def budget(self) -> float:
        """``max_actor_steps``, or infinity when the run has no step budget."""
        return math.inf if self.max_actor_steps is None else self.max_actor_steps

    def schedule(self, report_every_s: Optional[float]) -> controller.Schedule:
        """The controller's schedule of this experiment, counting actor steps."""
        return controller.Schedule(
            max_steps=self.max_actor_steps, eval_every_steps=self.eval_every_actor_steps,
            eval_every_s=self.eval_every_s, checkpoint_every_s=self.checkpoint_every_s,
            report_every_s=report_every_s, target_eval_return=self.target_eval_return,
            video_every_evals=self.video_every_evals)


@dataclasses.dataclass(frozen=True)
class RunResult(Mapping[str, Any]):
    """What a finished run reports, whichever runner ran it.

    The named fields are common to every runner; ``details`` holds what only
    one runner measures (placement, restarts, phase timings, ...). It reads
    as a mapping too (``result["eval_return"]``), over the fields and the
    details together, as the command line prints it.

    Attributes:
      actor_steps, learner_steps, episodes: counts at the end.
      eval_return: the final evaluation's mean return (None: none ran).
      evaluations: ``(actor steps, mean return)`` of every evaluation, in order.
      stop_reason: "max_actor_steps", "target_eval_return" or "stop_event".
      checkpoint: the final checkpoint's path (None: none written).
      logdir: the run directory (None: none written).
      samples_per_insert: measured over the run (sampled / inserted items).
      seconds: wall time of the whole run.
      details: runner-specific figures.
    """

    actor_steps: int
    learner_steps: int
    episodes: int
    eval_return: Optional[float]
    evaluations: Tuple[Tuple[int, float], ...]
    stop_reason: Optional[str]
    checkpoint: Optional[str]
    logdir: Optional[str]
    samples_per_insert: Optional[float]
    seconds: float
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def _merged(self) -> Dict[str, Any]:
        merged = dict(self.details)
        merged.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "details"})
        return merged

    def __getitem__(self, key: str) -> Any:
        return self._merged()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())
