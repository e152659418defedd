"""Test-wide set-up: quiet TF, offscreen MuJoCo, and 4 logical CPU devices.

The logical devices must exist before TensorFlow starts, so they are set here
once for the whole session; tests pick 1, 2 or 4 of them.
"""

import fcntl
import gc
import os
import time
import weakref

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rlplat.utils import tf_setup  # noqa: E402

# TF starts here, after the variables above; as rlplat imports it (without pandas: about 0.4 s
# less in every pytest process, which each collect the whole suite).
tf_setup.import_tensorflow()

from rlplat.replication import configure_cpu_replicas  # noqa: E402

import scheduling  # noqa: E402  (tests/scheduling.py)

MAX_TEST_REPLICAS = 4
configure_cpu_replicas(MAX_TEST_REPLICAS)


_started_by_test_body = []  # weak references to the servers the running test's body started
_test_body_running = [False]
_outliving_fixtures_in_setup = [0]  # session/package fixtures being set up right now (nested)


def _stop_servers(refs) -> None:
    """Stops each still-alive server among the weak references ``refs`` (stopping twice is harmless)."""
    for ref in refs:
        server = ref()
        if server is not None:
            server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Stops the Reverb servers a test's body started (not its fixtures') as soon as the body ends.

    Why: ``_reverb_servers_end_with_their_module``; a server made in a test
    body serves that test alone, so its waits can end with the test instead
    of stalling a later test of the same module.
    """
    del item
    _started_by_test_body.clear()
    _test_body_running[0] = True
    try:
        yield
    finally:
        _test_body_running[0] = False
        _stop_servers(_started_by_test_body)
        _started_by_test_body.clear()


class _OutlivingFixtureSetups:
    """Marks the set-up of session and package fixtures: their Reverb servers must outlive the module.

    A plugin object registered in ``pytest_configure``, not a hook function
    of this conftest: pytest calls a conftest's hooks only for nodes under
    its folder, and a session fixture is set up for the session node, above
    ``tests/``; as a conftest hook this never saw the replay tests' shared
    server, which the module teardown then stopped.
    """

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        del request
        outlives = fixturedef.scope in ("session", "package")
        _outliving_fixtures_in_setup[0] += outlives
        try:
            yield
        finally:
            _outliving_fixtures_in_setup[0] -= outlives


def pytest_addoption(parser):
    parser.addoption("--write-module-seconds", metavar="PATH", default=None,
                     help="write each test module's seconds (set-up + call + tear-down) to PATH as JSON; "
                          "tests/module_seconds.json orders the modules under pytest-xdist (tests/scheduling.py)")


def pytest_configure(config):
    """Registers the session-fixture marker, and the module order and timing plugins (tests/scheduling.py)."""
    config.pluginmanager.register(_OutlivingFixtureSetups(), "rlplat-outliving-fixture-setups")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(scheduling.XdistScheduling(), "rlplat-module-scheduling")
    path = config.getoption("--write-module-seconds")
    if path and not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(scheduling.ModuleSeconds(path), "rlplat-module-seconds")


def pytest_collection_modifyitems(config, items):
    """Longest modules first (recorded seconds), so that no learning test starts last on an idle machine."""
    del config
    scheduling.order_by_recorded_seconds(items, scheduling.load_module_seconds())


@pytest.fixture(autouse=True, scope="module")
def _reverb_servers_end_with_their_module():
    """Stops every Reverb server a test module started in this process once the module is done.

    Except the servers of session- and package-scoped fixtures, which later
    modules share (stopping one failed a later module's test, depending on
    which module on that worker first asked for it).

    The module-end garbage collection frees the learners that tests left in
    reference cycles while their servers are still known to be done with.
    Freeing a learner's input iterator used to stall here for 36-108 s
    (four times in one run): gdb showed TensorFlow's iterator destructor
    joining a tf.data autotuning thread that had gone back to sleep for its
    whole period after missing the cancellation (see
    ``rlplat.replication.replicator._without_autotune``, which now switches
    autotuning off for the pipelines ``Replicator.distribute`` builds).
    """
    import reverb  # pylint: disable=g-import-not-at-top

    started = []
    original_init = reverb.Server.__init__

    def tracking_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if _outliving_fixtures_in_setup[0]:
            return  # a session fixture's server (e.g. tests/replay's): later modules still use it
        started.append(weakref.ref(self))
        if _test_body_running[0]:
            _started_by_test_body.append(started[-1])

    reverb.Server.__init__ = tracking_init
    try:
        yield
    finally:
        reverb.Server.__init__ = original_init
        _stop_servers(started)
        gc.collect()


LOOPBACK_CLUSTER_WAIT_S = 1200.0  # the longest a module waits for the other fake cluster to finish


@pytest.fixture(scope="module")
def loopback_cluster_turn(tmp_path_factory):
    """Holds the machine's one fake-cluster turn for a module that starts a cluster on loopback.

    Under pytest-xdist (``scripts/test.sh`` runs ``--dist loadscope``: each
    module on one worker), two such modules could otherwise start their
    fake clusters at once on different workers. The turn is an exclusive
    lock on a file all workers of this session share; waiting for it is
    bounded, then the test fails saying what held it.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, above each worker's own
    deadline = time.monotonic() + LOOPBACK_CLUSTER_WAIT_S
    with open(root / "loopback-cluster.lock", "a+") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test module held the loopback-cluster turn for over "
                                f"{LOOPBACK_CLUSTER_WAIT_S:.0f} s ({lock.name})")
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
