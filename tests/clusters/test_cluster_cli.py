"""`rlplat cluster check`: `FILE: ok` / one `FILE: error: ...` line, exit 0 / 2, no TensorFlow."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rlplat(*args):
    return subprocess.run([sys.executable, "-m", "rlplat.launch.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


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
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
