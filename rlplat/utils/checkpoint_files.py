"""Finding a run's checkpoints on disk, without TensorFlow.

The driver and the command-line checks need the newest checkpoint and its
step before (or without) TensorFlow starts; ``checkpointing`` writes them.
"""

from __future__ import annotations

import os
import re
from typing import Optional

PREFIX = "ckpt"
_STEP_RE = re.compile(rf"{PREFIX}-(\d+)$")


def latest_checkpoint(directory: str) -> Optional[str]:
    """The newest checkpoint prefix in ``directory``, as ``tf.train.latest_checkpoint`` finds it.

    Reads the ``checkpoint`` state file that ``tf.train.CheckpointManager``
    keeps, and requires the checkpoint's ``.index`` file.
    """
    try:
        with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    match = re.search(r'^model_checkpoint_path:\s*"(.*)"\s*$', text, re.MULTILINE)
    if not match or not match.group(1):
        return None
    path = match.group(1)
    if not os.path.isabs(path):
        path = os.path.join(directory, path)
    return path if os.path.isfile(path + ".index") else None


def step_of(path: str) -> int:
    """The step of a ``.../ckpt-<step>`` checkpoint path."""
    match = _STEP_RE.search(path)
    if match is None:
        raise ValueError(f"{path!r} is not a Checkpointer checkpoint (ckpt-<step>)")
    return int(match.group(1))
