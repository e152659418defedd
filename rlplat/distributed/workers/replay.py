"""The replay server of a run whose replay is not co-located with the learner."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

from rlplat.distributed import process
from rlplat.distributed.workers import common


def start_reverb(builder, environment_spec, num_actors: int,
                  checkpoint_logdir: Optional[str] = None, restore_step: Optional[int] = None):
    """Starts a Reverb server with the builder's tables; returns (server, port, restore).

    With ``checkpoint_logdir`` the server can write replay checkpoints there
    and, given ``restore_step`` (the learner step being resumed), first loads
    the one of that step (or the newest before it). ``restore`` is None without
    ``checkpoint_logdir``, else ``{"replay_restored_from": path or None,
    "replay_restored_items": items loaded}``; it is read before any client can
    know the address, so no actor has inserted yet. It also holds the
    restored rate limiters' ``replay_restored_inserts`` and
    ``replay_restored_samples``, from which the ratio goes on.

    Reverb 0.14 has no bind-address option: the server listens on all
    interfaces ([::]:port) even when only local clients use it. On a shared
    network, firewall the port range or run on a private network; Ray's own
    servers, by contrast, are bound to loopback for local runs.
    """
    from rlplat.replay import checkpoints  # pylint: disable=g-import-not-at-top
    from rlplat.replay import server as replay_server  # pylint: disable=g-import-not-at-top

    tables = builder.make_replay_tables(environment_spec, num_actors)
    if checkpoint_logdir is None:
        server = replay_server.make_server(tables)
        return server, server.port, None
    found = checkpoints.candidates(checkpoint_logdir, restore_step) if restore_step is not None else []
    skipped = []
    for path in found + [None]:  # newest first, then empty replay
        try:
            server = replay_server.make_server(
                tables, checkpointer=checkpoints.make_checkpointer(checkpoint_logdir, path))
        except Exception as e:  # pylint: disable=broad-except  (Reverb raises plain RuntimeErrors)
            if path is None:
                raise
            skipped.append(f"{os.path.basename(path)} ({str(e).splitlines()[0][:120]})")
            tables = builder.make_replay_tables(environment_spec, num_actors)
            continue
        break
    stats = checkpoints.table_stats(f"127.0.0.1:{server.port}")
    return server, server.port, {"replay_restored_from": path, "replay_restored_items": stats["items"],
                                 "replay_restored_inserts": stats["inserts"],
                                 "replay_restored_samples": stats["samples"],
                                 "replay_skipped": skipped}


class ReplayServer:
    """Hosts a ``reverb.Server`` with the builder's tables (when not co-located).

    Args:
      builder: the agent's ``AgentBuilder`` (its tables, validated for
        ``num_actors``).
      environment_spec: the ``EnvironmentSpec`` the tables' signatures use.
      num_actors: actors that will insert.
      host: the address clients should use; None means this node's IP
        (127.0.0.1 on a local instance).
      checkpoint_logdir: the run directory when replay is checkpointed
        (``--replay-checkpoint``); the learner's chief triggers each save.
      restore_step: with ``checkpoint_logdir``: the learner step being
        resumed; its replay checkpoint is loaded before the server starts.
    """

    def __init__(self, builder, environment_spec, num_actors: int, host: Optional[str] = None,
                 checkpoint_logdir: Optional[str] = None, restore_step: Optional[int] = None):
        process.setup_worker(1, 1, hide_gpus=True)
        self._server, port, self._restore = start_reverb(builder, environment_spec, num_actors,
                                                          checkpoint_logdir, restore_step)
        self._address = f"{host or common.node_ip()}:{port}"

    def address(self) -> str:
        """``host:port`` for actors and the learner."""
        return self._address

    def restore_info(self) -> Optional[Dict[str, Any]]:
        """What the server loaded at start (see ``_start_reverb``); None: not checkpointed."""
        return self._restore

    def ping(self) -> bool:
        return True

    def cpu_seconds(self) -> float:
        """CPU seconds this process has used, Reverb's server threads included: what replay costs."""
        return time.process_time()

    def stop(self) -> None:
        self._server.stop()
