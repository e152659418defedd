"""The bad-input matrix: every bad `rlplat` input is refused at once, cleanly, touching nothing.

`train`, `eval`, `export`, `status`, `plot`, `sweep` and `scale-check`, including damaged run files
(empty, truncated or wrong-typed config.json, run_info.json, counters.json);
`rlplat cluster check` loads Ray's validator, so its cases live in
tests/clusters/test_cluster_cli.py.

Each case runs the `rlplat` command as a user would (no TF_CPP_MIN_LOG_LEVEL
in the environment) and must give: exit code 2; exactly one line on stderr,
`rlplat: error: ...`, naming the fix, with nothing before it (no TensorFlow
start-up lines, no traceback) and nothing on stdout; an answer within 15 s;
no Ray (a stand-in `ray` package that fails on import is first on the path);
and no change under the test's directory: the real D4PG and supervised runs
made once for this module (their config.json, checkpoints, logs: names,
sizes, mtimes and hashes) and no new directory anywhere (an empty run
directory left behind counts).
"""

import hashlib
import json
import os
import shutil

import pytest

from cli_testlib import run_rlplat_as_user

# Every case starts an `rlplat` process, and the module's fixture trains real
# D4PG (Ray) and supervised runs: not for scripts/test.sh --fast.
pytestmark = pytest.mark.multiprocess

# A bound on blocking, not a speed test: a refusal comes before Ray and TensorFlow (checked
# by their stand-ins), and on a loaded 2-core machine the CLI alone has taken 27 s to start.
TIME_LIMIT_S = 120.0
ERROR_PREFIX = "rlplat: error: "
NO_RAY = "stand-in ray: a bad input must be refused before Ray is imported"

# A real D4PG run, as small as a run gets (Ray, 1 actor, a final checkpoint, with replay).
D4PG_RUN = ["train", "d4pg", "--max-actor-steps", "300", "--num-actors", "1", "--replay-checkpoint",
            "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32",
            "--global-batch-size", "32", "--min-replay-size", "32", "--samples-per-insert", "1",
            "--eval-episodes", "1"]
SUPERVISED_RUN = ["train", "supervised", "--num-steps", "2", "--hidden-sizes", "16",
                  "--log-period", "1", "--eval-period", "1", "--checkpoint-period", "1", "--no-progress"]

D4PG, IMPALA, SUP = ("train", "d4pg"), ("train", "impala"), ("train", "supervised")
PBT4 = ("sweep", "d4pg", "--scheduler", "pbt", "--seeds", "4")
EVERY_1000 = ("--perturbation-interval", "1000", "--eval-every-steps", "1000", "--max-actor-steps", "5000")

