"""Start-up milestones: seconds from launch, first mark wins, one line once all are known."""

import pytest

from rlplat.distributed import startup_times
from rlplat.distributed.startup_times import StartupTimes


def test_milestones_count_from_launch_and_the_first_mark_stands():
    times = StartupTimes(launched=1000.0)
    times.mark("ray_up", 1002.5)
    times.mark("ray_up", 1009.0)  # a later report of the same milestone changes nothing
    times.mark("learner_ready", 999.0)  # a clock behind the driver's never gives a negative time
    assert times.seconds == {"ray_up": 2.5, "learner_ready": 0.0}
    assert not times.complete()
    for name, at in (("replay_ready", 1003.0), ("first_actor_step", 1004.25), ("first_learner_step", 1010.0)):
        times.mark(name, at)
    assert times.complete()
    assert times.line() == ("start-up from launch: Ray up 2.5 s, replay ready 3.0 s, learner ready 0.0 s, "
                            "first actor step 4.2 s, first learner step 10.0 s")


def test_an_unknown_milestone_is_refused():
    with pytest.raises(ValueError, match="unknown start-up milestone"):
        StartupTimes(launched=0.0).mark("coffee")


def test_the_launch_time_is_this_process_start():
    import time

    launched = startup_times.process_launch_time()
    assert launched <= time.time() and time.time() - launched < 24 * 3600


def test_a_command_exec_d_by_a_shell_after_other_work_counts_from_its_own_start():
    """README command (a) is ``setup.sh && rlplat train``: a shell may exec rlplat in its own, older process."""
    import os
    import subprocess
    import sys

    child = ("import time; from rlplat.distributed.startup_times import StartupTimes, process_launch_time; "
             "t = time.time(); print(t - StartupTimes().launched, t - process_launch_time())")
    done = subprocess.run(["bash", "-c", f'sleep 2 && exec "{sys.executable}" -c "{child}"'], check=True,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    since_start, since_process_creation = (float(x) for x in done.stdout.split())
    assert since_process_creation >= 2.0  # the shell's process, created before its 2 s of other work
    assert 0.0 <= since_start < since_process_creation - 1.5, done.stdout  # launched when rlplat began
