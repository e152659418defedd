"""Checkpoints that survive a change of replica count, of worker count, and a crash at any moment.

``Checkpointer`` saves named trackables with ``tf.train.Checkpoint`` under
``<directory>/ckpt-<step>``, so the step comes back from the file name.
Checkpoints are portable: variables created under a strategy scope are saved
once (a mirrored variable as one value, a sync-on-read variable such as a
batch-norm moving mean as its cross-replica aggregate), so a checkpoint saved
under N replicas restores under M.

Crash consistency (the state file, ``rlplat.run_dir``, is what readers trust):

- a save writes ``ckpt-<step>``'s files, flushes them and their folder to
  disk, writes a manifest of their sizes and CRC32s, and only then names the
  checkpoint in the state file (an atomic, flushed rename); older checkpoints
  beyond ``max_to_keep`` are deleted after that;
- a save never rewrites a checkpoint the state file names: saving again at a
  step already saved (no learner step since) returns the saved one untouched;
- ``run_dir.verified_steps`` checks each named checkpoint against its manifest
  without TensorFlow, and a restore falls back through older checkpoints when
  the newest is unreadable, saying which it skipped.

Multi-worker rule: saving may run collectives (reading sync-on-read
variables), so EVERY worker calls ``save``; only the chief keeps the files.
A non-chief worker writes into a fresh temporary directory that is deleted
at once. Every worker restores from the chief's ``directory`` (a shared file
system or bucket).

Hyperparameters come from the run, state from the checkpoint: Keras
optimizers keep their learning rate in a variable that a checkpoint holds,
so a restore would bring back the saved rate. ``restore`` puts back the rate
each optimizer was built with (the run's config), so a resumed run, or a
population-based-training trial that copied another's checkpoint with a
mutated rate, learns at the rate it asked for; weights, slots and
``iterations`` come from the checkpoint.

Never a non-finite checkpoint: ``save`` first checks every floating-point
variable it would write and refuses (``FloatingPointError``, nothing written)
if one holds NaN or Inf, so the newest checkpoint is always one to go back to.
The learners' NaN guard (``rlplat.utils.nonfinite``) keeps weights finite in
the first place; this is the last line.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
from typing import List, Optional

import numpy as np
import tensorflow as tf

from rlplat import run_dir
from rlplat.run_dir import step_of  # noqa: F401  (one import for writers and readers)

_log = logging.getLogger(__name__)


class Checkpointer:
    """Saves and restores named trackables (models, optimizers, variables).

    Usage:
        ckpt = Checkpointer(logdir + "/checkpoints", is_chief=repl.is_chief,
                            model=model, optimizer=optimizer, step=step_var)
        start = ckpt.restore_latest() or 0      # or ckpt.restore(step) for a step chosen upstream
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
        self.max_to_keep = int(max_to_keep)
        self._checkpoint = tf.train.Checkpoint(**objects)
        self._optimizers = [o for o in objects.values() if isinstance(o, tf.keras.optimizers.Optimizer)]

    def _prefix(self, step: int) -> str:
        return os.path.join(self.directory, f"{run_dir.CHECKPOINT_PREFIX}-{int(step)}")

    def save(self, step: int) -> Optional[str]:
        """Saves at ``step``; returns the chief's checkpoint path (None on other workers).

        A step the state file already names is not written again: its path is returned.

        Raises:
          FloatingPointError: a variable holds NaN/Inf; nothing was written.
          OSError: the disk is full or not writable; the state file still
            names the previous checkpoints, which are untouched.
        """
        step = int(step)
        bad = first_nonfinite_variable(self._checkpoint)
        if bad is not None:
            raise FloatingPointError(
                f"refusing to save checkpoint {run_dir.CHECKPOINT_PREFIX}-{step}: variable {bad!r} holds "
                f"NaN/Inf; the newest checkpoint in {self.directory} is the last finite state")
        # Checkpoint.write (unlike save) does not create the save counter, which a
        # restore then expects: create it, as every checkpoint of ours holds one.
        _ = self._checkpoint.save_counter
        if not self.is_chief:
            scratch = tempfile.mkdtemp(prefix=f"rlplat-worker-ckpt-{step}-")
            try:
                self._checkpoint.write(os.path.join(scratch, f"{run_dir.CHECKPOINT_PREFIX}-{step}"))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return None
        prefix = self._prefix(step)
        named = run_dir.read_state(self.directory) or []
        if prefix in named and os.path.isfile(prefix + ".index"):
            return prefix
        os.makedirs(self.directory, exist_ok=True)
        try:
            self._checkpoint.write(prefix)
            files = sorted(glob.glob(glob.escape(prefix) + ".*"))
            files = [f for f in files if not f.endswith(run_dir.MANIFEST_SUFFIX)]
            run_dir.fsync_files(files)
            run_dir.write_manifest(prefix + run_dir.MANIFEST_SUFFIX, self.directory, files)
        except BaseException:
            _remove_checkpoint_files(prefix)  # never named: an orphan would only confuse readers
            raise
        kept = [p for p in named if p != prefix] + [prefix]
        run_dir.write_state(self.directory, kept[-self.max_to_keep:])
        for old in kept[:-self.max_to_keep]:
            _remove_checkpoint_files(old)
        return prefix

    @property
    def kept_steps(self) -> List[int]:
        """Steps of the checkpoints the state file names, oldest first ([] on a non-chief worker)."""
        if not self.is_chief:
            return []
        return [step_of(p) for p in run_dir.read_state(self.directory) or []
                if os.path.isfile(p + ".index")]

    @property
    def latest_path(self) -> Optional[str]:
        """The newest checkpoint the state file names, or None."""
        steps = run_dir.verified_steps(self.directory, verify=False)
        return self._prefix(steps[-1]) if steps else None

    def restore(self, step: int) -> int:
        """Restores the checkpoint at ``step`` exactly; returns ``step``.

        Raises:
          FileNotFoundError: no checkpoint at ``step``.
          AssertionError / ValueError / tf.errors.OpError: it does not match
            the objects (e.g. another network size) or cannot be read.
        """
        prefix = self._prefix(step)
        if not os.path.isfile(prefix + ".index"):
            raise FileNotFoundError(f"no checkpoint {prefix} (its .index file is missing)")
        rates = [(optimizer, _learning_rate(optimizer)) for optimizer in self._optimizers]
        self._checkpoint.restore(prefix).assert_existing_objects_matched()
        for optimizer, rate in rates:
            if rate is not None:
                optimizer.learning_rate = rate
        return int(step)

    def restore_latest(self) -> Optional[int]:
        """Restores the newest readable checkpoint; returns its step, or None if there is none.

        Checkpoints that fail their manifest or TensorFlow's read are skipped,
        newest first, with one warning naming them. A checkpoint that does
        not match the objects (another network size) raises: an older one
        would not match either.
        """
        named = run_dir.verified_steps(self.directory, verify=False)
        good = set(run_dir.verified_steps(self.directory))
        skipped = []
        for step in reversed(named):
            if step not in good:
                skipped.append(f"ckpt-{step} (fails its manifest)")
                continue
            try:
                self.restore(step)
            except (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.OutOfRangeError) as e:
                skipped.append(f"ckpt-{step} ({type(e).__name__})")
                continue
            if skipped:
                _log.warning("restored ckpt-%d; skipped newer unreadable checkpoint(s): %s",
                             step, ", ".join(skipped))
            return step
        if skipped:
            raise FileNotFoundError(f"every checkpoint in {self.directory} is unreadable: "
                                    f"{', '.join(skipped)}")
        return None


def _remove_checkpoint_files(prefix: str) -> None:
    for path in glob.glob(glob.escape(prefix) + ".*"):
        try:
            os.unlink(path)
        except OSError:
            pass


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


def _learning_rate(optimizer: tf.keras.optimizers.Optimizer) -> Optional[float]:
    """The rate ``optimizer`` was built with, when it is a plain number (not a schedule)."""
    rate = getattr(optimizer, "_learning_rate", None)
    if isinstance(rate, tf.Variable):
        return float(rate.numpy())
    return None
