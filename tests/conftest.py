"""What many test files share: tiny corpora, tiny model overrides, a tiny tokenizer, the CLI run
and checksum helpers.  Test files import the helpers (``from conftest import write_corpus``:
pytest puts this directory on ``sys.path``); fixtures are found by name."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ptmkit.cli import main

# Tests that write Parquet import pyarrow themselves; without its jemalloc background thread, the
# forks of `ptm prepare`'s workers later in the same process cannot deadlock (see textfiles._parquet).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.mlm import MaskedLM, MLMConfig

# the words of the tiny English corpora (a small vocabulary, so a tokenizer of 120 entries covers it)
WORDS = "the a cat dog sat ran on under mat house red big small quickly slowly and then saw it".split()

# `ptm pretrain bert-tiny` overrides for a model that trains in a second: the refusal and
# data-safety tests, which stop after two steps
TINY = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=64",
    "tokenizer.vocab_size=200", "tokenizer.min_frequency=1",
    "train.batch_size=4", "train.seq_len=32", "train.max_steps=2", "train.eval_batches=1", "train.num_threads=1",
]
# the same size for the pre-training smoke tests of the other presets (their steps set per test)
TINY_PRETRAIN = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.max_position=48", "model.num_heads=2",
    "train.batch_size=8", "train.seq_len=40", "train.warmup_steps=4", "train.lr=3e-3", "train.log_every=1",
    "train.eval_batches=2", "train.num_threads=1", "train.device=cpu",
]
# static word2vec settings that train in a blink
W2V = ["dim=8", "epochs=1", "min_count=1", "workers=1", "cache=false"]


def write_corpus(path: Path, docs: int = 20, seed: int = 0, sentences: int = 6, lengths: tuple[int, int] = (4, 12),
                 words: Sequence[str] = WORDS) -> Path:
    """``docs`` documents of ``sentences`` random sentences of ``lengths`` words each (one per
    line, a blank line after each document), drawn with ``seed``; returns ``path``."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            for _ in range(sentences):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(*lengths))) + "\n")
            f.write("\n")
    return path


def checksums(root: Path) -> dict[str, str]:
    """Every file under ``root``: relative path -> SHA-256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(root).rglob("*")) if p.is_file()}


def run_cli(argv, capsys) -> tuple[int, str]:
    """``ptm ARGV``: its exit status and what it wrote to stderr."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def cli_output(argv) -> tuple[int, str]:
    """``ptm ARGV`` as a user sees it: its exit status and everything it wrote to stdout and
    stderr, log lines included (formatted by the CLI's own logging set-up, which the test
    runner's handlers would otherwise pre-empt).  Usable outside a test function (a module fixture)."""
    import contextlib
    import io
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    text = io.StringIO()
    root.handlers.clear()  # so that main()'s logging.basicConfig installs its handler on our stderr
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            rc = main([str(a) for a in argv])
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return rc, text.getvalue()


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory) -> Path:
    """A WordPiece ``tokenizer.json`` of 120 entries trained by ``ptm tokenizer train`` on a tiny corpus."""
    root = tmp_path_factory.mktemp("tok")
    text = write_corpus(root / "text.txt")
    assert main(["tokenizer", "train", str(text), "--vocab-size", "120", "--min-frequency", "1",
                 "-o", str(root / "tok.json")]) == 0
    return root / "tok.json"


