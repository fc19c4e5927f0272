"""The ``ptm`` command.

Each sub-command lives in ``ptmkit/commands/<name>.py`` and exposes ``register(subparsers)``.
User errors (:class:`ptmkit.errors.PtmError`, and a full disk or missing write permission) print
one ``error:`` line and exit with 2.  Output piped into a reader that stops early (``| head``)
ends the command quietly with status 141, as a Unix tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys

from ptmkit import __version__
from ptmkit.commands import WrappedHelpParser, verbosity_options
from ptmkit.errors import PtmError, os_error_message
from ptmkit.verbosity import set_quiet

# Order shown in ``ptm --help``.
COMMANDS = (
    "data",
    "tokenizer",
    "prepare",
    "pretrain",
    "finetune",
    "predict",
    "encode",
    "distil",
    "prune",
    "quantize",
    "evaluate",
    "compare",
    "budget",
    "analyse",
    "generate",
    "export",
    "import_",
    "vectors",
    "fasttext_classify",
    "info",
    "runs",
    "demo",
)

DESCRIPTION = """\
ptmkit: pre-train language models on your own corpus, from word2vec to BERT and GPT-2,
fine-tune them on downstream tasks and exchange them with HF transformers.

typical flow:
  ptm data get ptb mr                      fetch real data into the cache
  ptm tokenizer train --kind wordpiece ... train a tokenizer
  ptm prepare CORPUS.txt -t TOK -o DIR     tokenize into memory-mapped shards
  ptm pretrain bert-tiny --data DIR -o RUN pre-train (key=value overrides)
  ptm finetune RUN --task mr               fine-tune and evaluate
  ptm predict FT_RUN --input F -o OUT      a fine-tuned model on new text (JSONL, CoNLL)
  ptm encode RUN --input F -o V.npy        sentence vectors (mean / cls / last pooling, SIF)
  ptm compare bert-tiny electra-tiny ...   objectives at equal compute
  ptm budget bert-tiny --budgets 1e13,...  when pre-training pays: a model per FLOPs budget
  ptm distil / prune / quantize RUN ...    compress a fine-tuned model and measure it
  ptm analyse RUN ...                      probes, contextuality, attention heads
  ptm generate RUN "a prompt"              continue a text (clm) or rewrite it (bart, t5)
  ptm demo                                 all of the above, end to end
"""


def build_parser() -> argparse.ArgumentParser:
    parser = WrappedHelpParser(
        prog="ptm", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"ptmkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only: no progress displays")
    parser.add_argument("--private", action="store_true",
                        help="make what the command writes readable by you alone (files 600, directories 700)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=WrappedHelpParser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"ptmkit.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"ptmkit.commands.{name}":
                continue
            raise
        module.register(sub)
    verbosity_options(sub)  # --quiet / --verbose after every sub-command too
    return parser


# Loggers of other packages capped at a level, each for a reason: named here, never a blanket filter.
THIRD_PARTY_LEVELS = {
    "torchao": logging.ERROR,  # imported by transformers; says at import that CUDA kernels are absent on a CPU
    "torch.utils._pytree": logging.ERROR,  # torchao's deprecated enum registrations, at import
    "absl": logging.WARNING,  # rouge_score's INFO lines while scoring a seq2seq task
    "matplotlib": logging.WARNING,  # its font manager's DEBUG lines under --verbose
    "PIL": logging.WARNING,  # PNG chunk DEBUG lines under --verbose
}


def quiet_third_party() -> None:
    """Cap the loggers of :data:`THIRD_PARTY_LEVELS` (ptmkit's own follow --quiet / --verbose)."""
    for name, level in THIRD_PARTY_LEVELS.items():
        logging.getLogger(name).setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quiet and args.verbose:
        parser.error("--quiet and --verbose exclude each other")
    set_quiet(args.quiet)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    quiet_third_party()
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    succeeded = False
    umask = os.umask(0o077) if args.private or os.environ.get("PTMKIT_PRIVATE") == "1" else None
    try:
        rc = args.func(args)
        sys.stdout.flush()  # a reader gone away shows here, not in the interpreter's exit flush
        succeeded = True
    except BrokenPipeError:
        _silence_stdout()
        return 128 + signal.SIGPIPE
    except PtmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        # A full disk or a directory without write permission is the user's to fix, wherever it
        # surfaces; any other OSError is a bug and keeps its traceback.
        message = os_error_message(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2
    finally:
        if umask is not None:
            os.umask(umask)
        set_quiet(False)  # a caller that runs main() in its own process keeps its progress displays
        _end_process_group(succeeded)
    return int(rc or 0)


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so that the flush at exit finds nowhere to fail (the
    recipe of Python's ``signal`` documentation, "Note on SIGPIPE")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a capture in tests): nothing to flush into
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _end_process_group(succeeded: bool) -> None:
    """Under ``torchrun``, every rank tears the process group down together before it exits
    (see :func:`ptmkit.train.distributed.cleanup`); a command that never touched torch skips this."""
    if "torch.distributed" in sys.modules:
        from ptmkit.train import distributed

        distributed.cleanup(succeeded)


if __name__ == "__main__":
    sys.exit(main())
