"""docs/outputs.md and the --help texts state the same output rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptmkit.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "outputs.md"


@pytest.mark.parametrize(
    "command, phrases",
    [
        ("prepare", ["DIR must be new, empty, or a corpus ptm prepared", ".ptmkit-output.json",
                     "input file\ninside DIR is refused", "other files stay"]),
        ("pretrain", ["RUN_DIR must be new, empty, or a run directory ptm made", ".ptmkit-output.json",
                      "RUN_DIR has no checkpoint", "differs from the run's", "never any other file",
                      "removes the RUN_DIR it created"]),
        ("finetune", ["OUT must be new, empty, or (with --overwrite)", "leaves nothing behind", "other files in OUT are kept"]),
        ("export", ["DIR must not exist or be empty: nothing is overwritten"]),
        ("import", ["CKPT_DIR must not exist or be empty: nothing is overwritten"]),
    ],
)
def test_help_states_the_output_rules(command, phrases, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse re-wraps option help
    for phrase in phrases:
        assert " ".join(phrase.split()) in text, phrase


def test_docs_page_covers_what_the_help_says():
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    for phrase in ["ptm prepare", "ptm pretrain", "ptm finetune", "ptm export", "ptm import", ".ptmkit-output.json",
                   "new, empty, or holds ptm's own output of the same kind", "An input inside the output directory",
                   "`--overwrite` removes only the files ptm wrote", "RUN_DIR does not exist or has no checkpoint",
                   "even one with the same vocabulary size", "never changes on resume", "A failed command leaves nothing behind"]:
        assert phrase in doc, phrase
