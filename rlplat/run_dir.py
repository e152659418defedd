"""The run directory: its layout, its one writer, its checkpoint list and its records.

Every other module asks this one where a run keeps a thing; none spells a
subfolder or file name of its own. Nothing here imports TensorFlow, Ray or
an agent, so the command line can use it before either starts.

Layout of a run directory::

    config.json          the config (what to diff between runs)
    run_info.json        config, versions, git SHA, agent, host and PID, timings
    metrics.jsonl        every role's metrics, one JSON object a line
    tb/<role>/           TensorBoard events
    checkpoints/         ckpt-<learner step>.{index,data-*}, the state file
                         ``checkpoint`` and counters.json
    replay_checkpoints/  ckpt-<learner step>/ (with --replay-checkpoint)
    .rlplat.lock         held (flock) by the one process that writes the run

The state file is the truth about checkpoints: a checkpoint exists for a
reader when the state file names it and its index file is there. A file left
by a writer that died before it updated the state file is an orphan, never
the newest checkpoint.

Durability: ``write_json`` and ``fsync_files`` flush a file and its folder
before (and after) the rename that publishes it, so a crash or a power cut
leaves either the old or the new file, never a torn one under the final name.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import zlib
from typing import Any, Dict, Iterable, List, Optional

CONFIG = "config.json"
RUN_INFO = "run_info.json"
METRICS = "metrics.jsonl"
TENSORBOARD = "tb"
VIDEOS = "videos"
CHECKPOINTS = "checkpoints"
REPLAY_CHECKPOINTS = "replay_checkpoints"
COUNTERS = "counters.json"  # inside CHECKPOINTS
STATE_FILE = "checkpoint"   # inside CHECKPOINTS: the name TensorFlow's readers expect
CHECKPOINT_PREFIX = "ckpt"
LOCK = ".rlplat.lock"
MANIFEST_SUFFIX = ".manifest.json"  # ckpt-<step>.manifest.json: sizes and CRC32s of its files
# What a run writes into its directory; any of them means "a run was here".
RUN_ENTRIES = (CHECKPOINTS, REPLAY_CHECKPOINTS, METRICS, TENSORBOARD, CONFIG, RUN_INFO)

_STEP_RE = re.compile(rf"{CHECKPOINT_PREFIX}-(\d+)$")
_STATE_LINE = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths):\s*"(.*)"\s*$')


class RunDirError(ValueError):
    """A run directory that cannot be used as asked; the message is one line naming the fix."""


class RunDirLocked(RunDirError):
    """Another live process writes this run directory."""

    def __init__(self, message: str, pid: Optional[int]):
        super().__init__(message)
        self.pid = pid


# ------------------------------------------------------------------ paths
def checkpoints_dir(logdir: str) -> str:
    return os.path.join(logdir, CHECKPOINTS)


def replay_checkpoints_dir(logdir: str) -> str:
    return os.path.join(logdir, REPLAY_CHECKPOINTS)


def metrics_path(logdir: str) -> str:
    return os.path.join(logdir, METRICS)


def tensorboard_dir(logdir: str) -> str:
    return os.path.join(logdir, TENSORBOARD)


def videos_dir(logdir: str) -> str:
    """Where evaluation videos go (``--video-every``)."""
    return os.path.join(logdir, VIDEOS)


def config_path(logdir: str) -> str:
    return os.path.join(logdir, CONFIG)


def run_info_path(logdir: str) -> str:
    return os.path.join(logdir, RUN_INFO)


def counters_path(logdir: str) -> str:
    return os.path.join(logdir, CHECKPOINTS, COUNTERS)


def checkpoint_prefix(logdir: str, step: int) -> str:
    """``<logdir>/checkpoints/ckpt-<step>``: what TensorFlow writes and restores."""
    return os.path.join(logdir, CHECKPOINTS, f"{CHECKPOINT_PREFIX}-{int(step)}")


def step_of(path: str) -> int:
    """The step of a ``.../ckpt-<step>`` checkpoint path."""
    match = _STEP_RE.search(path)
    if match is None:
        raise ValueError(f"{path!r} is not an rlplat checkpoint (ckpt-<step>)")
    return int(match.group(1))


# ------------------------------------------------------------------ checkpoints
def read_state(directory: str) -> Optional[List[str]]:
    """The checkpoint prefixes the state file in ``directory`` names, oldest first, newest last.

    None when there is no readable state file. Relative names are taken
    relative to ``directory``, as TensorFlow does.
    """
    try:
        with open(os.path.join(directory, STATE_FILE), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    newest, listed = None, []
    for line in lines:
        match = _STATE_LINE.match(line.strip())
        if not match or not match.group(2):
            continue
        path = match.group(2)
        path = path if os.path.isabs(path) else os.path.join(directory, path)
        if match.group(1) == "model_checkpoint_path":
            newest = path
        elif path not in listed:
            listed.append(path)
    if newest is None:
        return None
    if newest in listed:
        listed.remove(newest)
    return listed + [newest]


def write_state(directory: str, prefixes: Iterable[str]) -> None:
    """Atomically names ``prefixes`` (oldest first; the last is the newest) in the state file."""
    names = [os.path.basename(p) for p in prefixes]
    if not names:
        raise ValueError("the state file must name at least one checkpoint")
    text = f'model_checkpoint_path: "{names[-1]}"\n' + "".join(
        f'all_model_checkpoint_paths: "{name}"\n' for name in names)
    write_text(os.path.join(directory, STATE_FILE), text)


def file_digest(path: str) -> tuple:
    """``(size, crc32)`` of a file's bytes."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            crc, size = zlib.crc32(block, crc), size + len(block)
    return size, crc


