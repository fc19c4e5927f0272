"""No line ``ptm`` writes while it works runs past 200 characters: every command that logs,
run on tiny inputs as a user runs it (info logging and line progress on), its stdout and stderr
read line by line.  A long line wraps badly in a terminal and is cut in log viewers; the
messages that carry advice are the ones that grow long."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from conftest import SENTIMENT_WORDS, TINY, cli_output, task_file_args, toy_sentiment, write_corpus

WIDTH = 200
SRC = Path(__file__).resolve().parents[2] / "src" / "ptmkit"
# the toy task's words, so that the tiny model's tokenizer knows the task's text
WORDS = [*SENTIMENT_WORDS, "good", "bad"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, str]:
    """Each command's output, in the order a user would run them (each reads what the one before wrote)."""
    torch.set_num_threads(1)
    # paths as long as a user's (75 characters here): many lines name a file or two
    root = tmp_path_factory.mktemp("log-width") / "projects" / "ptm-experiments"
    text = write_corpus(root / "text.txt", docs=30, words=WORDS)
    files = task_file_args(toy_sentiment(), root)
    (root / "in.txt").write_text("the film was good\na very bad plot\n")
    run, ft = root / "run", root / "ft" / "pretrained-seed0"
    tiny = [*TINY, "model.max_position=128", "train.max_steps=4", "train.log_every=1"]  # evaluate reads 128 tokens
    task = ["--train-size", "16", "--eval-size", "12", "--seeds", "1", "--lrs", "1e-3", "--epochs", "1"]
    commands = {
        "pretrain": ["pretrain", "bert-tiny", "--data", text, "-o", run, *tiny],
        "finetune": ["finetune", run, *files, "-o", root / "ft", "epochs=1", "max_seq_len=24", "batch_size=16"],
        "evaluate": ["evaluate", run, "--suite", "mr", "-o", root / "eval", "--modes", "finetune", "--no-baseline",
                     *task],
        "compare": ["compare", "mlm=bert-tiny:objective.nsp=false", "clm=gpt2-tiny:model.max_position=32", "--data",
                    text, "--budget", "30M", "-o", root / "cmp", "--tasks", "mr", "--set", *TINY, "--points", "1",
                    *task],
        "distil": ["distil", ft, *files, "-o", root / "distil", "--layers", "0", "epochs=1", "max_seq_len=24",
                   "batch_size=16"],  # a small set: augmentation and labels-only twins on, as by default
        "prune": ["prune", ft, *files, "--rounds", "1", "--threads", "1", "--fraction", "0.25", "-o", root / "prune"],
        "quantize": ["quantize", ft, *files, "--int8", "--rounds", "1", "-o", root / "int8"],
        "predict": ["predict", ft, "--input", root / "in.txt", "-o", root / "pred.jsonl"],
        "encode": ["encode", run, "--input", root / "in.txt", "-o", root / "vectors.npy"],
        "generate": ["generate", root / "cmp" / "runs" / "clm", "the film", "--max-new-tokens", "4"],
        "export": ["export", run, "-o", root / "hf"],
        "import": ["import", root / "hf", "-o", root / "back"],
        "analyse": ["analyse", run, "--corpus", text, "--what", "contextuality", "-o", root / "analyse"],
    }
    out = {}
    for name, argv in commands.items():
        rc, printed = cli_output(argv)
        assert rc == 0, (name, printed[-3000:])
        out[name] = printed
    return out


COMMANDS = ["pretrain", "finetune", "evaluate", "compare", "distil", "prune", "quantize", "predict", "encode",
            "generate", "export", "import", "analyse"]


def too_long(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_line_is_longer_than_200_characters(logs, command):
    printed = logs[command]
    assert printed.strip(), f"ptm {command} printed nothing: the test would prove nothing"
    long = too_long(printed)
    assert not long, f"ptm {command}: {len(long)} line(s) over {WIDTH} characters, e.g. {long[0]!r}"


def test_the_logs_carry_the_info_lines_a_user_sees(logs):
    """The capture holds the CLI's formatted log lines (time, level, logger), not only what is printed."""
    assert " INFO ptmkit." in logs["pretrain"] and " INFO ptmkit." in logs["distil"]



PLACEHOLDER = re.compile(r"%%|%[-#0 +]*\d*(?:\.\d+)?[sdirfgex]")
LEVELS = ("debug", "info", "warning", "error")


def _text(node: ast.AST) -> str:
    """A message's fixed text, each value it formats in (``%s``, ``{x}``) as 8 characters."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "#" * 8 for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return ""


def test_no_logging_call_leaves_too_little_room():
    """The conditions most warnings need (a CPU without bf16, text a tokenizer does not cover) are not
    met on tiny inputs: each logging call of ptmkit is read instead, its fixed text, a value of 8
    characters for each it formats, and the CLI's prefix (time, level, logger) held to 200."""
    long = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            f = getattr(node, "func", None)
            if not (isinstance(f, ast.Attribute) and f.attr in LEVELS and getattr(f.value, "id", "") in ("log", "logger")
                    and node.args):
                continue
            text = PLACEHOLDER.sub(lambda m: "%" if m.group() == "%%" else "#" * 8, _text(node.args[0]))
            prefix = f"00:00:00 WARNING {module}: "
            long += [f"{path.name}:{node.lineno}" for line in text.split("\n") if len(prefix + line) > WIDTH]
    assert not long, f"logging calls whose lines run past {WIDTH} characters: {long}"
