"""Checks of a training command's run directory, made before TensorFlow or Ray start.

Every check raises ``common.UsageError`` (one line naming the fix) and reads
the file system only: nothing here imports TensorFlow, Ray or an agent, so a
bad ``--logdir`` or ``--resume`` is refused in well under a second, before
any run directory is created or touched.

- ``check_logdir``: ``--logdir`` is a directory or can be created; a new run
  never lands in a directory that already holds a run (checkpoints, or only
  logs: ``metrics.jsonl``, ``tb/``, ``config.json``); ``--resume`` needs a
  checkpoint.
- ``check_resume``: ``--resume`` continues the same agent, environment and
  network shape as the run's ``config.json`` says (anything else fails late,
  when the checkpoint does not fit, or silently trains another task).
- ``stored_replay_checkpoint`` / ``check_replay_resume``: a resumed run keeps
  its ``--replay-checkpoint`` setting, and restoring replay refuses flags that
  would change the restored tables (Reverb keeps the saved settings, so the
  new values would be ignored without a word).
- ``make_logdir`` / ``remove_if_empty``: the command creates the run
  directory once every check passed, and removes it again if the run stops
  before writing anything into it (no empty run directories left behind).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from rlplat import run_dir
from rlplat import agent_spec
from rlplat.launch.common import UsageError
# Builder class names in run_info.json -> agent (the `rlplat train` sub-command).
# ------------------------------------------------------------------ logdir
def check_logdir(logdir: str, resume: bool) -> None:
    """Refuses a ``--logdir`` the run could not use, or one it would damage.

    Raises:
      UsageError: ``logdir`` is a file or cannot be created; a live process
        writes it; ``resume`` and there is no checkpoint; not ``resume`` and
        a run is already there.
    """
    if os.path.lexists(logdir) and not os.path.isdir(logdir):
        raise UsageError(f"--logdir {logdir} is a file, not a directory; choose another --logdir")
    try:
        run_dir.check_not_locked(logdir)
    except run_dir.RunDirError as e:
        raise UsageError(f"--logdir: {e}") from None
    if resume:
        if not os.path.isdir(logdir):
            raise UsageError(f"--resume: no run directory {logdir!r}; check --logdir")
        try:
            run_dir.check_run_files(logdir)
        except run_dir.RunDirError as e:
            raise UsageError(f"--resume: {e}") from None
        try:
            run_dir.start_step(logdir, resume=True)  # the run directory's own rule
        except run_dir.RunDirError as e:
            raise UsageError(f"--resume {e} (--logdir)") from None
        _check_writable(logdir, logdir)
        return
    if os.path.isdir(logdir):
        try:
            run_dir.start_step(logdir, resume=False)
        except run_dir.RunDirError as e:
            raise UsageError(f"--logdir {e} (--resume)") from None
        found = run_dir.holds_run(logdir)
        if found:
            raise UsageError(f"{logdir} already holds a run's logs ({', '.join(found)}) but no "
                             "checkpoint to resume; choose a new --logdir (or delete that one)")
        _check_writable(logdir, logdir)
        return
    ancestor = _nearest_existing(logdir)
    if not os.path.isdir(ancestor):
        raise UsageError(f"cannot create --logdir {logdir}: {ancestor} is a file; "
                         "choose another --logdir")
    _check_writable(logdir, ancestor)


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _check_writable(logdir: str, directory: str) -> None:
    if not os.access(directory, os.W_OK | os.X_OK):
        what = "write to" if os.path.abspath(directory) == os.path.abspath(logdir) else "create"
        raise UsageError(f"cannot {what} --logdir {logdir}: no write permission in {directory}; "
                         "choose another --logdir")


def make_logdir(logdir: str) -> List[str]:
    """Creates ``logdir`` (and missing parents); returns the directories it created, outermost first.

    Raises:
      UsageError: the directory cannot be created (nothing is left behind).
    """
    missing = []
    path = os.path.abspath(logdir)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    created: List[str] = []
    try:
        for path in reversed(missing):
            os.mkdir(path)
            created.append(path)
    except OSError as e:
        remove_if_empty(created)
        raise UsageError(f"cannot create --logdir {logdir}: {e.strerror or e}; "
                         "choose another --logdir") from None
    return created


def remove_if_empty(created: Sequence[str]) -> None:
    """Removes the directories ``make_logdir`` created, innermost first, while they are empty."""
    for path in reversed(list(created)):
        try:
            if os.listdir(path) == [run_dir.LOCK]:  # the run took its lock but wrote nothing
                os.unlink(os.path.join(path, run_dir.LOCK))
            os.rmdir(path)  # fails (and stops) on anything not empty
        except OSError:
            return


# ------------------------------------------------------------------ resume
def run_agent(logdir: str) -> Optional[str]:
    """The agent that wrote the run in ``logdir``, as its ``run_info.json`` records it, or None."""
    return agent_spec.agent_of_record(run_dir.recorded_agent(logdir))


def check_resume(logdir: str, agent: str, new_config: Mapping[str, Any], shape_fields: Sequence[str],
                 env: Optional[str] = None) -> None:
    """Refuses ``--resume`` with another agent, environment or network shape than the run's.

    Args:
      logdir: the run directory (``check_logdir`` passed: it has a checkpoint).
      agent: the ``rlplat train`` sub-command resuming it.
      new_config: the new agent config as ``to_dict()`` gives it.
      shape_fields: config fields that decide the checkpoint's variables.
      env: the new ``--env`` (RL agents), compared with config.json's.

    Raises:
      UsageError: one line naming what to pass to continue the run.
    """
    path = run_dir.config_path(logdir)
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if not isinstance(stored, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        raise UsageError(f"--resume: {path} is missing, so the run's agent, environment and network "
                         "cannot be checked; resume a run that rlplat wrote, or choose a new --logdir") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"--resume: cannot read {path} ({e}); restore it from a backup, "
                         "or choose a new --logdir") from None
    stored_agent = run_agent(logdir)
    if stored_agent is None:
        raise UsageError(f"--resume: {run_dir.run_info_path(logdir)} does not say which agent wrote the run, "
                         "so it cannot be resumed safely; check --logdir, or start a new run in another "
                         "--logdir")
    if stored_agent != agent:
        raise UsageError(f"--resume: {logdir} holds a {stored_agent} run, not {agent}; continue it with "
                         f"`rlplat train {stored_agent} --resume --logdir {logdir}`, or start a new "
                         "run in another --logdir")
    fix = "or start a new run in another --logdir"
    if env is not None and stored.get("env") is not None and stored["env"] != env:
        raise UsageError(f"--resume: {logdir} was trained on --env {stored['env']}, not {env}; "
                         f"pass --env {stored['env']} to continue it, {fix}")
    old = stored.get("agent") if isinstance(stored.get("agent"), dict) else stored
    for name in shape_fields:
        if name not in old or name not in new_config:
            continue  # a run from before the field existed: nothing to compare with
        was, now = _normalise(old[name]), _normalise(new_config[name])
        if was != now:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"--resume: {logdir} was trained with {flag} {_show(was)}, not "
                             f"{_show(now)}, and its checkpoint fits only that network; pass "
                             f"{_flag_value(flag, was)} to continue it, {fix}")


def read_stored_config(logdir: str) -> Dict[str, Any]:
    """The run's config.json as a dict ({} when missing or damaged; ``check_resume`` refuses those)."""
    return _read_config(logdir)