def write_manifest(manifest: str, root: str, files: Iterable[str]) -> None:
    """Records the size and CRC32 of each file (named relative to ``root``) in ``manifest`` (flushed)."""
    entries = {}
    for path in files:
        size, crc = file_digest(path)
        entries[os.path.relpath(path, root)] = {"size": size, "crc32": crc}
    write_json(manifest, {"files": entries})


def manifest_matches(manifest: str, root: str, present: Optional[Iterable[str]] = None) -> Optional[bool]:
    """Whether the files ``manifest`` lists (relative to ``root``) still have their sizes and CRC32s.

    None when there is no manifest (written before manifests existed). With
    ``present`` (the files now there), the two lists must also be the same.
    """
    try:
        with open(manifest, encoding="utf-8") as f:
            entries = json.load(f)["files"]
        if not isinstance(entries, dict):
            return False
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if present is not None and set(entries) != {os.path.relpath(p, root) for p in present}:
        return False
    for name, want in entries.items():
        try:
            if file_digest(os.path.join(root, name)) != (want.get("size"), want.get("crc32")):
                return False
        except (OSError, AttributeError):
            return False
    return True


def checkpoint_intact(prefix: str) -> bool:
    """Whether ``prefix``'s files match its manifest (no manifest: its index file exists)."""
    if not os.path.isfile(prefix + ".index"):
        return False
    # No manifest: written before manifests existed; TensorFlow's read is the only check.
    return manifest_matches(prefix + MANIFEST_SUFFIX, os.path.dirname(prefix)) is not False


def verified_steps(directory: str, verify: bool = True) -> List[int]:
    """Steps of the checkpoints in ``directory`` that the state file names, oldest first.

    Only those whose index file exists and, with ``verify``, whose files
    match their manifest.
    """
    steps: List[int] = []
    for prefix in read_state(directory) or []:
        try:
            step = step_of(prefix)
        except ValueError:
            continue
        ok = checkpoint_intact(prefix) if verify else os.path.isfile(prefix + ".index")
        if ok and step not in steps:
            steps.append(step)
    return steps