# (case id, argv with {placeholders}, fragments the error line must contain); an argv
# may start with a dict: environment variables set for that case.
# {run}: the D4PG run; {sup}: the supervised run; {file}: a plain file;
# {logs}: a directory with a metrics.jsonl and no checkpoint; {base}: the test's directory;
# {lstm}: the D4PG run's files recorded as an IMPALA run with an LSTM core.
CASES = [
    # --logdir that cannot be used
    ("logdir-is-a-file", [*D4PG, "--logdir", "{file}"], ["--logdir", "is a file"]),
    ("logdir-under-a-file", [*D4PG, "--logdir", "{file}/run"], ["cannot create --logdir", "is a file"]),
    ("logdir-name-too-long", [*D4PG, "--logdir", "{base}/" + "x" * 300], ["cannot create --logdir"]),
    ("logdir-in-proc", [*D4PG, "--logdir", "/proc/rlplat-run"], ["cannot create --logdir"]),
    ("supervised-logdir-is-a-file", [*SUP, "--logdir", "{file}"], ["is a file"]),
    # a directory that already holds a run, or none to resume
    ("new-run-on-a-run", [*D4PG, "--logdir", "{run}"], ["already holds a run", "--resume"]),
    ("new-run-on-logs-only", [*D4PG, "--logdir", "{logs}"], ["metrics.jsonl", "no checkpoint", "--logdir"]),
    ("impala-new-run-on-logs-only", [*IMPALA, "--logdir", "{logs}"], ["metrics.jsonl", "new --logdir"]),
    ("supervised-new-run-on-a-run", [*SUP, "--logdir", "{sup}"], ["already holds a run", "--resume"]),
    ("resume-logs-only", [*D4PG, "--resume", "--logdir", "{logs}"], ["--resume found no checkpoint"]),
    ("resume-missing-dir", [*D4PG, "--resume", "--logdir", "{base}/missing"], ["--resume", "no run directory"]),
    ("resume-without-logdir", [*D4PG, "--resume"], ["--resume needs --logdir"]),
    # --resume against the run's config.json
    ("resume-other-env", [*D4PG, "--resume", "--logdir", "{run}", "--env", "walker:walk",
                          "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32"],
     ["trained on --env cartpole:swingup", "not walker:walk", "pass --env cartpole:swingup"]),
    ("resume-default-network", [*D4PG, "--resume", "--logdir", "{run}"],
     ["--policy-layer-sizes 32,32", "not 256,256,256"]),
    ("resume-other-critic", [*D4PG, "--resume", "--logdir", "{run}", "--policy-layer-sizes", "32,32",
                             "--critic-layer-sizes", "64,64"], ["pass --critic-layer-sizes 32,32"]),
    ("resume-d4pg-with-impala", [*IMPALA, "--resume", "--logdir", "{run}"],
     ["holds a d4pg run, not impala", "rlplat train d4pg --resume"]),
    ("resume-d4pg-with-supervised", [*SUP, "--resume", "--logdir", "{run}"], ["holds a d4pg run"]),
    ("resume-supervised-with-d4pg", [*D4PG, "--resume", "--logdir", "{sup}"], ["holds a supervised run"]),
    ("resume-supervised-other-network", [*SUP, "--resume", "--logdir", "{sup}", "--hidden-sizes", "32"],
     ["pass --hidden-sizes 16"]),
    # the replay checkpoint keeps its tables' settings; the resume inherits --replay-checkpoint
    ("resume-replay-other-ratio", [*D4PG, "--resume", "--logdir", "{run}", "--policy-layer-sizes", "32,32",
                                   "--critic-layer-sizes", "32,32", "--samples-per-insert", "2"],
     ["--resume --replay-checkpoint", "--samples-per-insert 1", "pass --samples-per-insert 1",
      "--no-replay-checkpoint"]),
    ("debug-eager-replicas", [*D4PG, "--debug-eager", "--num-learner-replicas", "2"],
     ["--debug-eager runs the learner on one device"]),
    ("supervised-debug-eager-replicas", [*SUP, "--debug-eager", "--num-replicas", "2"],
     ["--debug-eager runs on one device"]),
    ("status-without-run", ["status"], ["pass --logdir RUN", "--address HOST:PORT"]),
    ("status-bad-address", ["status", "--address", "headnode"], ["--address must be 'auto' or HOST:PORT"]),
    ("sweep-grid-unknown-field", ["sweep", "d4pg", "--grid", "sigmaa=0.2,0.3"],
     ["sigmaa is not a d4pg config flag", "sigma"]),
    ("sweep-grid-bad-value", ["sweep", "d4pg", "--grid", "sigma=abc"], ["--sigma", "abc"]),
    ("sweep-grid-invalid-config", ["sweep", "d4pg", "--grid", "n_step=0,5"], ["--n-step must be >= 1"]),
    ("sweep-zero-seeds", ["sweep", "d4pg", "--seeds", "0"], ["--seeds must be >= 1"]),
    ("sweep-resume", ["sweep", "d4pg", "--resume", "--logdir", "{run}"], ["does not resume"]),
    ("video-every-negative", [*D4PG, "--video-every", "-1"], ["--video-every must be >= 0"]),
    ("envs-per-actor-zero", [*D4PG, "--envs-per-actor", "0"], ["--envs-per-actor must be >= 1"]),
    ("replay-shards-zero", [*D4PG, "--num-replay-shards", "0"], ["--num-replay-shards must be >= 1"]),
    ("publish-period-zero", [*D4PG, "--weight-publish-period", "0"], ["--weight-publish-period must be >= 1"]),
    ("replay-shards-uneven", [*D4PG, "--num-actors", "3", "--num-replay-shards", "2"],
     ["--num-actors 3 is not a multiple of --num-replay-shards 2"]),
    ("replay-shards-checkpointed", [*D4PG, "--num-actors", "2", "--num-replay-shards", "2", "--replay-checkpoint"],
     ["--num-replay-shards 2", "does not checkpoint replay yet: drop --replay-checkpoint"]),
    ("envs-per-actor-lstm", [*IMPALA, "--envs-per-actor", "2", "--core", "lstm"],
     ["--envs-per-actor", "drop --envs-per-actor or use --core mlp"]),
    ("video-every-gym", [*IMPALA, "--env", "gym:CartPole-v1", "--video-every", "2"],
     ["--video-every", "no MuJoCo scene", "drop --video-every"]),
    ("impala-replay-checkpoint", [*IMPALA, "--replay-checkpoint"],
     ["--replay-checkpoint is for replay-based agents", "drop the flag"]),
    # batch split, replay rate limiter
    ("batch-over-3-replicas", [*D4PG, "--num-learner-replicas", "3"],
     ["--global-batch-size 256", "multiple of 3"]),
    ("batch-over-3-workers", [*D4PG, "--num-learner-workers", "3"], ["--num-learner-workers 3", "multiple of 3"]),
    ("replicas-and-workers", [*D4PG, "--num-learner-replicas", "2", "--num-learner-workers", "2"],
     ["cannot be combined"]),
    ("impala-batch-over-3-replicas", [*IMPALA, "--num-learner-replicas", "3"],
     ["--global-batch-size", "multiple of 3"]),
    ("supervised-batch-over-3", [*SUP, "--num-replicas", "3"], ["--global-batch-size", "multiple of 3"]),
    ("min-replay-below-batch", [*D4PG, "--min-replay-size", "100"],
     ["--min-replay-size=100", "--global-batch-size=256"]),
    ("tiny-samples-per-insert", [*D4PG, "--samples-per-insert", "0.001"],
     ["would stall the learner", "--samples-per-insert >= 0.256"]),
    ("huge-samples-per-insert", [*D4PG, "--samples-per-insert", "1e9"], ["would stall the actors"]),
    ("max-replay-below-min", [*D4PG, "--max-replay-size", "500"], ["--max-replay-size"]),
    ("impala-queue-below-batch", [*IMPALA, "--queue-size", "4"], ["--queue-size"]),
    # environments
    ("d4pg-discrete-gym", [*D4PG, "--env", "gym:CartPole-v1"],
     ["needs continuous actions", "rlplat train impala --env gym:CartPole-v1"]),
    ("env-typo", [*D4PG, "--env", "cartpol:swingup"], ["did you mean: cartpole:swingup"]),
    ("env-malformed", [*D4PG, "--env", "walker"], ["expected 'domain:task'"]),
    ("impala-gym-typo", [*IMPALA, "--env", "gym:CartPol-v1"], ["did you mean: gym:CartPole-v1"]),
    # plain flags
    ("zero-actors", [*D4PG, "--num-actors", "0"], ["--num-actors must be >= 1"]),
    ("zero-actor-steps", [*D4PG, "--max-actor-steps", "0"], ["--max-actor-steps"]),
    ("negative-seed", [*D4PG, "--seed", "-1"], ["--seed must be in 0..4294967295"]),
    ("zero-eval-period", [*D4PG, "--eval-period", "0"], ["--eval-period"]),
    ("nan-checkpoint-period", [*D4PG, "--checkpoint-period", "nan"], ["--checkpoint-period"]),
    ("infinite-target-return", [*D4PG, "--target-eval-return", "inf"], ["--target-eval-return"]),
    ("zero-eval-every-steps", [*D4PG, "--eval-every-steps", "0"], ["--eval-every-steps"]),
    ("bad-address", [*D4PG, "--address", "nowhere"], ["--address must be"]),
    ("unauthenticated-ray-without-address", [*D4PG, "--allow-unauthenticated-ray"],
     ["--allow-unauthenticated-ray only applies with --address", "drop it"]),
    ("zero-actor-resource", [*D4PG, "--actor-resources", "actor=0"], ["actor must be > 0"]),
    ("zero-learner-cpus", [*D4PG, "--learner-cpus", "0"], ["--learner-cpus must be > 0"]),
    ("zero-batch", [*D4PG, "--global-batch-size", "0"], ["--global-batch-size"]),
    ("discount-above-1", [*D4PG, "--discount", "1.5"], ["--discount"]),
    ("nan-learning-rate", [*D4PG, "--policy-learning-rate", "nan"], ["--policy-learning-rate", "finite"]),
    ("bad-layer-sizes", [*D4PG, "--policy-layer-sizes", "64,x"], ["--policy-layer-sizes"]),
    ("bad-torso-init", [*D4PG, "--torso-init", "orthogonal"], ["--torso-init"]),
    ("bad-precision", [*D4PG, "--precision", "fp16"], ["--precision auto, fp32 or bf16"]),
    ("ddpg-bad-precision", ["train", "ddpg", "--precision", "float32"], ["--precision auto, fp32 or bf16"]),
    ("impala-bad-precision", [*IMPALA, "--precision", "BF16"], ["--precision auto, fp32 or bf16"]),
    ("supervised-bad-precision", ["train", "supervised", "--precision", "fp16"], ["--precision auto, fp32 or bf16"]),
    ("gan-bad-precision", ["train", "gan", "--precision", "half"], ["--precision auto, fp32 or bf16"]),
    ("unknown-flag", [*D4PG, "--no-such-flag"], ["--no-such-flag"]),
    ("impala-bad-core", [*IMPALA, "--core", "gru"], ["--core mlp or --core lstm"]),
    ("impala-negative-lag", [*IMPALA, "--max-policy-lag", "-1"], ["--max-policy-lag"]),
    ("supervised-bad-steps", [*SUP, "--num-steps", "ten"], ["--num-steps"]),
    ("no-agent", ["train"], ["AGENT"]),
    # numbers beyond what the learner or the seeds can hold
    ("seed-beyond-32-bits", [*D4PG, "--seed", "4294967296"], ["--seed must be in 0..4294967295"]),
    ("learning-rate-beyond-float32", [*D4PG, "--policy-learning-rate", "1e39"], ["float32", "--policy-learning-rate"]),
    ("sigma-beyond-float32", [*D4PG, "--sigma", "1e39"], ["float32", "--sigma"]),
    ("target-beyond-float32", [*D4PG, "--target-eval-return", "1e39"], ["--target-eval-return"]),
    ("actor-steps-beyond-64-bits", [*D4PG, "--max-actor-steps", "100000000000000000000"],
     ["--max-actor-steps must fit in 64 bits"]),
    ("checkpoint-period-infinite", [*D4PG, "--checkpoint-period", "inf"], ["--checkpoint-period"]),
    # damaged run files, for every command that reads them
    ("resume-empty-config", [*D4PG, "--resume", "--logdir", "{empty_config}"], ["run config", "damaged"]),
    ("resume-truncated-run-info", [*D4PG, "--resume", "--logdir", "{torn_info}"], ["run record", "damaged"]),
    ("resume-wrong-counters", [*D4PG, "--resume", "--logdir", "{list_counters}"],
     ["counters file", "not a JSON object"]),
    ("resume-bad-counts", [*D4PG, "--resume", "--logdir", "{bad_counts}"], ["counters file", "damaged"]),
    ("eval-empty-config", ["eval", "--logdir", "{empty_config}"], ["run config", "damaged"]),
    ("eval-truncated-run-info", ["eval", "--logdir", "{torn_info}"], ["run record", "damaged"]),
    ("eval-wrong-counters", ["eval", "--logdir", "{list_counters}"], ["counters file"]),
    ("eval-seed-beyond-32-bits", ["eval", "--logdir", "{run}", "--seed", "4294967296"], ["--seed must be in"]),
    ("eval-episodes-huge", ["eval", "--logdir", "{run}", "--episodes", "1000000000000"], ["--episodes must be in"]),
    ("eval-logdir-is-a-file", ["eval", "--logdir", "{file}"], ["is not a directory"]),
    ("eval-video-fps-nan", ["eval", "--logdir", "{run}", "--video", "{base}/v.gif", "--video-fps", "nan"],
     ["--video-fps must be > 0"]),
    ("eval-video-size-zero", ["eval", "--logdir", "{run}", "--video", "{base}/v.gif", "--video-size", "0x10"],
     ["WIDTHxHEIGHT"]),
    ("export-missing-logdir", ["export", "--logdir", "{base}/missing", "-o", "{base}/out"], ["is not a directory"]),
    ("export-empty-config", ["export", "--logdir", "{empty_config}", "-o", "{base}/out"], ["run config", "damaged"]),
    ("export-truncated-run-info", ["export", "--logdir", "{torn_info}", "-o", "{base}/out"], ["run record", "damaged"]),
    ("export-unknown-checkpoint", ["export", "--logdir", "{run}", "--checkpoint", "999999", "-o", "{base}/out"],
     ["--checkpoint 999999", "it keeps"]),
    ("export-output-not-empty", ["export", "--logdir", "{run}", "-o", "{sup}"],
     ["exists and is not empty", "new or empty directory"]),
    ("export-output-is-a-file", ["export", "--logdir", "{run}", "-o", "{file}"], ["is a file"]),
    ("export-output-unwritable", ["export", "--logdir", "{run}", "-o", "/proc/rlplat-export"],
     ["cannot write -o /proc/rlplat-export", "a directory you can write"]),
    ("export-impala-lstm", ["export", "--logdir", "{lstm}", "-o", "{base}/out"],
     ["--core lstm", "export a --core mlp run"]),
    ("export-without-output", ["export", "--logdir", "{run}"], ["-o/--output"]),
    ("status-empty-config", ["status", "--logdir", "{empty_config}"], ["run config", "damaged"]),
    ("status-truncated-run-info", ["status", "--logdir", "{torn_info}"], ["run record", "damaged"]),
    ("status-wrong-counters", ["status", "--logdir", "{list_counters}"], ["counters file"]),
    ("status-logdir-is-a-file", ["status", "--logdir", "{file}"], ["is not a directory"]),
    ("plot-empty-config", ["plot", "{empty_config}", "-o", "{base}/p.png"], ["run config", "damaged"]),
    ("plot-wrong-counters", ["plot", "{list_counters}", "-o", "{base}/p.png"], ["counters file"]),
    ("plot-run-is-a-file", ["plot", "{file}", "-o", "{base}/p.png"], ["is not a directory"]),
    ("plot-output-is-a-folder", ["plot", "{run}", "-o", "{base}"], ["is a directory"]),
    ("plot-unknown-metric", ["plot", "{run}", "-o", "{base}/p.png", "--metric", "nope"], ["--metric"]),
    ("sweep-logdir-is-a-file", ["sweep", "d4pg", "--logdir", "{file}"], ["is a file"]),
    # sweep --scheduler pbt
    ("pbt-mutate-without-pbt", ["sweep", "d4pg", "--mutate", "sigma=0.1:0.5"], ["--mutate is for --scheduler pbt"]),
    ("pbt-no-interval", [*PBT4, "--mutate", "sigma=0.1:0.5"], ["--perturbation-interval"]),
    ("pbt-shape-field", [*PBT4, "--mutate", "policy-layer-sizes=32:32,64:64", *EVERY_1000],
     ["may not change policy_layer_sizes"]),
    ("pbt-bad-range-value", [*PBT4, "--mutate", "sigma=-1:0.5", *EVERY_1000], ["--sigma must be >= 0"]),
    ("pbt-sparse-evals", [*PBT4, "--mutate", "sigma=0.1:0.5", "--perturbation-interval", "1000",
                          "--eval-every-steps", "5000", "--max-actor-steps", "5000"], ["--eval-every-steps at most"]),
    ("pbt-no-budget", [*PBT4, "--mutate", "sigma=0.1:0.5", *EVERY_1000[:4]], ["needs --max-actor-steps"]),
    ("pbt-population-of-one", ["sweep", "d4pg", "--scheduler", "pbt", "--mutate", "sigma=0.1:0.5", *EVERY_1000],
     ["population of 2 or more"]),
    # scale-check: two scales, each checked as `train` checks it
    ("scale-check-one-scale", ["scale-check", "d4pg", "--actors", "4"], ["--actors", "two whole numbers"]),
    ("scale-check-same-scales", ["scale-check", "d4pg", "--actors", "2,2"], ["are the same", "--actors"]),
    ("scale-check-zero-actors", ["scale-check", "d4pg", "--actors", "0,4"], ["--actors values must be >= 1"]),
    ("scale-check-num-actors", ["scale-check", "d4pg", "--actors", "1,4", "--num-actors", "2"],
     ["--num-actors is one scale", "--actors A,B"]),
    ("scale-check-one-seed", ["scale-check", "d4pg", "--actors", "1,4", "--seeds", "1"], ["--seeds must be >= 2"]),
    ("scale-check-margin", ["scale-check", "d4pg", "--actors", "1,4", "--margin", "1.5"], ["--margin", "(0, 1)"]),
    ("scale-check-uneven-shards", ["scale-check", "d4pg", "--actors", "1,4", "--replay-shards", "1,3"],
     ["--num-actors 4 is not a multiple of --num-replay-shards 3"]),
    ("weight-relay-with-weights-per-actor", [*D4PG, "--weight-relay", "--weights-per-actor"],
     ["--weight-relay sends one copy of the weights per node", "drop one of the two"]),
    ("scale-check-logdir-not-empty", ["scale-check", "d4pg", "--actors", "1,4", "--logdir", "{run}"],
     ["not empty"]),
    ("sweep-empty-grid", ["sweep", "d4pg", "--grid", "sigma="], ["--grid"]),
    ("sweep-duplicate-grid-value", ["sweep", "d4pg", "--grid", "sigma=0.2,0.20"], ["same value of sigma"]),
    ("sweep-seed-beyond-32-bits", ["sweep", "d4pg", "--seed", "4294967295", "--seeds", "2"],
     ["--seed must be in 0..4294967295"]),
    # the environment
    ("unknown-learner-malloc", [{"RLPLAT_LEARNER_MALLOC": "glibc"}, *D4PG],
     ["RLPLAT_LEARNER_MALLOC='glibc' is not one of jemalloc, system", "set it to system"]),
]