def _read_config(logdir: str) -> Dict[str, Any]:
    try:
        with open(run_dir.config_path(logdir), encoding="utf-8") as f:
            stored = json.load(f)
        return stored if isinstance(stored, dict) else {}
    except (OSError, ValueError):
        return {}


def stored_replay_checkpoint(logdir: str) -> bool:
    """Whether the run in ``logdir`` checkpoints replay (its config.json's layout says)."""
    layout = _read_config(logdir).get("layout")
    return bool(layout.get("replay_checkpoint")) if isinstance(layout, dict) else False


def check_replay_resume(logdir: str, new_config: Mapping[str, Any], replay_fields: Sequence[str]) -> None:
    """Refuses ``--resume`` with a replay checkpoint and changed table settings (``replay_fields``).

    A restored Reverb table keeps the capacity and rate limiter it was saved
    with, whatever the builder asks for now.

    Raises:
      UsageError: one line naming the flag and the values to pass instead.
    """
    try:  # (rlplat.replay would import Reverb and TF: look at the names only)
        saved = any(n.startswith(run_dir.CHECKPOINT_PREFIX + "-")
                    for n in os.listdir(run_dir.replay_checkpoints_dir(logdir)))
    except OSError:
        saved = False
    if not saved:
        return  # nothing to restore: the new settings apply to the new, empty replay
    stored = _read_config(logdir)
    old = stored.get("agent") if isinstance(stored.get("agent"), dict) else stored
    for name in replay_fields:
        if name not in old or name not in new_config:
            continue
        was, now = _normalise(old[name]), _normalise(new_config[name])
        if was != now:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"--resume --replay-checkpoint: {logdir}'s replay was saved with {flag} "
                             f"{_show(was)}, and a restored table keeps its settings; pass "
                             f"{_flag_value(flag, was)} to continue it, or --no-replay-checkpoint "
                             f"to start with an empty replay and {flag} {_show(now)}")


def _normalise(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _flag_value(flag: str, value: Any) -> str:
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {_show(value)}"
