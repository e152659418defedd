"""Policy weights in shared memory, for actors on the learner's own machine.

A weight pull through Ray costs a round trip to the learner (about a
millisecond of CPU on each side on the project's 2-core machines), even when
the answer is "nothing newer". At a pull every 10 actor steps that is as much
CPU as the environment itself, and on a machine where the learner sets the
pace it is CPU taken from the learner. So the learner also publishes each new
version of its policy weights into one shared-memory block, and actors on the
same host read it directly: a check for a newer version is two integer reads,
and a new version is one copy of the weights. Actors on other hosts, and any
reader that cannot attach, keep pulling through Ray.

Layout: a header of two int64 (a sequence number, then the version), then the
arrays back to back. The writer makes the sequence odd, writes the arrays and
the version, and makes it even again (a seqlock); a reader copies the version
and the arrays between two reads of the sequence and keeps the copy only when
both reads are the same even number, so it never acts on a half-written
version. The writer never waits for readers.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import time
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

_HEADER_BYTES = 16  # int64 sequence, int64 version


def _layout(arrays: Sequence[np.ndarray]) -> List[Tuple[Tuple[int, ...], str, int]]:
    """(shape, dtype, byte offset) of each array after the header, 8-byte aligned."""
    out, offset = [], _HEADER_BYTES
    for a in arrays:
        a = np.asarray(a)
        out.append((tuple(a.shape), a.dtype.str, offset))
        offset += (a.nbytes + 7) // 8 * 8
    return out


def _size(layout) -> int:
    shape, dtype, offset = layout[-1]
    return offset + (int(np.prod(shape)) * np.dtype(dtype).itemsize + 7) // 8 * 8


_PREFIX = "rlplat_w_"


def remove_stale_blocks(directory: str = "/dev/shm") -> List[str]:
    """Removes the blocks of learners that died without removing theirs (killed, crashed).

    A block is named after its learner's process id; one whose process is gone
    is stale. Returns the names removed.
    """
    removed = []
    try:
        names = [n for n in os.listdir(directory) if n.startswith(_PREFIX)]
    except OSError:
        return removed
    for name in names:
        try:
            pid = int(name[len(_PREFIX):].split("_", 1)[0])
        except ValueError:
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or not ours to signal): leave it
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def check_room(size: int, directory: str = "/dev/shm") -> None:
    """Refuses a block larger than the free space of ``directory`` (the tmpfs behind shared memory).

    The block is a sparse file: creating it succeeds whatever its size, and
    the first write past the free space kills the writer with SIGBUS. So the
    room is checked before, with ``statvfs``.

    Raises:
      OSError(ENOSPC): not enough room; the message gives both sizes.
    """
    try:
        stat = os.statvfs(directory)
    except OSError:
        return  # no such mount to measure: let the creation itself decide
    free = stat.f_bavail * stat.f_frsize
    if size > free:
        raise OSError(errno.ENOSPC, f"{size / 2**20:.1f} MiB of weights do not fit in the "
                                    f"{free / 2**20:.1f} MiB free in {directory}")


class SharedWeightsWriter:
    """The learner's side: one block, rewritten in place for every published version.

    Args:
      arrays: the served arrays (their shapes and dtypes fix the layout).
    """

    def __init__(self, arrays: Sequence[np.ndarray], directory: str = "/dev/shm"):
        remove_stale_blocks()
        self._layout = _layout(arrays)
        size = _size(self._layout)
        check_room(size, directory)
        name = f"{_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        self._header = np.ndarray((2,), np.int64, self._shm.buf, 0)
        self._header[:] = (0, -1)
        self._views = [np.ndarray(shape, dtype, self._shm.buf, offset) for shape, dtype, offset in self._layout]
        self.version = -1

    @property
    def name(self) -> str:
        return self._shm.name

    def info(self) -> Dict[str, Any]:
        """What a reader needs: the block's name, the host it lives on, and the layout."""
        return {"name": self._shm.name, "host": socket.gethostname(), "layout": self._layout}

    def publish(self, version: int, arrays: Sequence[np.ndarray]) -> None:
        """Writes ``arrays`` as ``version`` (no-op when that version is already there)."""
        if version == self.version:
            return
        header = self._header
        header[0] += 1  # odd: a write is in progress
        for view, a in zip(self._views, arrays):
            view[...] = a
        header[1] = version
        header[0] += 1  # even: consistent again
        self.version = int(version)

    def close(self) -> None:
        """Removes the block (readers that hold it keep their mapping until they close)."""
        views, self._views, self._header = self._views, [], None
        del views
        try:
            self._shm.close()
            self._shm.unlink()
        except (FileNotFoundError, BufferError):
            pass


class SharedWeightsReader:
    """An actor's side: attaches to the learner's block when it is on the same host."""

    def __init__(self, shm: shared_memory.SharedMemory, layout):
        self._shm = shm
        self._header = np.ndarray((2,), np.int64, shm.buf, 0)
        self._views = [np.ndarray(shape, dtype, shm.buf, offset) for shape, dtype, offset in layout]
        self.torn_reads = 0  # reads retried because a write overlapped them

    @classmethod
    def attach(cls, info: Optional[Dict[str, Any]]) -> Optional["SharedWeightsReader"]:
        """The reader, or None when the block is on another host or gone."""
        if not info or info.get("host") != socket.gethostname():
            return None
        try:
            shm = shared_memory.SharedMemory(name=info["name"])
        except (FileNotFoundError, OSError):
            return None
        # Python 3.11 registers an attached block with this process's resource
        # tracker, which would unlink the learner's block when this actor exits.
        try:
            resource_tracker.unregister(shm._name, "shared_memory")  # pylint: disable=protected-access
        except Exception:  # pylint: disable=broad-except
            pass
        return cls(shm, [tuple(x) for x in info["layout"]])

    def version(self) -> int:
        """The newest published version (-1 before the first)."""
        return int(self._header[1])

    def read_if_newer(self, held_version: int, max_tries: int = 1000) -> Optional[Tuple[int, List[np.ndarray]]]:
        """(version, copies of the arrays) when newer than ``held_version``, else None.

        Raises:
          TimeoutError: every one of ``max_tries`` reads overlapped a write
            (the caller falls back to pulling through Ray).
        """
        header = self._header
        for _ in range(max_tries):
            seq = int(header[0])
            if seq % 2:
                self.torn_reads += 1
                time.sleep(0)
                continue
            version = int(header[1])
            if version <= held_version:
                return None
            arrays = [np.array(v) for v in self._views]
            if int(header[0]) == seq:
                return version, arrays
            self.torn_reads += 1
        raise TimeoutError(f"shared weights: {max_tries} reads overlapped a write")

    def close(self) -> None:
        views, self._views, self._header = self._views, [], None
        del views
        try:
            self._shm.close()
        except BufferError:
            pass