def _snapshot(root):
    """Every directory, and every file's (size, mtime, sha256), under ``root``."""
    dirs, files = set(), {}
    for here, subdirs, names in os.walk(root):
        dirs.update(os.path.relpath(os.path.join(here, d), root) for d in subdirs)
        for name in names:
            path = os.path.join(here, name)
            stat = os.stat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            files[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns, digest)
    return dirs, files


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The test's directory: two real runs, a file, a logs-only directory, a clean cwd, no Ray."""
    base = tmp_path_factory.mktemp("bad-inputs")
    cwd = base / "cwd"  # default run directories (runs/<agent>-<time>) would land here
    cwd.mkdir()
    for name, argv in (("d4pg-run", D4PG_RUN), ("supervised-run", SUPERVISED_RUN)):
        result, _ = run_rlplat_as_user(*argv, "--logdir", str(base / name), cwd=str(cwd), timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    for name in ("d4pg-run", "supervised-run"):
        assert os.path.exists(base / name / "config.json")
        assert any(f.endswith(".index") for f in os.listdir(base / name / "checkpoints"))
    (base / "a-file").write_text("not a directory\n")
    (base / "logs-only").mkdir()
    (base / "logs-only" / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "learner"}) + "\n")
    stand_in = tmp_path_factory.mktemp("no-ray")  # outside `base`: not part of the snapshot
    (stand_in / "ray").mkdir()
    (stand_in / "ray" / "__init__.py").write_text(f"raise ImportError({NO_RAY!r})\n")
    damaged = {"empty_config": ("config.json", ""), "torn_info": ("run_info.json", '{"builder": "D4'),
               "list_counters": ("checkpoints/counters.json", "[1, 2]"),
               "bad_counts": ("checkpoints/counters.json", '{"16": {"actor_steps": "many"}}')}
    for name, (relative, text) in damaged.items():
        shutil.copytree(base / "d4pg-run", base / name)
        (base / name / relative).write_text(text)
    # An IMPALA run with an LSTM core, as far as `rlplat export` reads one (it is refused before the checkpoint).
    shutil.copytree(base / "d4pg-run", base / "lstm-run")
    for name, key, value in (("config.json", "agent", {"core": "lstm"}), ("run_info.json", "builder", "IMPALABuilder"),
                             ("run_info.json", "agent", "impala")):
        with open(base / "lstm-run" / name, encoding="utf-8") as f:
            record = json.load(f)
        record[key] = value
        (base / "lstm-run" / name).write_text(json.dumps(record))
    places = {"run": base / "d4pg-run", "sup": base / "supervised-run", "file": base / "a-file",
              "logs": base / "logs-only", "base": base, "lstm": base / "lstm-run",
              **{name: base / name for name in damaged}}
    world = {"base": str(base), "cwd": str(cwd), "stand_in": str(stand_in),
             "places": {k: str(v) for k, v in places.items()}, "timings": []}
    yield world
    # The matrix as a table (shown with `pytest -s`).
    print(f"\n{'case':<34} {'exit':>4} {'seconds':>8}")
    for case, code, seconds in world["timings"]:
        print(f"{case:<34} {code:>4} {seconds:>8.2f}")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("case, argv, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_at_once_with_one_line_and_nothing_touched(world, case, argv, fragments):
    env = argv[0] if isinstance(argv[0], dict) else {}
    args = [a.format(**world["places"]) for a in argv[1 if env else 0:]]
    before = _snapshot(world["base"])
    result, seconds = run_rlplat_as_user(*args, cwd=world["cwd"], extra_path=world["stand_in"], extra_env=env)
    world["timings"].append((case, result.returncode, seconds))
    lines = result.stderr.splitlines()
    assert NO_RAY not in result.stderr, f"{case}: Ray was imported before the input was refused"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), result.stderr[-3000:]
    assert result.stdout == "", result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert seconds < TIME_LIMIT_S, f"{case}: refused after {seconds:.1f} s"
    after = _snapshot(world["base"])
    assert after[0] == before[0], f"directories changed: {after[0] ^ before[0]}"
    assert after[1] == before[1], "files changed: " + str(
        sorted(k for k in set(after[1]) | set(before[1]) if after[1].get(k) != before[1].get(k)))


def test_matrix_has_30_cases_or_more():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)