def special_ids(vocab_size: int, **changes: int) -> SimpleNamespace:
    """The tokenizer an encoder or objective is built with when a test needs no text: the vocabulary
    size and the special ids (``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3, ``[MASK]`` 4 unless
    ``changes`` says otherwise), as the HF parity tests build both sides on the same ids."""
    ids = dict(pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    return SimpleNamespace(vocab_size=vocab_size, **{**ids, **changes})


def look_alikes(root: Path) -> dict[str, Path]:
    """Folders that look like outputs but carry no ptm marker: an HF model directory, DeepSpeed
    and fairseq runs, and an earlier ptm run, corpus, vectors run and fine-tuning without one."""
    made = {}
    for name, files in {
        "hf": {"config.json": '{"model_type": "bert"}', "model.safetensors": "x", "tokenizer.json": "{}"},
        "deepspeed": {"config.json": "{}", "checkpoints/latest": "global_step10", "checkpoints/global_step10/x.pt": "x"},
        "fairseq": {"checkpoints/checkpoint_last.pt": "x", "checkpoints/checkpoint1.pt": "x", "train.log": "log"},
        "old-ptm-run": {"config.json": "{}", "metrics.jsonl": "{}", "checkpoints/latest": "step-0000002",
                        "checkpoints/step-0000002/model.safetensors": "x"},
        "old-ptm-corpus": {"tokens.bin": "xx", "meta.json": '{"tokenizer_sha256": "0"}'},
        "old-ptm-vectors": {"vectors.bin": "1 1", "config.json": '{"static": "word2vec"}'},
        "old-ptm-finetune": {"summary.json": "{}", "results.json": "{}", "pretrained-seed1/results.json": "{}"},
    }.items():
        d = root / name
        for rel, text in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
        made[name] = d
    return made


# ---------------------------------------------------------------- a tiny fine-tuned model, for compression tests

SENTIMENT_WORDS = "the a film movie plot actors scene story was is very quite rather".split()


def toy_sentiment(sizes: tuple[int, int, int] = (160, 60, 60), seed: int = 0):
    """A learnable two-class task: label 1 iff the sentence holds 'good' (else 'bad'); fillers around it."""
    import numpy as np

    from ptmkit.data.tasks import TaskData, TaskSplit

    rng = np.random.default_rng(seed)

    def split(n):
        texts, labels = [], []
        for _ in range(n):
            y = int(rng.integers(2))
            words = list(rng.choice(SENTIMENT_WORDS, size=int(rng.integers(3, 9))))
            words.insert(int(rng.integers(len(words) + 1)), "good" if y else "bad")
            texts.append(" ".join(words))
            labels.append(y)
        return TaskSplit(texts, np.array(labels, dtype=np.int64))

    return TaskData("toy-sentiment", [0, 1], *(split(n) for n in sizes))


def tiny_checkpoint(directory: Path, texts: Sequence[str], layers: int = 2, heads: int = 4, hidden: int = 32,
                    causal: bool = False, **model: object) -> Path:
    """A randomly initialised BERT (or, ``causal``, GPT) checkpoint with a WordPiece tokenizer trained on ``texts``."""
    import torch

    from ptmkit.build import build_model
    from ptmkit.encoders import TransformerConfig
    from ptmkit.pretrained import save_pretrained
    from ptmkit.tokenization import Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "text.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer.train([directory / "text.txt"], kind="wordpiece", vocab_size=200, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_layers=layers, num_heads=heads,
                            intermediate_size=2 * hidden, max_position=64, norm="pre" if causal else "post",
                            type_vocab_size=0 if causal else 2, pooler=not causal, dropout=0.0, attention_dropout=0.0,
                            **model)
    config = {"model": {"encoder": "transformer", **cfg.__dict__}, "tokenizer": {"kind": "wordpiece"}, "train": {},
              "objective": {"name": "clm"} if causal else {"name": "mlm", "nsp": False}}
    torch.manual_seed(0)
    return save_pretrained(directory / "ck", config, build_model(config, tok), tok)


def fine_tuned_toy(root: Path, task, run: str = "run", epochs: int = 2, max_seq_len: int = 32, **checkpoint: object) -> dict:
    """:func:`tiny_checkpoint` (``checkpoint``: its options) on ``task``'s training texts in ``root/model``,
    fine-tuned on ``task`` into ``root/run`` (LR 3e-3, batch 16, seed 0); returns the fine-tuning's result."""
    from ptmkit.pretrained import load_pretrained
    from ptmkit.tasks.finetune import FinetuneConfig, finetune

    ck = tiny_checkpoint(root / "model", task.train.texts, **checkpoint)
    cfg = FinetuneConfig(epochs=epochs, lr=3e-3, batch_size=16, max_seq_len=max_seq_len)
    return finetune(load_pretrained(ck, heads=False), task, root / run, cfg, seed=0, progress=False)


def task_file_args(task, root: Path) -> list:
    """Write a classification task's splits as JSONL files under ``root``; returns the CLI arguments
    ``--train F --dev F --test F`` that read them back."""
    import json

    args: list = []
    for split in ("train", "dev", "test"):
        s = task.split(split)
        path = root / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"text": t, "label": int(y)}) + "\n" for t, y in zip(s.texts, s.labels)))
        args += [f"--{split}", path]
    return args


TINY_MLM_VOCAB = 60


def tiny_mlm(p: float = 0.0) -> PretrainModel:
    """A 2-layer, 32-wide BERT with its MLM head (no NSP), seeded; ``p`` is every dropout rate."""
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=TINY_MLM_VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position=32, dropout=p, attention_dropout=p, pooler=False)
    encoder = TransformerEncoder(cfg)
    return PretrainModel(encoder, MaskedLM(MLMConfig(nsp=False), encoder, special_ids(TINY_MLM_VOCAB)))


def mlm_batch(model: PretrainModel, seed: int = 0) -> dict[str, torch.Tensor]:
    """Four rows of 16 tokens masked by ``model``'s objective, one row padded and one slot unused."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, TINY_MLM_VOCAB, size=(4, 16)).astype(np.int64)
    attention = np.ones_like(ids)
    attention[1, 12:] = 0  # one padded row: the compiled graph must take the mask too
    positions, labels = model.objective.mask_tokens(ids, attention, rng)
    labels[2, -1] = -100  # an unused slot: the compiled path runs it through the head and ignores it
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": t(np.zeros_like(ids)),
            "mlm_positions": t(positions), "mlm_labels": t(labels)}
