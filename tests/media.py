"""Where the tests find the hard-input video corpus (``bad-inputs/``, hard inputs from public bug reports).

``$VCASCADE_TEST_MEDIA`` may name either folder: the one holding ``bad-inputs/`` or ``bad-inputs/`` itself.
Without it: ``media/bad-inputs`` beside the shared models folder (``$VCASCADE_TEST_MODELS/..``), else
``../shared/media/bad-inputs`` beside the checkout. The corpus is read-only: tests copy what they change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = "bad-inputs"
MARKER = "README.md"
"""Every corpus folder holds its README.md (what each file is and what a correct reader does)."""


class CorpusNotFound(LookupError):
    """The bad-inputs corpus is in none of the folders looked at; the message names them and the variable."""


def corpus_candidates(env: Mapping[str, str] | None = None, repo: Path = REPO) -> list[Path]:
    """The folders that may be the corpus, in the order they are tried.

    With ``VCASCADE_TEST_MEDIA`` set: ``$VCASCADE_TEST_MEDIA/bad-inputs``, then ``$VCASCADE_TEST_MEDIA`` itself.
    Without: ``$VCASCADE_TEST_MODELS/../media/bad-inputs`` (models default ``../shared/models`` beside ``repo``)."""
    env = os.environ if env is None else env
    if env.get("VCASCADE_TEST_MEDIA"):
        given = Path(env["VCASCADE_TEST_MEDIA"]).expanduser()
        return [given / CORPUS, given]
    models = Path(env.get("VCASCADE_TEST_MODELS") or repo.parent / "shared" / "models").expanduser()
    return [models.parent / "media" / CORPUS]


def bad_inputs_dir(env: Mapping[str, str] | None = None, repo: Path = REPO) -> Path:
    """The corpus folder: the first of :func:`corpus_candidates` holding ``README.md``.

    Raises :class:`CorpusNotFound` naming every folder tried and ``VCASCADE_TEST_MEDIA``."""
    tried = corpus_candidates(env, repo)
    for folder in tried:
        if (folder / MARKER).is_file():
            return folder
    raise CorpusNotFound(
        f"the {CORPUS} corpus (a folder with {MARKER}) is not in {' nor '.join(str(p) for p in tried)}; set "
        f"VCASCADE_TEST_MEDIA to the shared media folder or to its {CORPUS}/ folder")
