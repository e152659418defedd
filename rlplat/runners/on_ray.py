"""``run_on_ray``: an ``Experiment`` with actors, learner and replay on Ray.

Start order: Ray -> replay (unless co-located in the learner) -> learner
(restores on ``resume``; with ``num_learner_workers`` W > 1 a
``learner_group.LearnerGroup`` of W processes, named and called like the one
learner) -> actors and evaluator. Those are created without
waiting for the learner, so their imports overlap its build; each asks the
learner for the replay address and pulls weights before its first step (Ray
answers once the learner is up). The driver opens its logs and writes its
run records while they start. Then one control loop, in this process:

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

import dataclasses
import os
import threading
from typing import Optional

from rlplat import replay_shards
from rlplat import run_dir
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.experiment import Experiment, RunResult


def check_run(experiment: Experiment, layout: RayLayoutConfig) -> None:
    """The rules that tie an experiment to its layout (each object checks its own fields).

    Needs no Ray, so a command line can call it before starting anything.

    Raises:
      ValueError: in the objects' field names: the agent's global batch does
        not split over the learner replicas or workers, or the actors do not
        split over the replay shards.
    """
    if not isinstance(experiment, Experiment):
        raise TypeError(f"run_on_ray takes an Experiment (got {type(experiment).__name__})")
    batch = getattr(getattr(experiment.builder, "config", None), "global_batch_size", None)
    for name, count in (("num_learner_replicas", layout.num_learner_replicas),
                        ("num_learner_workers", layout.num_learner_workers)):
        if isinstance(batch, int) and count and batch % count:
            raise ValueError(f"global_batch_size {batch} does not split over {name} {count}; use a multiple "
                             f"of {count} such as {max(count, batch - batch % count)}")
    replay_shards.check_shards(experiment.num_actors, layout.num_replay_shards)


def run_on_ray(experiment: Experiment, layout: Optional[RayLayoutConfig] = None, *,
               stop_event: Optional[threading.Event] = None) -> RunResult:
    """Runs ``experiment`` with actors, a learner and replay on Ray.

    The same call as ``rlplat.runners.run_local``, with this runner's layout.

    Args:
      experiment: what to run (agent, environment, seed, budget, schedule, logdir).
      layout: where and how (``RayLayoutConfig``: the Ray address, learner
        replicas and workers, chunk sizes, timeouts; None: its defaults).
      stop_event: set it (from any thread) to end the run as if
        ``max_actor_steps`` had been reached: the learner stops at a step
        boundary, then the final checkpoint, the final evaluation and a clean
        teardown. Checked about twice a second.

    Returns:
      A ``RunResult`` (``details``: restarts, rates, placement, phase timings, ...).

    Raises:
      ValueError: a bad argument (one line naming the flag).
      cluster.ClusterConnectionError: Ray unreachable.
      RunFailedError: the learner or replay failed, or every actor was lost.
      RunInterrupted: SIGINT/SIGTERM (after a best-effort checkpoint and cleanup).
    """
    layout = RayLayoutConfig() if layout is None else layout
    check_run(experiment, layout)
    if stop_event is not None and not callable(getattr(stop_event, "is_set", None)):
        raise ValueError(f"stop_event must be a threading.Event (got {type(stop_event).__name__})")
    logdir = experiment.logdir or run_dir.default_name("ray")
    experiment = dataclasses.replace(experiment, logdir=logdir)
    restored_step = run_dir.start_step(logdir, experiment.resume)
    from rlplat.distributed.driver import Driver  # pylint: disable=g-import-not-at-top  (imports Ray)

    os.makedirs(logdir, exist_ok=True)
    with run_dir.RunLock(logdir):  # the one writer of this run directory, for the whole run
        restored_step = run_dir.start_step(logdir, experiment.resume)  # again, now that no one else writes
        return Driver(experiment, layout, restored_step, stop_event=stop_event).run()

