"""Run status kept on the Ray cluster, so ``rlplat status --address`` works from any machine.

A run's logdir lives on its driver's machine; a researcher on a laptop can
reach the cluster but not that disk. So the driver publishes the same
snapshot ``rlplat status --logdir`` computes (``utils.run_status``) into the
cluster's key-value store (the GCS, which every token-authenticated client
can read), keyed by the run's absolute logdir, every ``PUBLISH_PERIOD_S``
and once more when the run ends. Entries stay after the run ends, until the
cluster goes down, so an ended run still answers.

Ray offers the store as ``ray.experimental.internal_kv`` (a developer API
that Ray's own libraries use); it is used here only, behind three functions.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, List, Optional

from ray.experimental import internal_kv

NAMESPACE = "rlplat_status"
PUBLISH_PERIOD_S = 10.0


def publish(status: Dict[str, Any]) -> None:
    """Stores ``status`` (a ``run_status.read_status`` dict) under its logdir, stamped with now."""
    record = {**status, "published": time.time()}
    internal_kv._internal_kv_put(status["logdir"], json.dumps(record, default=str),  # pylint: disable=protected-access
                                 overwrite=True, namespace=NAMESPACE)


def read_all(on_skip: Optional[Callable[[str], None]] = None) -> List[Dict[str, Any]]:
    """Every run's latest snapshot on the connected cluster, newest first.

    An entry that is not a snapshot (bad JSON, another shape, written by
    something else or cut short) is skipped, and ``on_skip`` gets one line
    naming its key: one bad entry must not hide every other run.
    """
    from rlplat.utils import run_status  # pylint: disable=g-import-not-at-top  (TF-free)

    out = []
    for key in internal_kv._internal_kv_list("", namespace=NAMESPACE):  # pylint: disable=protected-access
        value = internal_kv._internal_kv_get(key, namespace=NAMESPACE)  # pylint: disable=protected-access
        if not value:
            continue
        shown = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        try:
            snapshot = json.loads(value)
            if not isinstance(snapshot, dict) or not isinstance(snapshot.get("logdir"), str):
                raise ValueError("not a run snapshot")
            if not isinstance(snapshot.get("published"), (int, float)) or isinstance(snapshot["published"], bool):
                raise ValueError("no publication time")
            run_status.format_status(snapshot)  # every field the display reads is there
        except Exception as e:  # pylint: disable=broad-except  (any damage: skip this entry only)
            if on_skip is not None:
                reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
                on_skip(f"rlplat: warning: skipped the malformed status entry {shown[:200]!r} on the "
                        f"cluster ({reason})")
            continue
        out.append(snapshot)
    return sorted(out, key=lambda s: s["published"], reverse=True)
