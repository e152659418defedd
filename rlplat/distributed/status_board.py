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
from typing import Any, Dict, List

from ray.experimental import internal_kv

NAMESPACE = "rlplat_status"
PUBLISH_PERIOD_S = 10.0


def publish(status: Dict[str, Any]) -> None:
    """Stores ``status`` (a ``run_status.read_status`` dict) under its logdir, stamped with now."""
    record = {**status, "published": time.time()}
    internal_kv._internal_kv_put(status["logdir"], json.dumps(record, default=str),  # pylint: disable=protected-access
                                 overwrite=True, namespace=NAMESPACE)


def read_all() -> List[Dict[str, Any]]:
    """Every run's latest snapshot on the connected cluster, newest first."""
    out = []
    for key in internal_kv._internal_kv_list("", namespace=NAMESPACE):  # pylint: disable=protected-access
        value = internal_kv._internal_kv_get(key, namespace=NAMESPACE)  # pylint: disable=protected-access
        if value:
            try:
                out.append(json.loads(value))
            except ValueError:
                continue
    return sorted(out, key=lambda s: s.get("published", 0.0), reverse=True)
