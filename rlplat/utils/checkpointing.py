"""Checkpoints that survive a change of replica count and of worker count.

``Checkpointer`` wraps ``tf.train.Checkpoint`` and ``tf.train.CheckpointManager``.
Checkpoints are named ``ckpt-<step>`` so the step comes back from the file
name. They are portable: variables created under a strategy scope are saved
once (a mirrored variable as one value, a sync-on-read variable such as a
batch-norm moving mean as its cross-replica aggregate), so a checkpoint saved
under N replicas restores under M.

Multi-worker rule: saving may run collectives (reading sync-on-read
variables), so EVERY worker calls ``save``; only the chief keeps the files.
A non-chief worker writes into a fresh temporary directory that is deleted
at once. Every worker restores from the chief's ``directory`` (a shared file
system or bucket).

Never a non-finite checkpoint: ``save`` first checks every floating-point
variable it would write and refuses (``FloatingPointError``, nothing written)
if one holds NaN or Inf, so the newest checkpoint is always one to go back to.
The learners' NaN guard (``rlplat.utils.nonfinite``) keeps weights finite in
the first place; this is the last line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import List, Optional

import numpy as np
import tensorflow as tf

from rlplat.utils.checkpoint_files import PREFIX as _PREFIX
from rlplat.utils.checkpoint_files import step_of  # noqa: F401  (one import for writers and readers)


class Checkpointer:
    """Saves and restores named trackables (models, optimizers, variables).

    Usage:
        ckpt = Checkpointer(logdir + "/checkpoints", is_chief=repl.is_chief,
                            model=model, optimizer=optimizer, step=step_var)
        start = ckpt.restore_latest() or 0
        ...
        ckpt.save(step)

    Create the objects (under the strategy scope) before restoring; a
    restore then loads every value at once and fails loudly if the
    checkpoint does not match them.
    """

    def __init__(self, directory: str, *, is_chief: bool = True, max_to_keep: int = 3, **objects):
        if not objects:
            raise ValueError("Checkpointer needs at least one object to save, e.g. model=model")
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 (got {max_to_keep})")
        self.directory = directory
        self.is_chief = is_chief
        self._checkpoint = tf.train.Checkpoint(**objects)
        self._manager = None
        if is_chief:
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name=_PREFIX)

    def save(self, step: int) -> Optional[str]:
        """Saves at ``step``; returns the chief's checkpoint path (None on other workers).

        Raises:
          FloatingPointError: a variable holds NaN/Inf; nothing was written.
        """
        step = int(step)
        bad = first_nonfinite_variable(self._checkpoint)
        if bad is not None:
            raise FloatingPointError(
                f"refusing to save checkpoint {_PREFIX}-{step}: variable {bad!r} holds NaN/Inf; "
                f"the newest checkpoint in {self.directory} is the last finite state")
        if self._manager is not None:
            return self._manager.save(checkpoint_number=step)
        scratch = tempfile.mkdtemp(prefix=f"rlplat-worker-ckpt-{step}-")
        try:
            self._checkpoint.write(os.path.join(scratch, f"{_PREFIX}-{step}"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None

    @property
    def kept_steps(self) -> List[int]:
        """Steps of the checkpoints kept on disk, oldest first ([] on a non-chief worker)."""
        return [step_of(path) for path in self._manager.checkpoints] if self._manager else []

    @property
    def latest_path(self) -> Optional[str]:
        """The newest checkpoint in ``directory``, or None."""
        return tf.train.latest_checkpoint(self.directory)

    def restore_latest(self) -> Optional[int]:
        """Restores the newest checkpoint; returns its step, or None if there is none.

        Raises if the checkpoint does not hold a value for every object given
        to the constructor (e.g. a different network size).
        """
        path = self.latest_path
        if path is None:
            return None
        self._checkpoint.restore(path).assert_existing_objects_matched()
        return step_of(path)


def first_nonfinite_variable(root) -> Optional[str]:
    """The name of the first floating-point variable under ``root`` holding NaN/Inf, or None.

    ``root`` is any trackable (a ``tf.train.Checkpoint``, a model, ...); every
    variable a checkpoint of it would hold is read (on every worker alike,
    since reading a sync-on-read variable may run a collective, as saving does).
    """
    seen = set()
    for obj in tf.train.TrackableView(root).descendants():
        if not isinstance(obj, tf.Variable) or not obj.dtype.is_floating or id(obj) in seen:
            continue
        seen.add(id(obj))
        if not np.all(np.isfinite(obj.numpy())):
            return obj.name
    return None
