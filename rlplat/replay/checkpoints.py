"""Reverb checkpoints kept in step with the learner's (``--replay-checkpoint``).

Layout: ``<logdir>/replay_checkpoints/ckpt-<step>/`` holds Reverb's own files
(tables, items, chunks, ``DONE``) for the learner checkpoint
``<logdir>/checkpoints/ckpt-<step>``; directories whose learner checkpoint was
pruned are pruned too.

Reverb writes a checkpoint into a root directory of its own and keeps only the
newest one there, so ``save`` moves each one out under its learner step at
once. That root (``.reverb`` below) is scratch: it is emptied whenever a server
starts, because Reverb prefers whatever is newest in it over the checkpoint we
ask it to load, and a leftover there (a crash between writing and moving)
belongs to no learner step.

Restoring: a server built with ``make_checkpointer(logdir, path)`` loads
``path`` while it is constructed: items, chunks, and each table's rate
limiter with its counts and settings. The saved settings win over the tables
the builder passes, which is why ``--resume`` refuses flags that would change
them (``rlplat.launch.preflight.check_replay_resume``).
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Dict, Iterable, List, Optional

from rlplat import run_dir

_SCRATCH = ".reverb"
_STEP_RE = re.compile(r"^ckpt-(\d+)$")


def directory(logdir: str) -> str:
    """Where a run's replay checkpoints live."""
    return run_dir.replay_checkpoints_dir(logdir)


def _files(path: str) -> List[str]:
    return sorted(os.path.join(root, name) for root, _, names in os.walk(path) for name in names)


def saved_steps(logdir: str) -> List[int]:
    """Learner steps that have a complete replay checkpoint, oldest first.

    Complete: Reverb's ``DONE`` marker is there and every file matches the
    manifest written when it was saved (older checkpoints without one count
    on ``DONE`` alone).
    """
    root = directory(logdir)
    try:
        names = os.listdir(root)
    except OSError:
        return []
    steps = []
    for name in names:
        match = _STEP_RE.match(name)
        path = os.path.join(root, name)
        if match and os.path.isfile(os.path.join(path, "DONE")) and _intact(path):
            steps.append(int(match.group(1)))
    return sorted(steps)


def _intact(path: str) -> bool:
    return run_dir.manifest_matches(path + run_dir.MANIFEST_SUFFIX, path, present=_files(path)) is not False


def candidates(logdir: str, step: int) -> List[str]:
    """Complete replay checkpoints at or before learner step ``step``, newest first.

    An older one is still valid experience (as ``counters.load_counters``
    falls back to older counters): it exists when the learner checkpoint was
    saved but the replay one failed or was cut short.
    """
    steps = [s for s in saved_steps(logdir) if s <= int(step)]
    return [os.path.join(directory(logdir), f"ckpt-{s}") for s in reversed(steps)]


def find(logdir: str, step: int) -> Optional[str]:
    """The newest of ``candidates``; None: none."""
    found = candidates(logdir, step)
    return found[0] if found else None


def step_of(path: str) -> int:
    """The learner step of a ``.../ckpt-<step>`` replay checkpoint."""
    return int(_STEP_RE.match(os.path.basename(path.rstrip("/"))).group(1))


def make_checkpointer(logdir: str, restore_from: Optional[str] = None):
    """A Reverb checkpointer writing under ``logdir``; the server loads ``restore_from`` at start."""
    import reverb  # pylint: disable=g-import-not-at-top

    scratch = os.path.join(directory(logdir), _SCRATCH)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch, exist_ok=True)
    return reverb.checkpointers.DefaultCheckpointer(scratch, fallback_checkpoint_path=restore_from)


def table_stats(address: str, timeout_s: int = 30) -> Dict[str, int]:
    """``items``, ``inserts`` and ``samples`` (completed) over every table at ``address``."""
    import reverb  # pylint: disable=g-import-not-at-top

    infos = reverb.Client(address).server_info(timeout=timeout_s).values()
    return {"items": int(sum(i.current_size for i in infos)),
            "inserts": int(sum(i.rate_limiter_info.insert_stats.completed for i in infos)),
            "samples": int(sum(i.rate_limiter_info.sample_stats.completed for i in infos))}


def save(address: str, logdir: str, step: int, keep_steps: Iterable[int]) -> Dict[str, Any]:
    """Checkpoints the server at ``address`` as ``ckpt-<step>``; prunes steps not in ``keep_steps``.

    Returns ``replay_path`` and ``replay_items`` (the tables' size just
    before the checkpoint: exact when no actor inserts meanwhile, as for the
    final checkpoint, which is taken after the actors stopped).
    """
    import reverb  # pylint: disable=g-import-not-at-top

    items = table_stats(address)["items"]
    target = os.path.join(directory(logdir), f"ckpt-{int(step)}")
    if int(step) in saved_steps(logdir):  # saved already: never rewrite what a resume may load
        prune(logdir, set(int(s) for s in keep_steps) | {int(step)})
        return {"replay_path": target, "replay_items": items}
    written = reverb.Client(address).checkpoint()
    files = _files(written)
    run_dir.fsync_files(files)
    shutil.rmtree(target, ignore_errors=True)  # an incomplete one of this step, never loaded
    try:
        os.unlink(target + run_dir.MANIFEST_SUFFIX)
    except OSError:
        pass
    os.replace(written, target)
    run_dir.fsync_dir(directory(logdir))
    run_dir.write_manifest(target + run_dir.MANIFEST_SUFFIX, target, _files(target))
    prune(logdir, set(int(s) for s in keep_steps) | {int(step)})
    return {"replay_path": target, "replay_items": items}


def prune(logdir: str, keep_steps: Iterable[int]) -> None:
    """Deletes the replay checkpoints of learner steps not in ``keep_steps``."""
    keep = set(int(s) for s in keep_steps)
    root = directory(logdir)
    for name in os.listdir(root) if os.path.isdir(root) else ():
        match = _STEP_RE.match(name)
        if match and int(match.group(1)) not in keep:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        elif name.endswith(run_dir.MANIFEST_SUFFIX):
            owner = _STEP_RE.match(name[:-len(run_dir.MANIFEST_SUFFIX)])
            if owner and int(owner.group(1)) not in keep:
                os.unlink(os.path.join(root, name))


def saved_items(path: str) -> int:
    """Items stored in the replay checkpoint ``path``, read from its files (checks and tests).

    Reverb stores one ZLIB-compressed TFRecord per item in ``items.tfrecord``.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    records = tf.data.TFRecordDataset(os.path.join(path, "items.tfrecord"), compression_type="ZLIB")
    return int(records.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())
