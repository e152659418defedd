"""The driver's watch on replay: the servers' counts, their CPU, and whether they are alive.

``ReplayWatch`` is the part of the control loop that reads the replay
servers' table counts each status period (through the learner, so the
driver never imports Reverb or TensorFlow), and decides, when they stop
answering, whether the server is dead (the run fails with one line) or only
slow on a busy machine (a counted probe miss).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import ray

from rlplat import replay_shards
from rlplat.distributed.errors import RunFailedError


class ReplayWatch:
    """Replay methods of ``driver_loop.ControlLoop``.

    A mixin: the state is the loop's (``workers``, ``calls``, ``layout``,
    ``replay_stats``, ``replay_shard_stats``, ``replay_probe_misses``), all
    born in ``ControlLoop.__init__``.
    """

    def _read_replay(self, timeout_s: float = 2.0) -> bool:
        """Refreshes ``replay_stats`` from the servers' table infos; False if one did not answer.

        With replay shards the counts are the sums over all of them (the run's
        samples-per-insert), and ``replay_shards`` holds each shard's own.
        """
        per_shard = self._replay_counts(timeout_s)
        if per_shard is None:
            return False
        size, inserts, samples = (sum(shard[key] for shard in per_shard)
                                  for key in ("replay_size", "replay_inserts", "replay_samples"))
        previous = self.replay_stats
        stats = {"replay_size": size, "replay_inserts": inserts, "replay_samples": samples,
                 "samples_per_insert": samples / inserts if inserts else math.nan}
        if len(per_shard) > 1:  # each shard's own counts, as scalars for the logs and TensorBoard
            for i, shard in enumerate(per_shard):
                shard["samples_per_insert"] = (shard["replay_samples"] / shard["replay_inserts"]
                                               if shard["replay_inserts"] else math.nan)
                stats.update({replay_shards.metric_key(i, key.replace("replay_", "")): value
                              for key, value in shard.items()})
            self.replay_shard_stats = per_shard
        cpu = self._replay_cpu_seconds(timeout_s)
        if cpu is not None:  # servers in processes of their own: their CPU is replay's alone
            stats["replay_server_cpu_s"] = sum(cpu)
            if len(cpu) > 1:
                stats.update({replay_shards.metric_key(i, "cpu_s"): value for i, value in enumerate(cpu)})
        d_inserts = inserts - previous.get("replay_inserts", 0)
        d_samples = samples - previous.get("replay_samples", 0)
        stats["samples_per_insert_recent"] = d_samples / d_inserts if d_inserts > 0 else math.nan
        self.replay_stats = stats
        return True

    def _replay_cpu_seconds(self, timeout_s: float) -> Optional[List[float]]:
        """Each replay server process's CPU seconds so far; None when replay lives in the learner
        (its CPU is not replay's alone) or a server did not answer within ``timeout_s``."""
        servers = self.workers.replay_shards
        if not servers:
            return None
        refs = [server.cpu_seconds.remote() for server in servers]
        ready, _ = self.calls.wait(refs, len(refs), timeout_s)
        if len(ready) < len(refs):
            return None
        try:
            return [float(x) for x in ray.get(refs, timeout=1.0)]
        except (ray.exceptions.RayError, TimeoutError):
            return None

    def _replay_counts(self, timeout_s: float) -> Optional[List[Dict[str, int]]]:
        """Each server's counts, as the learner reads them; None: no answer within ~``timeout_s``.

        The learner reaches every shard already; asking it keeps Reverb, and
        with it TensorFlow (~2.5 CPU-s to import), out of the driver.
        """
        learner = self.workers.learner
        if learner is None:
            return None
        ref = learner.replay_counts.remote(timeout_s)
        # The learner's own probe is bounded by timeout_s; the margin is for the
        # Ray call. In slices, so a signal is acted on meanwhile.
        ready, _ = self.calls.wait([ref], 1, timeout_s + 5.0)
        if not ready:
            return None
        try:
            return ray.get(ref, timeout=1.0)
        except (ray.exceptions.RayError, TimeoutError):  # the learner's process is gone or failing
            return None

    def _check_replay_alive(self) -> None:
        if self.workers.replay_address is None:
            return
        for _ in range(2):  # more misses in a row: one slow answer on a busy box is not death
            if self._read_replay(timeout_s=5.0):
                return
            # A signal that came while we probed wins over the verdict: the user
            # asked to stop (and for a checkpoint), and a frozen or busy learner
            # is then the stop path's business, with its own budget.
            self.calls.check_signal()
        # Silence alone is not death: on an overloaded machine the server's
        # gRPC threads can miss several probes in a row. Ray knows whether the
        # hosting process is gone; one that is alive but stuck is the stall
        # timeouts' business.
        if not self._replay_host_dead():
            self.replay_probe_misses += 1
            return
        if self.workers.colocate:
            raise RunFailedError(
                f"learner failed: its process, which also hosts the replay server at "
                f"{self.workers.replay_address}, no longer answers; the run cannot continue (check the "
                "learner's worker log, then continue with --resume)")
        raise RunFailedError(
            f"replay server died; {self.workers.replay_address} no longer answers, and actors and learner "
            "cannot go on without it (check its node and the worker logs, then continue with --resume)")

    def _replay_host_dead(self) -> bool:
        """True when Ray reports the process hosting the replay server dead."""
        hosts = [self.workers.learner] if self.workers.colocate else (self.workers.replay_shards
                                                                         or [self.workers.replay])
        for host in hosts:
            if host is None:
                return True
            ref = host.__ray_ready__.remote()
            ready, _ = self.calls.wait([ref], 1, 5.0)  # in slices: a signal is still acted on within 0.5 s
            if not ready:
                continue  # alive, or not known dead yet: the next check asks again
            try:
                ray.get(ref, timeout=self.layout.call_timeout_s)
            except ray.exceptions.RayError:
                return True
        return False
