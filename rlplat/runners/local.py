"""``run_local``: an ``Experiment`` in one process, with an embedded Reverb server.

The debugging runner: no Ray, everything in one Python thread, taking turns
(a chunk of steps for each actor, then as many learner steps as the replay
ratio allows), under the same ``rlplat.controller.Controller`` as the Ray
runner. With a ``logdir`` it writes ``config.json`` and ``run_info.json``
(so ``rlplat eval``, ``plot`` and ``status`` read it as a Ray run's),
``metrics.jsonl`` and TensorBoard logs, and checkpoints the learner (``checkpoints/ckpt-<learner step>``, beside
``counters.json``) every ``checkpoint_every_s`` and at the end, so
``resume`` continues the learner and the counts; replay itself is not
saved, so a resumed run refills it first.

Why the builder's rate limiter is replaced: in one thread a blocked insert can
never be unblocked (the learner that would sample runs on the same thread),
so a ``SampleToInsertRatio`` limiter deadlocks. Every
table is rebuilt with a ``MinSize`` limiter (same warm-up size; inserts never
block) and the runner enforces the builder's ``samples_per_insert`` itself by
counting the server's completed inserts and samples: the learner steps only
while ``samples < (inserts - min_size + 1) * samples_per_insert``. Over a run
the measured ratio matches the builder's (it is reported), overshooting by at
most one learner call.

Network: the embedded Reverb server is bound by ``reverb.Server``, which takes
only a port, so it listens on every interface. The loopback shim
(``rlplat.distributed.loopback``) can only cover a process started behind it,
and this server lives in the caller's own process, so start Python with
``LD_PRELOAD=<venv>/lib/rlplat/loopback_bind.so RLPLAT_LOOPBACK_ONLY=1`` to keep
it on loopback; otherwise ``run_local`` logs one warning with the port.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import reverb

from rlplat import run_dir
from rlplat import seeding
from rlplat import specs as specs_lib
from rlplat.controller import Controller
from rlplat.distributed import counters  # no Ray: a JSON file beside the checkpoints
from rlplat.distributed import loopback  # no Ray: environment and /proc checks only
from rlplat.environment_loop import EnvironmentLoop
from rlplat.experiment import Experiment, RunResult
from rlplat.replay import server as replay_server


@dataclasses.dataclass(frozen=True)
class LocalLayout:
    """How ``run_local`` takes turns (the experiment says what to run).

    Attributes:
      actor_chunk_steps: steps of each actor between two turns of the learner.
      replicator: the learner's ``Replicator`` (None: ``make_replicator()``).
      max_seconds: stop as if ``stop_event`` were set after this wall time.
      report_every_s: seconds between reports (``on_progress`` is called
        after every turn regardless).
      on_progress: called after every turn with the running totals.
    """

    actor_chunk_steps: int = 250
    replicator: Any = None
    max_seconds: Optional[float] = None
    report_every_s: Optional[float] = 30.0
    on_progress: Optional[Callable[[Dict[str, Any]], None]] = None

    @classmethod
    def one_learner_call_per_chunk(cls, builder: Any, **kwargs: Any) -> "LocalLayout":
        """Turns of one learner call (``builder.steps_per_call`` batches) per its worth of inserts.

        The chunk is the env steps whose inserts pay for one call at the
        builder's samples-per-insert, so the learner steps per env step are
        those of a Ray run, interleaved as a single-process reference does.
        """
        config = builder.config
        chunk = max(1, round(builder.steps_per_call * config.global_batch_size / config.samples_per_insert))
        return cls(actor_chunk_steps=chunk, **kwargs)

    def __post_init__(self) -> None:
        if self.actor_chunk_steps < 1:
            raise ValueError(f"actor_chunk_steps must be >= 1 (got {self.actor_chunk_steps})")
        for name in ("max_seconds", "report_every_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (got {value})")


def _non_blocking(tables: List[reverb.Table]):
    """Each table rebuilt with MinSize, and (name, samples_per_insert, min_size)."""
    rebuilt, ratios = [], []
    for table in tables:
        info = table.info.rate_limiter_info
        min_size = max(1, int(info.min_size_to_sample))
        ratios.append((table.name, float(info.samples_per_insert), min_size))
        rebuilt.append(table.replace(rate_limiter=reverb.rate_limiters.MinSize(min_size)))
    return rebuilt, ratios


def _counts(client: reverb.Client, table: str):
    info = client.server_info(timeout=30)[table].rate_limiter_info
    return int(info.insert_stats.completed), int(info.sample_stats.completed)



def run_local(experiment: Experiment, layout: Optional[LocalLayout] = None, *,
              stop_event: Optional[threading.Event] = None) -> RunResult:
    """Runs ``experiment`` in this process: the same call as ``rlplat.runners.run_on_ray``.

    Args:
      experiment: what to run; its ``num_actors`` actors take turns in this thread.
      layout: ``LocalLayout`` (None: its defaults).
      stop_event: set it to end the run at the next turn, as the budget would.

    Returns:
      A ``RunResult``; ``details`` holds the training ``episode_returns``, the
      last evaluation's ``eval_returns``, ``physics_errors``, the seconds spent
      acting / learning / evaluating and ``target_samples_per_insert``.
    """
    if not isinstance(experiment, Experiment):
        raise TypeError(f"run_local takes an Experiment (got {type(experiment).__name__})")
    layout = LocalLayout() if layout is None else layout
    if not isinstance(layout, LocalLayout):
        raise TypeError(f"run_local takes a LocalLayout (got {type(layout).__name__}): Ray's settings, such "
                        "as envs_per_actor, have no meaning in one process; pass LocalLayout(...) or call "
                        "run_on_ray")
    lock = None
    if experiment.logdir:
        run_dir.start_step(experiment.logdir, experiment.resume)  # refuse before making anything
        os.makedirs(experiment.logdir, exist_ok=True)
        lock = run_dir.RunLock(experiment.logdir).acquire()  # the one writer of this run directory
    try:
        restored_step = run_dir.start_step(experiment.logdir, experiment.resume) if lock else None
        return _run(experiment, layout, restored_step, stop_event)
    finally:
        if lock is not None:
            lock.release()


def _run(experiment: Experiment, layout: LocalLayout, restored_step: Optional[int],
         stop_event: Optional[threading.Event]) -> RunResult:
    run = _LocalRun(experiment, layout, restored_step)
    try:
        run.start()
        stop_requested = _stop_requested(stop_event, layout.max_seconds, run.started)
        if run.actor_steps < experiment.budget:
            Controller(experiment.schedule(layout.report_every_s)).run(run, stop_requested)
        run.stop_reason = run.stop_reason or "max_actor_steps"
        run.finish()
        return run.result()
    finally:
        run.close()


def _stop_requested(stop_event, max_seconds, started) -> Optional[Callable[[], bool]]:
    if stop_event is None and max_seconds is None:
        return None
    return lambda: bool((stop_event is not None and stop_event.is_set()) or (
        max_seconds is not None and time.perf_counter() - started > max_seconds))


class _LocalRun:
    """The state of one ``run_local`` call; the controller's ``Program``."""

    def __init__(self, experiment: Experiment, layout: LocalLayout, restored_step: Optional[int]):
        self.experiment, self.layout, self.restored_step = experiment, layout, restored_step
        self.started = time.perf_counter()
        self.environments: List[Any] = []
        self.server = self.client = self.learner = self.checkpointer = None
        self.adders: List[Any] = []
        self.loops: List[EnvironmentLoop] = []
        self.eval_loop: Optional[EnvironmentLoop] = None
        self.eval_actor = None
        self.loggers: Dict[str, Any] = {}
        self.table, self.samples_per_insert, self.min_size = "", 0.0, 1
        self.actor_steps = self.episodes = self.physics_errors = 0
        self.seconds = {"act_s": 0.0, "learn_s": 0.0, "eval_s": 0.0}
        self.episode_returns: List[float] = []
        self.evaluations: List[tuple] = []
        self.eval_returns: List[float] = []
        self.last_eval_step: Optional[int] = None
        self.checkpoint_path: Optional[str] = None
        self.stop_reason: Optional[str] = None
        self.stopping = False

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        from rlplat import replication  # pylint: disable=g-import-not-at-top  (imports TF)

        exp = self.experiment
        builder = exp.builder
        for i in range(exp.num_actors):
            self.environments.append(exp.environment(seeding.actor_seed(exp.seed, i)))
        eval_seed = seeding.role_seed(exp.seed, "evaluator")  # as on Ray
        eval_environment = exp.environment(eval_seed)
        self.environments.append(eval_environment)
        spec = specs_lib.make_environment_spec(self.environments[0])
        tables, ratios = _non_blocking(builder.make_replay_tables(spec, exp.num_actors))
        self.server = replay_server.make_server(tables)
        if not loopback.active_in_this_process():
            logging.getLogger(__name__).warning(
                "run_local: the embedded Reverb server listens on all interfaces (port %d); start Python "
                "with LD_PRELOAD=%s %s=1 to keep it on loopback", self.server.port,
                loopback.shim_path() or "<venv>/lib/rlplat/" + loopback.SHIM_NAME, loopback.SWITCH)
        address = f"localhost:{self.server.port}"
        self.client = reverb.Client(address)
        self.table, self.samples_per_insert, self.min_size = ratios[0]
        replicator = self.layout.replicator or replication.make_replicator()
        import tensorflow as tf  # pylint: disable=g-import-not-at-top  (replication has imported it)

        tf.keras.utils.set_random_seed(seeding.role_seed(exp.seed, "learner"))  # the initial weights, as on Ray
        self.learner = builder.make_learner(spec, replicator, address, exp.logdir)
        if exp.logdir:
            self._open_logdir()
        for i in range(exp.num_actors):
            adder = builder.make_adder(address, spec)
            self.adders.append(adder)
            # In one process the learner itself is the actors' variable source.
            actor = builder.make_actor(spec, self.learner, adder, i, seeding.actor_seed(exp.seed, i))
            self.loops.append(EnvironmentLoop(self.environments[i], actor))
        self.eval_actor = builder.make_actor(spec, self.learner, None, 0, eval_seed, evaluation=True)
        self.eval_loop = EnvironmentLoop(eval_environment, self.eval_actor)

    def _open_logdir(self) -> None:
        from rlplat import agent_spec  # pylint: disable=g-import-not-at-top
        from rlplat.utils import checkpointing  # pylint: disable=g-import-not-at-top
        from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top
        from rlplat.utils import run_info  # pylint: disable=g-import-not-at-top

        exp = self.experiment
        resolved = getattr(self.learner, "precision", None)  # the learner resolved it in this process
        if resolved is not None:
            print(resolved.line(getattr(self.learner, "NAME", "")), flush=True)
        run_info.write_run_info(exp.logdir, exp.config_record(), extra={
            "precision": None if resolved is None else resolved.to_dict(),
            "layout": "local", "agent": agent_spec.agent_of_builder(exp.builder),
            "builder": type(exp.builder).__name__, "resumed_from_step": self.restored_step})
        self.checkpointer = checkpointing.Checkpointer(
            run_dir.checkpoints_dir(exp.logdir), **self.learner.checkpointables())
        if self.restored_step is not None:
            self.checkpointer.restore(self.restored_step)
            saved = counters.load_counters(exp.logdir, self.restored_step)
            self.actor_steps = int(saved.get("actor_steps", 0))
            self.episodes = int(saved.get("episodes", 0))
        for role in ("actor", "learner", "evaluator"):
            purge = None if self.restored_step is None else (
                self.restored_step if role == "learner" else self.actor_steps)
            self.loggers[role] = loggers.make_logger(exp.logdir, role, purge_after_step=purge)

    # ------------------------------------------------------ controller.Program
    def steps(self) -> int:
        return self.actor_steps

    def eval_return(self) -> Optional[float]:
        return self.evaluations[-1][1] if self.evaluations else None

    def advance(self, max_steps: Optional[int]) -> bool:
        """One turn: a chunk of each actor's steps, then the learner up to the replay ratio."""
        if self.stopping:
            return True
        chunk = self.layout.actor_chunk_steps
        if max_steps is not None:
            chunk = min(chunk, max_steps)
        for loop in self.loops:
            stats = loop.run_steps(max(1, chunk // len(self.loops)))
            self.actor_steps += stats["env_steps"]
            self.episodes += stats["episodes"]
            self.physics_errors += stats["physics_errors"]
            self.seconds["act_s"] += stats["wall_s"]
            self.episode_returns.extend(stats["episode_returns"])
            if "actor" in self.loggers:
                for value in stats["episode_returns"]:
                    self.loggers["actor"].write(self.actor_steps, {"episode_return": value})
        t0 = time.perf_counter()
        inserts, samples = _counts(self.client, self.table)
        while inserts >= self.min_size and samples < (inserts - self.min_size + 1) * self.samples_per_insert:
            self.learner.step()
            inserts, samples = _counts(self.client, self.table)
        self.seconds["learn_s"] += time.perf_counter() - t0
        if self.layout.on_progress is not None:
            self.layout.on_progress(dict(
                self.seconds, actor_steps=self.actor_steps, episodes=self.episodes,
                physics_errors=self.physics_errors, learner_steps=self.learner.num_steps,
                last_return=self.episode_returns[-1] if self.episode_returns else None,
                eval_return=self.eval_return()))
        return False

    def request_stop(self, reason: str) -> None:
        self.stop_reason, self.stopping = reason, True

    def evaluate(self, video: bool) -> bool:
        del video  # the local runner records no video
        t0 = time.perf_counter()
        self.eval_actor.update(wait=True)  # Always the newest weights.
        self.eval_returns = [self.eval_loop.run_episode()["episode_return"]
                             for _ in range(self.experiment.eval_episodes)]
        mean = float(np.mean(self.eval_returns))
        self.evaluations.append((self.actor_steps, mean))
        self.last_eval_step = self.actor_steps
        if "evaluator" in self.loggers:
            self.loggers["evaluator"].write(self.actor_steps, {
                "eval_return": mean, "learner_steps": self.learner.num_steps})
        self.seconds["eval_s"] += time.perf_counter() - t0
        return True

    def checkpoint(self) -> bool:
        if self.checkpointer is not None:
            step = self.learner.num_steps
            self.checkpoint_path = self.checkpointer.save(step)
            counters.save_counters(self.experiment.logdir, step, {
                "actor_steps": self.actor_steps, "episodes": self.episodes,
                "learner_steps": step})
        return True

    def report(self) -> None:
        if "learner" in self.loggers:
            inserts, samples = _counts(self.client, self.table)
            self.loggers["learner"].write(self.learner.num_steps, {
                "actor_steps": self.actor_steps, "replay_inserts": inserts, "replay_samples": samples})

    # ----------------------------------------------------------------- finish
    def finish(self) -> None:
        """The final checkpoint and evaluation (unless one ran at this very step)."""
        for adder in self.adders:
            adder.close()
        self.adders = []
        self.checkpoint()
        if self.last_eval_step != self.actor_steps:
            self.evaluate(video=False)

    def result(self) -> RunResult:
        inserts, samples = _counts(self.client, self.table)
        return RunResult(
            actor_steps=self.actor_steps, learner_steps=self.learner.num_steps, episodes=self.episodes,
            eval_return=self.eval_return(), evaluations=tuple(self.evaluations),
            stop_reason=self.stop_reason, checkpoint=self.checkpoint_path, logdir=self.experiment.logdir,
            samples_per_insert=samples / max(1, inserts - self.min_size),
            seconds=time.perf_counter() - self.started,
            details=dict(self.seconds, episode_returns=self.episode_returns, eval_returns=self.eval_returns,
                         physics_errors=self.physics_errors,
                         target_samples_per_insert=self.samples_per_insert))

    def close(self) -> None:
        for adder in self.adders:
            try:
                adder.close()
            except Exception:  # pylint: disable=broad-except  (do not mask the real error)
                pass
        for logger in self.loggers.values():
            logger.close()
        if self.server is not None:
            self.server.stop()
        for environment in self.environments:
            environment.close()
