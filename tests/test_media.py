"""tests/media.py: $VCASCADE_TEST_MEDIA names either the folder holding bad-inputs/ or bad-inputs/ itself, and a
corpus found nowhere is an error naming the folders tried and the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.media import CorpusNotFound, bad_inputs_dir

REPO = Path(__file__).resolve().parents[1]


def corpus(root: Path) -> Path:
    """A minimal corpus folder ``root/bad-inputs`` (its README.md marks it)."""
    (root / "bad-inputs").mkdir(parents=True)
    (root / "bad-inputs" / "README.md").write_text("# Hard inputs\n")
    return root / "bad-inputs"


def test_either_folder_names_the_corpus(tmp_path):
    folder = corpus(tmp_path / "media")
    assert bad_inputs_dir({"VCASCADE_TEST_MEDIA": str(tmp_path / "media")}) == folder
    assert bad_inputs_dir({"VCASCADE_TEST_MEDIA": str(folder)}) == folder


def test_without_the_variable_the_corpus_is_beside_the_models_folder(tmp_path):
    folder = corpus(tmp_path / "shared" / "media")
    assert bad_inputs_dir({"VCASCADE_TEST_MODELS": str(tmp_path / "shared" / "models")}) == folder
    assert bad_inputs_dir({}, repo=tmp_path / "checkout") == folder  # ../shared/models beside the checkout


def test_a_folder_without_the_corpus_is_an_error_naming_what_was_tried(tmp_path):
    with pytest.raises(CorpusNotFound) as e:
        bad_inputs_dir({"VCASCADE_TEST_MEDIA": str(tmp_path)})
    assert str(tmp_path / "bad-inputs") in str(e.value) and "VCASCADE_TEST_MEDIA" in str(e.value)


@pytest.mark.parametrize("child", [False, True], ids=["holding-folder", "bad-inputs-itself"])
def test_the_hard_input_tests_run_with_either_folder(bad_inputs, child):
    """A real pytest run of one corpus test, with the variable naming each of the two folders."""
    given = bad_inputs if child else bad_inputs.parent
    env = {**os.environ, "VCASCADE_TEST_MEDIA": str(given)}
    test = ("tests/edge/capture/test_hard_inputs.py::"
            "test_transport_stream_cut_on_a_pes_boundary_leaves_every_packet_whole")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
