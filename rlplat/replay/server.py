"""Starting a Reverb server and waiting for one to come up."""

from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence, Tuple

import portpicker
import reverb

from rlplat.replay import errors


@dataclasses.dataclass(frozen=True)
class ReplayHandle:
    """What actors and learners need to reach a replay server (picklable).

    Attributes:
      address: ``host:port`` of the server.
      tables: Names of the tables it serves.
    """

    address: str
    tables: Tuple[str, ...] = ()

    @classmethod
    def from_server(cls, server: reverb.Server, host: str = "localhost") -> "ReplayHandle":
        """Handle for an in-process server.

        ``host`` must be an address the clients can reach: the default only works
        for clients on the same machine; pass the node's IP for remote actors.
        """
        tables = tuple(sorted(getattr(server, "rlplat_tables", ())))
        return cls(address=f"{host}:{server.port}", tables=tables)


def make_server(tables: Sequence[reverb.Table], port: Optional[int] = None,
                checkpointer=None) -> reverb.Server:
    """Starts a Reverb server hosting ``tables`` (listening on all interfaces).

    Args:
      tables: Tables to serve.
      port: Port to listen on; None picks a free one.
      checkpointer: a Reverb checkpointer (``replay.checkpoints.make_checkpointer``);
        the server loads its checkpoint, if it names one, before it starts.

    Returns:
      The running ``reverb.Server``; keep a reference, it stops when collected.
    """
    names = tuple(t.name for t in tables)
    # Picking the port here (rather than letting Reverb do it) makes the chosen
    # port explicit in the error message if binding races with another process.
    port = portpicker.pick_unused_port() if port is None else port
    try:
        server = reverb.Server(tables=list(tables), port=port, checkpointer=checkpointer)
    except RuntimeError as e:
        if checkpointer is not None:  # loading the checkpoint is the likelier failure
            raise RuntimeError(f"could not start replay server from its checkpoint ({e})") from e
        raise RuntimeError(
            f"could not start replay server on port {port} ({e}); "
            f"pass port=None to pick a free one"
        ) from e
    server.rlplat_tables = names  # For ReplayHandle.from_server.
    return server


def wait_for_server(address: str, timeout_s: float = 30.0) -> Tuple[str, ...]:
    """Blocks until the server at ``address`` answers; returns its table names.

    Args:
      address: ``host:port`` of the server.
      timeout_s: How long to wait in total (1 s resolution; Reverb's
        ``server_info`` only takes whole seconds).

    Raises:
      ReplayTimeoutError: If the server did not answer within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        # gRPC waits for the channel to become ready until the deadline, so a
        # server that comes up mid-call is picked up; retry in short slices so a
        # transient connection error does not consume the whole budget.
        remaining = deadline - time.monotonic()
        infos = errors.probe_server(address, min(max(remaining, 0.0), 5.0))
        if infos is not None:
            return tuple(sorted(infos))
        if time.monotonic() >= deadline:
            raise errors.server_unreachable(address, timeout_s)
        time.sleep(0.05)
