"""tests/conftest.py stops the Reverb servers a module started, but not a session fixture's.

A made-up two-module suite laid out like this repository's (the project
conftest in ``tests/``, the shared server's fixture in a sub-folder's conftest,
as ``tests/replay`` has it): a session-scoped server is first built by module
a's second test (so after the module's own fixtures, as happens when a
module's first test does not need it), a module-scoped one too; module b must
still reach the first and must find the second stopped.
(Stopping every server a module started failed
``tests/replay/test_replay_server.py`` in CI whenever another replay module on
the same worker had built the shared server first, e.g. after
``test_replay_packing.py``; a first fix, a conftest hook, passed a version of
this test whose conftest sat at the root, but pytest does not call a
``tests/`` conftest's hooks for session fixtures.)
"""

import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROJECT_CONFTEST = textwrap.dedent('''
    import importlib.util
    import os
    import sys

    sys.path.insert(0, os.path.dirname({conftest!r}))  # its helper modules (tests/scheduling.py)
    _spec = importlib.util.spec_from_file_location("rlplat_tests_conftest", {conftest!r})
    _project = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_project)
    # Hooks and fixtures are found by name in a conftest's namespace.
    globals().update({{k: v for k, v in vars(_project).items() if k.startswith(("pytest_", "_reverb_"))}})
''')

_FOLDER_CONFTEST = textwrap.dedent('''
    import pytest
    import reverb


    def _server():
        return reverb.Server([reverb.Table.queue("q", 10)])


    @pytest.fixture(scope="session")
    def shared_server():
        return _server()


    @pytest.fixture(scope="module")
    def module_server():
        return _server()
''')

_MODULE_A = textwrap.dedent('''
    def test_a_first():  # so that the shared server is built after the module's own fixtures
        pass


    def test_a(shared_server, module_server, tmp_path_factory):
        path = tmp_path_factory.getbasetemp() / "module_a_port"
        path.write_text(str(module_server.port))
''')

_MODULE_B = textwrap.dedent('''
    import reverb
    import pytest


    def _answers(port):
        try:
            reverb.Client(f"127.0.0.1:{port}").server_info(timeout=3)
            return True
        except Exception:  # pylint: disable=broad-except
            return False


    def test_b(shared_server, tmp_path_factory):
        assert _answers(shared_server.port), "the session fixture's server was stopped"
        port = int((tmp_path_factory.getbasetemp() / "module_a_port").read_text())
        assert not _answers(port), "module a's own server outlived its module"
''')


@pytest.mark.multiprocess
def test_a_modules_servers_stop_with_it_but_a_session_fixtures_server_does_not(tmp_path):
    suite = tmp_path / "suite"
    folder = suite / "tests" / "replay"
    folder.mkdir(parents=True)
    (suite / "pytest.ini").write_text("[pytest]\n")  # the root directory, above tests/
    (suite / "tests" / "conftest.py").write_text(
        _PROJECT_CONFTEST.format(conftest=os.path.join(REPO, "tests", "conftest.py")))
    (folder / "conftest.py").write_text(_FOLDER_CONFTEST)
    (folder / "test_a.py").write_text(_MODULE_A)
    (folder / "test_b.py").write_text(_MODULE_B)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             "--basetemp", str(tmp_path / "base"), "tests/replay/test_a.py",
                             "tests/replay/test_b.py"],
                            cwd=str(suite), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout, result.stdout[-2000:]
