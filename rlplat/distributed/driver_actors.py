"""The driver's actors: one chunk in flight each, their results, their failures.

``ActorCare`` is the part of the control loop that keeps one ``run_steps``
call in flight per actor, handles each result, and brings a failed actor
back. A failure is any of:

- its process died (SIGKILL, a segfault, the OOM killer, a lost node);
- ``run_steps`` raised, or ran past ``actor_stall_timeout_s``;
- ``__init__`` of its replacement failed.

The driver then kills what is left of it and creates a NEW Ray actor for the
same index (with a fresh seed; ``__init__`` pulls the learner's weights
before any step), and submits its next chunk at once: Ray queues the call
until the new process is up, so nothing waits on the restart. (Actors are
created with ``max_restarts=0`` on purpose: while Ray restarts an actor
itself, every call to it fails at once with ``ActorUnavailableError``, which
is indistinguishable from a new failure without polling; and Ray does not
restart an actor whose ``__init__`` raised.)

Each failure is one restart: counted (``summary["actor_restarts"]``, per
actor in ``summary["actors"]``, saved with the counters), printed, and
logged to ``metrics.jsonl`` as a ``driver`` record: ``event`` "actor_failed"
(with ``actor_index``, ``actor_restarts`` of that actor and ``restarts`` in
total), then "actor_back" when the new process has finished a chunk (with
``back_after_s``: failure to that chunk's end, and its ``init_s``).

An actor may restart ``actor_max_restarts`` times within any
``actor_restart_window_s`` (``actor_slots.RestartBudget``), so occasional
crashes never exhaust it in a long run; one more restart within the window
is a crash loop and that actor is given up. The run fails with one line only
when every actor has been given up.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import ray

from rlplat.distributed import driver_records
from rlplat.distributed import errors
from rlplat.distributed.actor_slots import ActorSlot
from rlplat.distributed.worker_set import kill_worker
from rlplat.distributed.errors import RunFailedError


class ActorCare:
    """Actor methods of ``driver_loop.ControlLoop``.

    A mixin: the state is the loop's (``pending``, rates, ``counts``,
    ``workers.slots``), all born in ``ControlLoop.__init__``.
    """

    def _tend_actors(self) -> None:
        """Submits the next chunk of every active actor that has none in flight."""
        for slot in self.workers.slots:
            if slot.ref is None and slot.active:
                self._submit_actor(slot)

    def _submit_actor(self, slot: ActorSlot) -> None:
        if self.learner_stopped or not slot.active:
            return
        scheduled = self.counts.actor_steps + sum(s.chunk for s in self.workers.slots if s.ref is not None)
        remaining = self.max_actor_steps - scheduled
        if remaining <= 0 and not self.stopping:
            return  # Idle until the learner is asked to stop (then all run again).
        chunk = self.layout.actor_chunk_steps if self.stopping else min(self.layout.actor_chunk_steps,
                                                                      remaining)
        slot.chunk, slot.submitted = chunk, time.monotonic()
        slot.ref = slot.handle.run_steps.remote(chunk)
        self.pending[slot.ref] = ("actor", slot)

    def _on_actor(self, ref, slot: ActorSlot) -> None:
        slot.ref = None
        try:
            stats = ray.get(ref, timeout=self.layout.call_timeout_s)
        except ray.exceptions.RayError as e:  # it died, raised, or its __init__ failed
            self._actor_failed(slot, errors.one_line(e))
            return
        if "first_step_time" in stats:
            self.startup_milestone("first_actor_step", stats.pop("first_step_time"))
        slot.chunks_after_restart += bool(stats.get("restarted"))
        slot.seed = int(stats.get("seed", slot.seed))  # a new process reseeds itself
        steps = int(stats.get("env_steps", slot.chunk))
        self.counts.actor_steps += steps
        slot.steps += steps
        slot.policy_version = int(stats.get("policy_version", -1))
        slot.policy_lag = self._policy_lag_now(slot.policy_version)
        if slot.failed_at is not None:
            self._actor_back(slot, stats)
        returns = driver_records.episode_returns(stats)
        self.counts.episodes += int(stats.get("episodes", len(returns)))
        self._count_env_faults(slot, stats)
        self.env_rate.update(self.counts.actor_steps)
        now = time.monotonic()
        if self.steady_start is None:  # rates from the first result on leave start-up out
            self.steady_start = (now, self.counts.actor_steps, self.counts.learner_steps)
        self.steady_end = (now, self.counts.actor_steps, self.counts.learner_steps)
        record = {"actor_index": slot.index, "actor_steps_per_second": stats.get("steps_per_second"),
                  "env_steps_per_second": self.env_rate.rate(), "policy_version": slot.policy_version,
                  "policy_lag": slot.policy_lag,
                  "episodes": self.counts.episodes, "weight_pulls": stats.get("weight_pulls"),
                  "shared_weight_reads": stats.get("shared_weight_reads")}
        if self.counts.physics_errors or self.counts.env_errors:
            record.update(physics_errors=self.counts.physics_errors, env_errors=self.counts.env_errors)
        if returns:
            record["episode_return"] = sum(returns) / len(returns)
        record.update(driver_records.time_breakdown(stats))
        self.loggers["actor"].write(self.counts.actor_steps, driver_records.finite(record))
        self._submit_actor(slot)

    def _policy_lag_now(self, version: int) -> Optional[float]:
        """Learner steps between the learner now and ``version``, which an actor acts on as it reports.

        Taken when the report arrives: a lag computed later, against a newer
        learner count, would add the report's age (up to an actor chunk, some
        hundred learner steps) to it. The learner's step now is its last reported
        count plus what it has done since at its current rate (at most one
        ``train`` call).
        """
        if version < 0:
            return None
        since = max(0.0, time.monotonic() - self.learner_steps_time)
        now = self.counts.learner_steps + min(self.learn_rate.rate() * since, self.layout.learner_chunk_steps)
        return max(0.0, now - version)

    def _count_env_faults(self, slot: ActorSlot, stats: Dict[str, Any]) -> None:
        """Counts a chunk's environment faults; a new kind of error is logged with its traceback."""
        self.counts.physics_errors += int(stats.get("physics_errors") or 0)
        self.counts.env_errors += int(stats.get("env_errors") or 0)
        for text in stats.get("env_error_tracebacks") or ():
            self.console.message(f"actor {slot.index}: {text.splitlines()[0]}; the episode ended and "
                                 "the actor carries on (traceback in metrics.jsonl)")
            self._log_actor_event("env_error", slot, traceback=text, env_errors=self.counts.env_errors)

    def _actor_failed(self, slot: ActorSlot, reason: str) -> None:
        """Counts and logs a failure, then replaces the actor or, in a crash loop, gives it up."""
        self._check_replay_alive()  # A dead replay server explains a failing actor best.
        now = time.monotonic()
        slot.restarts += 1
        self.counts.restarts += 1
        within_budget = slot.budget.record(now)
        recent, window = slot.budget.recent(now), f"{slot.budget.window_s:g}s"
        kill_worker(slot.handle)  # whatever is left of it: a hung or half-dead process
        if not within_budget:
            slot.given_up = True
            self.console.message(f"actor {slot.index} failed ({reason}); {recent} failures within "
                                 f"{window} is a crash loop: giving it up")
            self._log_actor_event("actor_failed", slot, reason=reason, given_up=True,
                                  recent_restarts=recent)
            if not any(s.active for s in self.workers.slots):
                raise RunFailedError(
                    f"every actor was given up after more than {slot.budget.max_restarts} restarts "
                    f"within {window}; last error (actor {slot.index}): {reason}")
            return
        self.console.message(f"actor {slot.index} failed ({reason}); restarting it (restart "
                             f"{slot.restarts} of this actor, {recent} within the last {window})")
        self._log_actor_event("actor_failed", slot, reason=reason, given_up=False,
                              recent_restarts=recent)
        slot.incarnation += 1
        slot.handle = self.workers.spawn_actor(slot.index, slot.incarnation)
        slot.failed_at = now
        # At once: the new actor queues the call until its __init__ (weights
        # included) is done, so the chunk starts as soon as it can.
        self._submit_actor(slot)

    def _actor_back(self, slot: ActorSlot, stats: Dict[str, Any]) -> None:
        """The first chunk since a failure is done: the actor acts again."""
        slot.back_after_s = time.monotonic() - slot.failed_at
        slot.failed_at = None
        init_s, chunk_s = stats.get("init_s"), stats.get("seconds")
        self.console.message(
            f"actor {slot.index} is back: its new process finished a chunk {slot.back_after_s:.1f}s "
            f"after the failure (__init__ {_seconds(init_s)}, chunk {_seconds(chunk_s)})")
        self._log_actor_event("actor_back", slot, back_after_s=slot.back_after_s, init_s=init_s,
                              chunk_s=chunk_s, pid=stats.get("pid"))

    def _log_actor_event(self, event: str, slot: ActorSlot, **fields) -> None:
        self.loggers["driver"].write(self.counts.actor_steps, driver_records.finite({
            "event": event, "actor_index": slot.index, "actor_restarts": slot.restarts,
            "restarts": self.counts.restarts, "seed": slot.seed, **fields}))


def _seconds(value) -> str:
    return f"{value:.1f}s" if isinstance(value, (int, float)) else "-"
