"""``run_on_ray``: the driver of a distributed actor-learner run.

Start order: Ray -> replay (unless co-located in the learner) -> learner
(restores on ``resume``; with ``num_learner_workers`` W > 1 a
``learner_group.LearnerGroup`` of W processes, named and called like the one
learner) -> actors and evaluator. Those are created without
waiting for the learner, so their imports overlap its build; each asks the
learner for the replay address and pulls weights before its first step (Ray
answers once the learner is up). Then one control loop, in this process:

- every actor always has one ``run_steps(chunk)`` call in flight (Ray calls
  are for control; the steps run inside the actor);
- the learner always has one ``train(chunk)`` call in flight;
- every ``console_every_s`` the replay server's table info is read (size,
  inserts, samples -> the measured samples-per-insert), the status line is
  printed and learner/replay metrics are logged;
- an evaluation runs every ``eval_every_actor_steps``, a checkpoint every
  ``checkpoint_every_s``.

Stopping: once ``max_actor_steps`` are counted (or an evaluation reaches
``target_eval_return``, or the caller sets ``stop_event``) the learner is asked to stop
while the actors keep running (a learner blocked on the rate limiter needs
their inserts to reach its next step boundary); then the final checkpoint,
a final evaluation, and every worker is killed. Counted actor steps are those
of completed chunks, so the total is >= ``max_actor_steps``.

Counters (actor steps, episodes, restarts) live in this driver, which sees
every chunk's result; a Counter actor would add a round trip per chunk and
one more process to lose. They are saved next to each checkpoint
(``checkpoints/counters.json``) so ``resume`` continues them; with
``replay_checkpoint`` replay is saved with each checkpoint too, and restored.

Failures: an actor that dies, raises or stalls is replaced by a new process
(which pulls the learner's weights before its first step) and the run goes
on; each restart is counted (``summary["actor_restarts"]``), printed, and
logged to ``metrics.jsonl`` (role ``driver``; see ``driver_actors``). The
limit is per time window, never per lifetime: an actor restarted more than
``actor_max_restarts`` times within ``actor_restart_window_s`` is crash-looping
and is given up, and only when every actor is given up does the run fail. A
learner failure or a dead replay server ends the run with ``RunFailedError``
(one line, non-zero exit in the CLI). SIGINT/SIGTERM (to the driver, or to its
process group as Ctrl-C sends it; Ray's processes run in a session of their
own and do not get it): checkpoint if the learner reaches a step boundary
within seconds, kill every worker, shut Ray down, raise ``RunInterrupted``.
A second signal skips the checkpoint; one during start-up has none to make.

Logs: the driver writes all of them (one TensorBoard writer per role:
``actor``, ``learner``, ``evaluator``, plus ``metrics.jsonl``), so they land in
one place even when workers run on other nodes. Checkpoints are written by
the learner: on a multi-node cluster ``logdir`` must be on storage the learner's
node can write (a shared file system).
"""

from __future__ import annotations

import datetime
import os
import threading
from typing import Any, Dict, Optional

from rlplat.distributed import counters
from rlplat.distributed.errors import RunFailedError, RunInterrupted  # noqa: F401  (part of the API)
from rlplat.distributed.layout_config import RayLayoutConfig  # noqa: F401  (part of the API)


