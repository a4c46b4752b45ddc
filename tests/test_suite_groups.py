"""The suite's parallel run keeps each ``xdist_group`` on one worker (tests/conftest.py groups the role installs and
every module whose tests share a module-scoped fixture). pytest-xdist's ``--dist loadgroup`` learns a test's group
from a suffix it writes into the node id; pytest 9.2's structured node ids drop that write silently
(pytest-dev/pytest-xdist#1386), and the groups' session and module fixtures were then built once in each worker."""

from __future__ import annotations

import re
from pathlib import Path

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[1]

GROUPED = '''
import pytest

@pytest.fixture(scope="module")
def built():
    return object()

@pytest.mark.parametrize("i", range(4))
def test_marked(i):
    pass

@pytest.mark.parametrize("i", range(4))
def test_sharing_a_module_fixture(i, built):
    pass
'''


def test_loadgroup_runs_each_group_on_one_worker(pytester, monkeypatch):
    """Two workers, three groups of four tests (one marked by hand, one from a module-scoped fixture, one of plain
    tests marked ``installs`` by the suite's own hook) and four loose tests: each group's tests report one worker."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the suite's own hook, from tests/conftest.py
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    pytester.makepyfile(test_grouped=GROUPED.replace("def test_marked", '@pytest.mark.xdist_group("by-hand")\ndef test_marked'),
                        test_installs="import pytest\n\n@pytest.mark.installs\n@pytest.mark.parametrize('i', range(4))\n"
                                      "def test_install(i):\n    pass\n\n\n@pytest.mark.parametrize('i', range(4))\n"
                                      "def test_loose(i):\n    pass\n")  # fmt: skip
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")  # fmt: skip
    result.assert_outcomes(passed=16)
    workers: dict[str, set[str]] = {}
    for worker, test in re.findall(r"\[(gw\d)\][^\n]*PASSED (\S+)", result.stdout.str()):
        workers.setdefault(test.split("[")[0], set()).add(worker)
    for name in ("test_grouped.py::test_marked", "test_grouped.py::test_sharing_a_module_fixture",
                 "test_installs.py::test_install"):  # fmt: skip
        assert len(workers[name]) == 1, (name, workers, result.stdout.str()[-3000:])