def checkpoint_steps(logdir: str, verify: bool = True) -> List[int]:
    """``verified_steps`` of the run's checkpoints folder."""
    return verified_steps(checkpoints_dir(logdir), verify)


def damaged_steps(logdir: str) -> List[int]:
    """Steps the state file names whose files are missing or fail their manifest."""
    good = set(checkpoint_steps(logdir))
    named = []
    for prefix in read_state(checkpoints_dir(logdir)) or []:
        try:
            named.append(step_of(prefix))
        except ValueError:
            continue
    return [s for s in named if s not in good]


def latest_step(logdir: str, verify: bool = True) -> Optional[int]:
    """The newest checkpoint's learner step (through the state file; ``verify``: intact), or None."""
    steps = checkpoint_steps(logdir, verify)
    return steps[-1] if steps else None


def start_step(logdir: str, resume: bool) -> Optional[int]:
    """The learner step a run in ``logdir`` restores: the newest intact checkpoint, or None for a new run.

    Raises:
      RunDirError: ``resume`` and no intact checkpoint; not ``resume`` and
        ``logdir`` already holds one (a new run must not overwrite it).
    """
    if not resume:
        if latest_step(logdir, verify=False) is not None:
            raise RunDirError(f"{logdir} already holds a run with checkpoints; resume it, or start the "
                              "new run in another directory")
        return None
    step = latest_step(logdir)
    if step is None and latest_step(logdir, verify=False) is None:
        raise RunDirError(f"found no checkpoint in {checkpoints_dir(logdir)}, so no intact checkpoint to "
                          "resume; check the run directory, or start a new run in another one")
    if step is None:
        raise RunDirError(f"found no intact checkpoint in {checkpoints_dir(logdir)}: every one is damaged "
                          "(its files do not match their manifest); restore them from a backup, or start a "
                          "new run in another directory")
    return step


