"""The reliability matrices from a test run's JUnit XML: faults injected vs survived, bad inputs vs refused.

    scripts/test.sh --junitxml=/tmp/suite.xml        # the whole suite, or just the tests below
    .venv/bin/python scripts/reliability_matrix.py /tmp/suite.xml > matrices.md

Nothing is written by hand: the rows are the fault tests named in ``FAULTS``
(what each injects and what must hold) and every case of the bad-input test
(its argv and the fragments the one-line error must contain, read from
``tests/launch/test_bad_inputs.py``), each with the outcome and seconds the
XML records. A case the XML lacks is shown as "not run".
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from typing import Dict, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (test file, test name or its prefix) -> (fault injected, what must hold)
FAULTS = {
    ("tests/distributed/test_distributed_run.py", "test_resume_continues_and_a_killed_actor_is_restarted"):
        ("SIGKILL of a busy actor process", "restarted, weights before acting, restart counted and logged"),
    ("tests/distributed/test_distributed_run.py", "test_a_crash_looping_actor_is_restarted_then_given_up"):
        ("an actor that dies at every start", "restarted within the budget, then given up with one line"),
    ("tests/distributed/test_distributed_run.py", "test_a_dead_replay_server_or_learner_ends_the_run"):
        ("SIGKILL of the replay server / of the learner (separate replay)", "one-line failure"),
    ("tests/distributed/test_distributed_run.py", "test_a_killed_colocated_learner"):
        ("SIGKILL of the learner hosting replay", "one line within 60 s; --resume continues state"),
    ("tests/distributed/test_distributed_run.py", "test_environment_faults_end_episodes"):
        ("NaN control (PhysicsError) / wrong-shape action (ValueError) in MuJoCo",
         "episode ended, counted, logged once with traceback, run goes on"),
    ("tests/distributed/test_replay_checkpoint.py", "test_"):
        ("stop and --resume with --replay-checkpoint", "replay items restored, no refill"),
    ("tests/distributed/test_distributed_signals.py", "test_signal_checkpoints_exits_and_leaves_no_process"):
        ("SIGINT/SIGTERM to the CLI's PID or process group", "final checkpoint, exit 130/143, no process left"),
    ("tests/distributed/test_distributed_signals.py", "test_second_signal_skips_the_checkpoint"):
        ("two SIGINTs while the learner is frozen", "no checkpoint, exit 130, no process left"),
    ("tests/distributed/test_distributed_signals.py", "test_signal_during_start_up"):
        ("SIGTERM during start-up", "exit 143, no process left"),
    ("tests/distributed/test_distributed_signals.py", "test_sigkill_of_the_driver"):
        ("SIGKILL of the rlplat driver", "no Ray or Reverb process of the run after 30 s"),
    ("tests/distributed/test_loopback.py", "test_"):
        ("a network scan of a local run (its listening sockets)", "every listener on loopback"),
    ("tests/launch/test_ray_auth.py", "test_"):
        ("--address to a Ray cluster without token auth", "refused, exit 2, one line (unless opted out)"),
    ("tests/agents/d4pg/test_d4pg_nan_guard.py", "test_"):
        ("NaN injected into the D4PG loss", "stopped before applying; no non-finite checkpoint"),
    ("tests/agents/impala/test_impala_nan_guard.py", "test_"):
        ("NaN injected into the IMPALA loss", "stopped before applying; no non-finite checkpoint"),
    ("tests/agents/supervised/test_supervised_nan_guard.py", "test_"):
        ("NaN injected into the supervised loss", "stopped before applying; no non-finite checkpoint"),
}


def outcomes(xml_path: str) -> Dict[Tuple[str, str], Tuple[str, float]]:
    """(file, test name with parameters) -> (outcome, seconds)."""
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        module_end = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
        file = "/".join(parts[:module_end + 1]) + ".py"  # a test class, if any, comes after
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "FAILED"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        out[(file, case.get("name", ""))] = (outcome, float(case.get("time", 0)))
    return out


def fault_table(results) -> str:
    rows = ["| fault injected | must hold | test | outcome | s |", "|---|---|---|---|---|"]
    for (file, prefix), (fault, holds) in FAULTS.items():
        found = sorted((name, r) for (f, name), r in results.items() if f == file and name.startswith(prefix))
        if not found:
            rows.append(f"| {fault} | {holds} | `{os.path.basename(file)}::{prefix}` | not run | |")
        for name, (outcome, seconds) in found:
            rows.append(f"| {fault} | {holds} | `{name}` | {outcome} | {seconds:.0f} |")
    return "\n".join(rows)


def bad_input_table(results) -> str:
    sys.path.insert(0, os.path.join(REPO, "tests", "launch"))
    import test_bad_inputs  # pylint: disable=g-import-not-at-top,import-outside-toplevel

    file = "tests/launch/test_bad_inputs.py"
    by_id = {}
    for (f, name), result in results.items():
        if f == file and "[" in name:
            by_id[name[name.index("[") + 1:-1]] = result
    rows = ["| case | command line | the error line must contain | outcome | s |", "|---|---|---|---|---|"]
    for case_id, argv, fragments in test_bad_inputs.CASES:
        outcome, seconds = by_id.get(case_id, ("not run", None))
        shown = " ".join(argv).replace("|", "\\|")
        rows.append(f"| {case_id} | `rlplat {shown}` | {'; '.join(fragments)} | {outcome} | "
                    f"{'' if seconds is None else f'{seconds:.1f}'} |")
    refused = sum(1 for c in test_bad_inputs.CASES if by_id.get(c[0], ("",))[0] == "passed")
    return "\n".join(rows) + f"\n\n{refused} of {len(test_bad_inputs.CASES)} bad inputs refused cleanly."


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not os.path.exists(argv[0]):
        sys.stderr.write("usage: reliability_matrix.py JUNIT_XML (from pytest --junitxml=...)\n")
        return 2
    results = outcomes(argv[0])
    sys.stdout.write("## Faults injected vs survived\n\n" + fault_table(results) + "\n\n"
                     "## Bad inputs tried vs refused cleanly\n\n" + bad_input_table(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
