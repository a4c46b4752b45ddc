"""``vcascade check``: counts what the file declares, in the singular for one."""

from __future__ import annotations

from pathlib import Path

from vcascade.app.cli import main
from vcascade.app.commands.check import plural

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def test_check_says_1_edge_not_1_edges(capsys):
    assert main(["check", str(DEMO)]) == 0
    assert capsys.readouterr().out == (
        f"{DEMO}: OK (2 cameras, 1 edge, 1 broker, 2 workers, 2 recognizers); the file only "
        "(--deep also opens the cameras, loads the models, checks key files and ports)\n")


def test_plural_adds_an_s_unless_the_count_is_1():
    assert [plural(n, "camera") for n in (0, 1, 2)] == ["0 cameras", "1 camera", "2 cameras"]
