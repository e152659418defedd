"""Shared-memory policy weights: versions, torn writes never read, cleanup, and a real run's actors."""

import multiprocessing as mp
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from rlplat.distributed.shared_weights import SharedWeightsReader, SharedWeightsWriter

SHAPES = [(5, 64), (64,), (64, 1)]


def _arrays(value):
    return [np.full(shape, value, np.float32) for shape in SHAPES]


def test_a_reader_gets_each_new_version_once_and_copies_it():
    writer = SharedWeightsWriter(_arrays(0))
    try:
        reader = SharedWeightsReader.attach(writer.info())
        assert reader is not None and reader.version() == -1
        assert reader.read_if_newer(-1) is None  # nothing published yet
        writer.publish(3, _arrays(3.0))
        version, arrays = reader.read_if_newer(-1)
        assert version == 3 and [a.shape for a in arrays] == SHAPES
        assert all(np.all(a == 3.0) for a in arrays)
        assert reader.read_if_newer(3) is None
        writer.publish(4, _arrays(4.0))
        assert np.all(arrays[0] == 3.0)  # a copy: the next version does not change it
        assert reader.read_if_newer(3)[0] == 4
        reader.close()
    finally:
        writer.close()


def test_other_hosts_and_removed_blocks_fall_back_to_ray():
    writer = SharedWeightsWriter(_arrays(0))
    info = writer.info()
    assert SharedWeightsReader.attach(dict(info, host=socket.gethostname() + "-elsewhere")) is None
    assert SharedWeightsReader.attach(None) is None
    writer.close()
    assert SharedWeightsReader.attach(info) is None  # unlinked


def _write_forever(queue, stop):
    writer = SharedWeightsWriter(_arrays(0))
    queue.put(writer.info())
    version = 0
    while not stop.is_set():
        version += 1
        writer.publish(version, _arrays(float(version)))
    writer.close()


def _attach_and_exit(info):
    reader = SharedWeightsReader.attach(info)
    assert reader is not None and reader.version() >= 0


def test_reads_racing_a_writer_in_another_process_are_never_torn():
    ctx = mp.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_write_forever, args=(queue, stop), daemon=True)
    child.start()
    try:
        info = queue.get(timeout=60)
        reader = SharedWeightsReader.attach(info)
        assert reader is not None
        held, seen = -1, 0
        while seen < 300:
            got = reader.read_if_newer(held)
            if got is None:
                continue
            version, arrays = got
            # Every element of every array was written for this very version.
            assert all(np.all(a == float(version)) for a in arrays), version
            assert version > held
            held, seen = version, seen + 1
        # A reader process that exits does not remove the learner's block.
        other = ctx.Process(target=_attach_and_exit, args=(info,))
        other.start()
        other.join(60)
        assert other.exitcode == 0
        assert reader.read_if_newer(-1) is not None
        reader.close()
    finally:
        stop.set()
        child.join(60)
    assert SharedWeightsReader.attach(info) is None  # the writer removed it on close


def test_blocks_of_dead_learners_are_removed_and_live_ones_kept(tmp_path):
    from rlplat.distributed import shared_weights

    ctx = mp.get_context("spawn")
    dead = ctx.Process(target=int)
    dead.start()
    dead.join(30)
    (tmp_path / f"rlplat_w_{dead.pid}_abcd").write_bytes(b"x")
    (tmp_path / f"rlplat_w_{1}_live").write_bytes(b"x")  # pid 1 is alive
    (tmp_path / "other_block").write_bytes(b"x")
    assert shared_weights.remove_stale_blocks(str(tmp_path)) == [f"rlplat_w_{dead.pid}_abcd"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other_block", "rlplat_w_1_live"]


_FILL_SMALL_SHM = """
import numpy as np
from rlplat.distributed import shared_weights
arrays = [np.ones((1024, 1024), np.float32)]  # 4 MiB into a 1 MiB /dev/shm
try:
    writer = shared_weights.SharedWeightsWriter(arrays)
except OSError as e:
    print("refused:", e)
else:
    writer.publish(1, arrays)  # without the check: SIGBUS on the first page past the room
    print("published")
"""


def test_weights_larger_than_free_shared_memory_are_refused_not_a_sigbus():
    if os.geteuid() != 0:
        pytest.skip("mounting a small /dev/shm needs root")
    # A private mount namespace with a 1 MiB /dev/shm, like a container's small default.
    script = 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" -c "$1"'
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                          sys.executable, _FILL_SMALL_SHM],
                         capture_output=True, text=True, timeout=120)
    if "mount" in out.stderr and out.returncode != 0 and "refused" not in out.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()[-200:]}")
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "4.0 MiB of weights do not fit in the 1.0 MiB free in /dev/shm" in out.stdout, out.stdout
