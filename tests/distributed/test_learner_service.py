"""The learner's face is one typed Protocol that every learner and stand-in implements in full.

A renamed or re-signed method fails here, not halfway through a run or a
bench: each implementation defines every method of its Protocol itself
(nothing falls through to the Protocol's empty bodies) with the same
parameters, and no caller names a Ray method by string.
"""

import glob
import inspect
import os
import re
import sys

import pytest

from rlplat.distributed import learner_group
from rlplat.distributed import learner_service
from rlplat.distributed import workers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def _protocol_methods(protocol):
    return {name: inspect.signature(getattr(protocol, name))
            for name in dir(protocol) if not name.startswith("_") and callable(getattr(protocol, name))}


def _missing_or_different(cls, protocol):
    problems = []
    for name, expected in _protocol_methods(protocol).items():
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or getattr(owner, "_is_protocol", False):
            problems.append(f"{cls.__name__} does not define {name}")
            continue
        got = inspect.signature(getattr(cls, name))
        # ray.remote(cls) adds a keyword-only `_ray_trace_ctx` to the class's own methods.
        if [p for p in got.parameters if p != "_ray_trace_ctx"] != list(expected.parameters):
            problems.append(f"{cls.__name__}.{name}{got} differs from {protocol.__name__}.{name}{expected}")
    return problems


def _stand_ins():
    from bench import d4pg_throughput, impala_throughput  # pylint: disable=g-import-not-at-top

    return [d4pg_throughput.actor_classes()[0], impala_throughput.actor_classes()[0]]


@pytest.mark.parametrize("cls", [workers.LearnerWorker, learner_group.LearnerGroup],
                         ids=["LearnerWorker", "LearnerGroup"])
def test_each_learner_implements_the_whole_service(cls):
    assert issubclass(cls, learner_service.LearnerService)
    assert _missing_or_different(cls, learner_service.LearnerService) == []


def test_bench_stand_ins_implement_what_actors_call():
    for cls in _stand_ins():
        assert issubclass(cls, learner_service.WeightServer), cls
        assert _missing_or_different(cls, learner_service.WeightServer) == []


def test_the_check_catches_a_renamed_or_missing_method():
    class Renamed(learner_service.WeightServer):
        def replay_address(self):
            return ""

        def get_variables(self, names):
            return 0, {}

        def get_variables_if_newer(self, names, held_version):  # parameter renamed
            return None

    problems = _missing_or_different(Renamed, learner_service.WeightServer)
    assert any("does not define shared_weights_info" in p for p in problems), problems
    assert any("get_variables_if_newer" in p and "differs" in p for p in problems), problems


def test_no_ray_method_is_called_by_a_string_name():
    pattern = re.compile(r"getattr\([^()]*\)\.remote\(")
    offenders = []
    for path in glob.glob(os.path.join(REPO, "rlplat", "**", "*.py"), recursive=True) + \
            glob.glob(os.path.join(REPO, "bench", "*.py")) + glob.glob(os.path.join(REPO, "agents", "**", "*.py"),
                                                                      recursive=True):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if pattern.search(line):
                    offenders.append(f"{os.path.relpath(path, REPO)}:{number}")
    assert offenders == []
