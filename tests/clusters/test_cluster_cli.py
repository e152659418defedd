"""`rlplat cluster check`: `FILE: ok` / one `FILE: error: ...` line, exit 0 / 2, no TensorFlow."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rlplat(*args):
    # A HOME of its own: the check reads the token file a YAML ships from ~, and the machine's
    # may be anything (tests/clusters/test_ray_up_loopback.py writes one, 0644).
    home = tempfile.mkdtemp(prefix="rlplat-home-")
    try:
        return subprocess.run([sys.executable, "-m", "rlplat.launch.cli", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": home})
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_shipped_configs_exit_0():
    result = _rlplat("cluster", "check", "clusters/aws.yaml", "clusters/gcp.yaml", "clusters/local.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "clusters/aws.yaml: ok", "clusters/gcp.yaml: ok", "clusters/local.yaml: ok"]
    assert result.stderr == ""


def test_broken_file_exits_2_with_one_stderr_line(tmp_path):
    with open(os.path.join(REPO, "clusters", "aws.yaml")) as f:
        text = f.read()
    broken = tmp_path / "open.yaml"
    broken.write_text(text.replace("  region: us-west-2\n", "  regoin: us-west-2\n"))
    missing = str(tmp_path / "missing.yaml")
    result = _rlplat("cluster", "check", "clusters/aws.yaml", str(broken), missing)
    assert result.returncode == 2
    assert result.stdout.splitlines() == ["clusters/aws.yaml: ok"]
    lines = result.stderr.splitlines()
    assert lines == [
        f"{broken}: error: `provider.regoin` is not a key the aws provider reads, and Ray ignores "
        "unknown keys silently; did you mean `region`?",
        f"{missing}: error: no such file; pass the path of a cluster YAML such as clusters/aws.yaml",
    ], result.stderr
    single = _rlplat("cluster", "check", missing)
    assert single.returncode == 2 and len(single.stderr.splitlines()) == 1 and single.stdout == ""


def test_usage_error_and_no_tensorflow():
    usage = _rlplat("cluster", "check")
    assert usage.returncode == 2
    assert usage.stderr.count("\n") == 1 and usage.stderr.startswith("rlplat: error: ")
    probe = ("import sys\nfrom rlplat.launch import cli\ncode = cli.main(['cluster', 'check', "
             "'clusters/gcp.yaml'])\nassert 'tensorflow' not in sys.modules, 'TF was imported'\n"
             "sys.exit(code)\n")
    home = tempfile.mkdtemp(prefix="rlplat-home-")  # as in _rlplat
    try:
        result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                                timeout=120, env={**os.environ, "HOME": home})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert result.returncode == 0, result.stderr


def _aws_with(old, new):
    def make(path):
        with open(os.path.join(REPO, "clusters", "aws.yaml")) as f:
            text = f.read()
        assert old in text
        path.write_text(text.replace(old, new, 1))
    return make


def _text(content):
    return lambda path: path.write_text(content)


def _bytes(content):
    return lambda path: path.write_bytes(content)


def _folder(path):
    path.mkdir()


def _readable_token(path):
    token = path.parent / "auth_token_0644"
    token.write_text("0123456789abcdef" * 4)
    os.chmod(token, 0o644)
    _aws_with('"~/.ray/auth_token": "~/.ray/auth_token"', f'"~/.ray/auth_token": "{token}"')(path)


# (case, how the file is made, a fragment of its error line: what to fix).
CLUSTER_CASES = [
    ("missing", lambda path: None, "no such file"),
    ("folder", _folder, "is a directory; pass a cluster YAML inside it"),
    ("empty", _text(""), "not a mapping"),
    ("only-comments", _text("# nothing\n"), "not a mapping"),
    ("scalar", _text("42\n"), "not a mapping"),
    ("list", _text("- a\n- b\n"), "not a mapping"),
    ("not-utf8", _bytes(b"\xff\xfe\x00garbage"), "check the file's permissions and encoding"),
    ("truncated", _text("cluster_name: a\nprovider:\n  type: aws\n  region: [us-w"), "YAML syntax error"),
    ("duplicate-key", _text("cluster_name: a\nprovider:\n  type: aws\n  region: a\n  region: b\n"),
     "`region` appears twice"),
    ("no-provider", _aws_with("provider:", "provider: null\nxprovider:"), "`provider:` needs a mapping"),
    ("workers-negative", _aws_with("max_workers: 8", "max_workers: -1"), "set it to 0 or more"),
    ("workers-nan", _aws_with("max_workers: 8", "max_workers: .nan"), "must be a whole number"),
    ("workers-inf", _aws_with("max_workers: 8", "max_workers: 1e400"), "must be a whole number"),
    ("workers-fraction", _aws_with("max_workers: 8", "max_workers: 2.5"), "must be a whole number"),
    ("workers-text", _aws_with("max_workers: 8", "max_workers: lots"), "must be a whole number"),
    ("workers-bool", _aws_with("max_workers: 8", "max_workers: true"), "must be a whole number"),
    ("workers-huge", _aws_with("max_workers: 8", "max_workers: 99999999999999999999"),
     "more than 10,000 nodes"),
    ("token-readable", _readable_token, "chmod 600"),
]


def test_bad_cluster_files_each_get_one_line_exit_2_and_stay_untouched(tmp_path):
    """The bad-input matrix for `rlplat cluster check`, one process for all files (Ray loads once)."""
    paths = []
    for case, make, _ in CLUSTER_CASES:
        path = tmp_path / f"{case}.yaml"
        make(path)
        paths.append(str(path))
    before = {p: (os.stat(p).st_mtime_ns, open(p, "rb").read()) for p in paths if os.path.isfile(p)}
    started = time.monotonic()
    result = _rlplat("cluster", "check", *paths)
    elapsed = time.monotonic() - started
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == len(CLUSTER_CASES), result.stderr
    for (case, _, fragment), path, line in zip(CLUSTER_CASES, paths, lines):
        assert line.startswith(f"{path}: error: ") and fragment in line, (case, line)
        assert "Traceback" not in line
    assert elapsed < 120.0, elapsed  # never blocks (all files together); not a speed test
    assert {p: (os.stat(p).st_mtime_ns, open(p, "rb").read()) for p in before} == before
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(p) for p in paths if os.path.exists(p)] + ["auth_token_0644"])
