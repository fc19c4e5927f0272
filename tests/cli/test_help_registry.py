"""Help texts built from the registries: every registered name of the kinds a command's --help
lists appears in it, so a component added by one file shows up without editing the help."""

import subprocess
import sys

import pytest

from ptmkit import registry
from ptmkit.cli import COMMANDS, main
from ptmkit.commands import hf_formats, hf_model_types
from ptmkit.data.tasks import builtin_tasks
from ptmkit.interop import formats, importable

CASES = {
    "export": lambda: {"format": formats(), "hf_family": registry.names("hf_family")},
    "import": lambda: {"model_type": importable(), "hf_family": registry.names("hf_family")},
    "finetune": lambda: {"task": list(builtin_tasks()), "task_type": registry.names("task_type")},
    "pretrain": lambda: {"encoder": registry.names("encoder"), "objective": registry.names("objective"),
                         "static": registry.names("static")},
}


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(CASES))
def test_help_names_every_registered_component(command, capsys):
    text = _help(command, capsys)
    assert "{names:" not in text  # every placeholder expanded
    for kind, names in CASES[command]().items():
        assert names, f"no {kind} registered"
        missing = [n for n in names if n not in text]
        assert not missing, f"ptm {command} --help does not name the {kind}s {missing}"


def test_a_newly_registered_task_type_appears_in_the_help(capsys, monkeypatch):
    """The help is computed when printed: a component registered later is listed too."""
    registry.names("task_type")  # every package imported first
    monkeypatch.setitem(registry._REGISTRY["task_type"], "made_up_type", object())
    assert "made_up_type" in _help("finetune", capsys)


def test_declared_names_are_the_registered_ones():
    """Help texts read the names from the source files (no import); they must be what importing
    the packages registers, kind by kind, each kind in its own package, and the HF formats and
    model types the families declare."""
    for kind in registry.KIND_PACKAGES:
        assert registry.declared(kind) == registry.names(kind), kind
    assert hf_formats() == list(formats()) and hf_model_types() == list(importable())


def test_help_starts_without_importing_the_components():
    """Every help text that lists registered components (encoders, objectives, static models,
    presets, tasks, HF formats) is written without importing torch, scipy or numba (a CLI that
    answers at once; the times: benchmarks/cli_startup.py)."""
    for command in ("pretrain", "finetune", "export", "import"):
        code = (f"import sys\nfrom ptmkit.cli import main\ntry:\n    main(['{command}', '--help'])\nexcept SystemExit:\n"
                "    pass\nprint('HEAVY', sorted(m for m in ('torch', 'numba', 'scipy', 'matplotlib') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert "HEAVY []" in out, (command, out[-300:])


def test_every_help_line_fits_100_characters(capsys):
    for command in ["", *COMMANDS]:
        with pytest.raises(SystemExit) as exc:
            main([*([command.rstrip("_").replace("_", "-")] if command else []), "--help"])
        out = capsys.readouterr().out
        long = [line for line in out.splitlines() if len(line) > 100]
        assert exc.value.code == 0 and out and not long, (command, long[:2])


def test_a_paragraph_with_a_long_expanded_line_is_filled_again_as_a_whole():
    """Names expanded into a description make one line long; its paragraph is refilled, so no short
    remnant is left mid-paragraph, while option rows and list items keep their layout."""
    from ptmkit.commands import wrap_help

    names = ", ".join(f"family{i}" for i in range(12))
    text = (f"Supported: {names}; one each.  The\nrest of the paragraph follows here and\nends.\n\n"
            "  --flag NAME      an option row that is short\n- a list item\n")
    out = wrap_help(text, width=60).splitlines()
    blank = out.index("")
    paragraph = out[:blank]
    assert " ".join(paragraph).split() == f"Supported: {names}; one each.  The rest of the paragraph follows here and ends.".split()
    assert all(len(line) <= 60 for line in paragraph) and all(len(line) > 30 for line in paragraph[:-1])
    assert out[blank + 1:] == ["  --flag NAME      an option row that is short", "- a list item"]
    assert wrap_help("short\nlines\n", width=60) == "short\nlines\n"