def default_name(kind: str) -> str:
    """``runs/<kind>-<timestamp>``, with ``-2``, ``-3``, ... when a run of the same second has it."""
    import datetime  # pylint: disable=g-import-not-at-top

    base = os.path.join("runs", f"{kind}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    path, n = base, 1
    while os.path.lexists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def holds_run(logdir: str) -> List[str]:
    """The entries of ``logdir`` that show a run was there (empty for a fresh directory)."""
    return [name for name in RUN_ENTRIES if os.path.lexists(os.path.join(logdir, name))]


# ------------------------------------------------------------------ durable files
def fsync_dir(directory: str) -> None:
    """Flushes ``directory``'s entries (renames, new files) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(paths: Iterable[str]) -> None:
    """Flushes each file's data, then each folder holding them, to disk."""
    folders = set()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folders.add(os.path.dirname(os.path.abspath(path)))
    for folder in sorted(folders):
        fsync_dir(folder)


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` durably: temp file, fsync, rename, fsync of the folder."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(folder)


def write_json(path: str, value: Any) -> None:
    """``write_text`` of ``value`` as indented JSON."""
    write_text(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def read_json_object(path: str, what: str) -> Dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
      FileNotFoundError: no such file.
      RunDirError: unreadable, not JSON, or not an object (one line naming ``what`` and the fix).
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e).split("\n")[0] or type(e).__name__
        raise RunDirError(f"{what} {path} is damaged ({reason}); restore it from a backup, "
                          "or start a new run in another directory") from None
    if not isinstance(value, dict):
        raise RunDirError(f"{what} {path} holds {type(value).__name__}, not a JSON object; restore it "
                          "from a backup, or start a new run in another directory")
    return value


def check_run_files(logdir: str) -> None:
    """Refuses a run whose records are damaged: config.json, run_info.json, counters.json.

    A missing file is not damage (an older or unfinished run); a present one
    must be a JSON object, and the counters table must map steps to counts.

    Raises:
      RunDirError: one line naming the damaged file and the fix.
    """
    if not os.path.isdir(logdir):
        return  # not a run directory at all: the caller says so in its own words
    for path, what in ((config_path(logdir), "run config"), (run_info_path(logdir), "run record")):
        try:
            read_json_object(path, what)
        except FileNotFoundError:
            pass
    read_counters(logdir)


def read_counters(logdir: str) -> Dict[str, Dict[str, Any]]:
    """The counters table, learner step -> counts ({} when there is none).

    Raises:
      RunDirError: the file exists but is damaged (not JSON, not an object
        of step -> object with integer counts).
    """
    path = counters_path(logdir)
    try:
        table = read_json_object(path, "counters file")
    except FileNotFoundError:
        return {}
    for key, entry in table.items():
        if not key.isdigit() or not isinstance(entry, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in entry.values()):
            raise RunDirError(f"counters file {path} is damaged (entry {key!r} is not step -> counts); "
                              "restore it from a backup, or start a new run in another directory")
    return table


def update_run_info(logdir: str, fields: Dict[str, Any]) -> None:
    """Adds ``fields`` to ``run_info.json`` (best effort: a missing or damaged record is left as it is)."""
    path = run_info_path(logdir)
    try:
        record = read_json_object(path, "run record")
        record.update(fields)
        write_json(path, record)
    except (OSError, RunDirError):
        pass  # what would be added was printed; a record must not stop the run


def record_agent(logdir: str, agent: str) -> None:
    """Writes the run's agent into ``run_info.json`` (made if missing): ``--resume``, eval and status read it."""
    path = run_info_path(logdir)
    try:
        record = read_json_object(path, "run record")
    except (OSError, RunDirError):
        record = {}
    record["agent"] = agent
    write_json(path, record)


def recorded_agent(logdir: str) -> Dict[str, Any]:
    """What ``run_info.json`` says about the run's agent: its ``agent`` and ``builder`` ({} when unreadable)."""
    try:
        record = read_json_object(run_info_path(logdir), "run record")
    except (OSError, RunDirError):
        return {}
    return {key: record[key] for key in ("agent", "builder") if key in record}


# ------------------------------------------------------------------ one writer
class RunLock:
    """An exclusive ``flock`` on the run directory, held by the one process that writes the run.

    The kernel drops the lock when its holder exits, however it exits, so a
    killed run never leaves a stale lock. The holder's PID is written into
    the lock file so that a refused second writer can name it.
    """

    def __init__(self, logdir: str):
        self.logdir = logdir
        self.path = os.path.join(logdir, LOCK)
        self._fd: Optional[int] = None

    def acquire(self) -> "RunLock":
        """Takes the lock without waiting.

        Raises:
          RunDirLocked: another process holds it (the message names its PID).
        """
        if self._fd is not None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            pid = lock_holder_pid(self.logdir)
            who = f"process {pid}" if pid else "another process"
            raise RunDirLocked(f"{self.logdir} is in use by {who}, which is still writing this run; "
                               "wait for it to end (or stop it), or choose another directory", pid) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Drops the lock (idempotent)."""
        if self._fd is None:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def lock_holder_pid(logdir: str) -> Optional[int]:
    """The PID written by the lock's holder, or None (no lock file, or not a number)."""
    try:
        with open(os.path.join(logdir, LOCK), encoding="utf-8") as f:
            return int(f.read().strip() or "x")
    except (OSError, ValueError):
        return None


def is_locked(logdir: str) -> bool:
    """Whether a live process holds the run's lock (a probe that takes and drops it)."""
    path = os.path.join(logdir, LOCK)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def check_not_locked(logdir: str) -> None:
    """Refuses a run directory that a live process writes (before anything starts).

    Raises:
      RunDirLocked: one line naming the holder's PID.
    """
    if os.path.isdir(logdir) and is_locked(logdir):
        pid = lock_holder_pid(logdir)
        who = f"process {pid}" if pid else "another process"
        raise RunDirLocked(f"{logdir} is in use by {who}, which is still writing this run; wait for "
                           "it to end (or stop it), or choose another directory", pid)