def run_on_ray(builder, env: str, env_kwargs: Optional[Dict[str, Any]] = None, *,
               num_actors: int = 2, num_learner_replicas: Optional[int] = None,
               max_actor_steps: Optional[int] = None,
               logdir: Optional[str] = None, seed: int = 0, resume: bool = False,
               address: Optional[str] = None, console: bool = True,
               layout: Optional[RayLayoutConfig] = None,
               stop_event: Optional[threading.Event] = None) -> Dict[str, Any]:
    """Trains ``builder``'s agent on ``env`` with actors, a learner and replay on Ray.

    The arguments mirror ``rlplat train <agent>``'s flags: ``--env``,
    ``--num-actors``, ``--num-learner-replicas``, ``--max-actor-steps``,
    ``--logdir``, ``--seed``, ``--resume``, ``--address``.

    Args:
      builder: an ``AgentBuilder`` (picklable: it holds only its config).
      env: "domain:task" for ``envs.make_environment``.
      env_kwargs: extra ``make_environment`` arguments (action_repeat, ...).
      num_actors: actor processes.
      num_learner_replicas: learner replicas: GPUs of the learner's node, or
        logical CPUs; None means every GPU of the node with the most, or 1.
      max_actor_steps: stop after this many environment steps in total (a
        resumed run counts the steps before the restart too); None runs until
        SIGINT/SIGTERM.
      logdir: run directory (default ``runs/ray-<timestamp>``).
      seed: the global seed; each actor's seed is ``seeding.actor_seed(seed, i)``.
      resume: continue the run in ``logdir`` from its newest checkpoint.
      address: None (local Ray), "auto" or "HOST:PORT" (see ``cluster.connect``).
      console: print the live status line.
      layout: ``RayLayoutConfig`` knobs (None: its defaults).
      stop_event: set it (from any thread) to end the run as if
        ``max_actor_steps`` had been reached: the learner stops at a step
        boundary, then the final checkpoint, the final evaluation and a clean
        teardown. Checked about twice a second.

    Returns:
      A summary dict (counts, rates, final evaluation, checkpoint path,
      ``stop_reason``: "max_actor_steps", "target_eval_return" or "stop_event", ...).

    Raises:
      ValueError: a bad argument (one line naming the flag).
      cluster.ClusterConnectionError: Ray unreachable.
      RunFailedError: the learner or replay failed, or every actor was lost.
      RunInterrupted: SIGINT/SIGTERM (after a best-effort checkpoint and cleanup).
    """
    if num_actors < 1:
        raise ValueError(f"--num-actors must be >= 1 (got {num_actors})")
    if num_learner_replicas is not None and num_learner_replicas < 1:
        raise ValueError(f"--num-learner-replicas must be >= 1 (got {num_learner_replicas})")
    layout = RayLayoutConfig() if layout is None else layout
    if layout.num_learner_workers > 1 and num_learner_replicas not in (None, 1):
        raise ValueError(f"--num-learner-replicas {num_learner_replicas} cannot be combined with "
                         f"--num-learner-workers {layout.num_learner_workers}: each learner worker uses "
                         "all of its node's GPUs (or its CPU); drop --num-learner-replicas")
    workers = layout.num_learner_workers
    batch = getattr(getattr(builder, "config", None), "global_batch_size", None)
    if workers > 1 and isinstance(batch, int) and batch % workers:
        lower = max(workers, batch - batch % workers)
        raise ValueError(f"--global-batch-size {batch} does not split over --num-learner-workers "
                         f"{workers}; use a multiple of {workers} such as {lower}")
    if layout.debug_eager and (layout.num_learner_workers > 1 or (num_learner_replicas or 1) > 1):
        raise ValueError("--debug-eager runs the learner on one device: drop --num-learner-replicas "
                         "and --num-learner-workers (or set them to 1)")
    if layout.video_every_evals and env.startswith("gym:"):
        raise ValueError(f"--video-every: {env} has no MuJoCo scene to render (gym: tasks cannot be "
                         "recorded); drop --video-every or pick a control-suite task")
    if max_actor_steps is not None and max_actor_steps < 1:
        raise ValueError(f"--max-actor-steps must be >= 1 (got {max_actor_steps}); leave it out "
                         "to run until interrupted")
    if seed < 0:
        raise ValueError(f"--seed must be >= 0 (got {seed})")
    if stop_event is not None and not callable(getattr(stop_event, "is_set", None)):
        raise ValueError(f"stop_event must be a threading.Event (got {type(stop_event).__name__})")
    logdir = logdir or os.path.join("runs", f"ray-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    restored_step = check_logdir(logdir, resume)
    from rlplat.distributed.driver import Driver  # pylint: disable=g-import-not-at-top  (imports Ray)

    driver = Driver(builder, env, dict(env_kwargs or {}), num_actors, num_learner_replicas,
                     max_actor_steps, logdir, seed, restored_step, address, console, layout,
                     stop_event=stop_event)
    return driver.run()


def check_logdir(logdir: str, resume: bool) -> Optional[int]:
    """Refuses to resume from nothing or to overwrite a run; returns the step to resume."""
    from rlplat.utils import checkpointing  # pylint: disable=g-import-not-at-top

    directory = os.path.join(logdir, counters.CHECKPOINT_SUBDIR)
    latest = _latest_checkpoint(directory)
    if resume and latest is None:
        raise ValueError(f"--resume found no checkpoint in {directory}; check --logdir or drop --resume")
    if not resume and latest is not None:
        raise ValueError(f"{logdir} already holds a run with checkpoints; pass --resume to continue it "
                         "or choose a new --logdir")
    return checkpointing.step_of(latest) if latest else None


def _latest_checkpoint(directory: str) -> Optional[str]:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None
