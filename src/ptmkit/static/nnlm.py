"""Neural probabilistic language model (Bengio, Ducharme, Vincent & Jauvin 2003).

For the ``n-1`` previous words ``w_{t-n+1} .. w_{t-1}``::

    x = [C(w_{t-1}), ..., C(w_{t-n+1})]        # [B, (n-1) m], C: [V+1, m] shared word features
    y = b + W x + U tanh(d + H x)               # [B, V]; W: direct connections (optional)
    P(w_t | context) = softmax(y)

Sentences are scored as ``<s>^(n-1) w_1 .. w_n </s>`` (the same predictions as
:class:`~ptmkit.static.kneser_ney.KneserNeyTrigram`), so perplexities and per-token
mixtures of the two models line up.  Words seen fewer than ``min_count`` times in the training
text become ``<unk>`` (Bengio et al. merged the rare Brown words into one symbol).

The model is an ``nn.Module`` whose ``forward(batch) -> StepOutput``; :class:`NGramWindows` is
its batch source (a pure function of ``(epoch, step)``) and :func:`train_nnlm` trains it with
the shared :class:`~ptmkit.train.trainer.Trainer`, early-stopping on validation perplexity.
The feature matrix ``C`` is exported as :class:`~ptmkit.static.vectors.WordVectors`.
"""

from __future__ import annotations

import copy
import itertools
import logging
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from ptmkit.errors import PtmError
from ptmkit.static.kneser_ney import pad_sentences
from ptmkit.static.vocab import iter_line_chunks
from ptmkit.train.step import StepOutput

log = logging.getLogger(__name__)

UNK, EOS, BOS = "<unk>", "</s>", "<s>"


# ----------------------------------------------------------------------------- vocabulary


@dataclass
class LMVocab:
    """Closed vocabulary of a language model: ``words`` [V] (with ``<unk>`` and ``</s>``);
    ``<s>`` gets the extra id ``V`` (context only, never predicted)."""

    words: list[str]
    counts: np.ndarray  # int64 [V] training counts (0 for <unk> and </s> unless counted)

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.words)}
        self.unk, self.eos, self.bos = self.index[UNK], self.index[EOS], len(self.words)

    def __len__(self) -> int:
        return len(self.words)


def build_lm_vocab(files: str | os.PathLike | list, min_count: int = 3) -> LMVocab:
    """Words of ``files`` seen at least ``min_count`` times, most frequent first, + ``<unk>``, ``</s>``."""
    files = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    counter: Counter = Counter()
    n_sent = 0
    for lines in iter_line_chunks(files):
        sents = [s for s in map(str.split, lines) if s]
        n_sent += len(sents)
        counter.update(itertools.chain.from_iterable(sents))
    if not counter:
        raise PtmError(f"no words in {', '.join(map(str, files))}")
    kept = sorted(((w, c) for w, c in counter.items() if c >= min_count and w not in (UNK, EOS, BOS)), key=lambda x: -x[1])
    if not kept:
        raise PtmError(f"no word occurs at least min_count={min_count} times; lower min_count")
    unk = sum(c for w, c in counter.items() if c < min_count or w == UNK)
    words = [w for w, _ in kept] + [UNK, EOS]
    counts = np.array([c for _, c in kept] + [unk, n_sent], dtype=np.int64)
    return LMVocab(words, counts)


def encode_lm(files: str | os.PathLike | list, vocab: LMVocab) -> tuple[np.ndarray, np.ndarray]:
    """Ids of every word of ``files`` (unknown words -> ``<unk>``) and sentence offsets.

    Returns ``(ids int64 [N], offsets int64 [S+1])``; blank lines are skipped.
    """
    files = [Path(files)] if isinstance(files, (str, os.PathLike)) else [Path(f) for f in files]
    get = vocab.index.get
    id_parts, len_parts = [], []
    for lines in iter_line_chunks(files):
        sents = [s for s in map(str.split, lines) if s]
        lens = np.fromiter(map(len, sents), dtype=np.int64, count=len(sents))
        words = itertools.chain.from_iterable(sents)
        id_parts.append(np.fromiter(map(get, words, itertools.repeat(vocab.unk)), dtype=np.int64, count=int(lens.sum())))
        len_parts.append(lens)
    lens = np.concatenate(len_parts) if len_parts else np.zeros(0, dtype=np.int64)
    if lens.sum() == 0:
        raise PtmError(f"no words in {', '.join(map(str, files))}")
    return np.concatenate(id_parts), np.concatenate([[0], np.cumsum(lens)])


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class NNLMConfig:
    """order: n (the model sees n-1 previous words); dim: m (word features); hidden: h (0: no
    hidden layer); direct: direct connections W from the features to the output.

    The default is a quick model; :meth:`paper` gives Bengio et al.'s best Brown MLP
    (n=5, m=60, h=50, direct connections; their Table 1, MLP1).
    """

    order: int = 4
    dim: int = 32
    hidden: int = 64
    direct: bool = False
    min_count: int = 3
    dropout: float = 0.0

    @classmethod
    def paper(cls, hidden: int = 50, direct: bool = True) -> "NNLMConfig":
        return cls(order=5, dim=60, hidden=hidden, direct=direct)

    def __post_init__(self) -> None:
        if self.order < 2 or self.dim < 1 or self.hidden < 0:
            raise PtmError(f"NNLM needs order >= 2, dim >= 1, hidden >= 0; got {self}")
        if self.hidden == 0 and not self.direct:
            raise PtmError("an NNLM without a hidden layer needs direct connections (direct=True)")


class NNLM(nn.Module):
    """Bengio et al.'s MLP language model.

    Parameters: ``C.weight`` [V+1, m] (row V = ``<s>``), ``H`` [h, (n-1)m] + ``d`` [h],
    ``U`` [V, h], ``W`` [V, (n-1)m] (if direct), ``b`` [V].
    """

    def __init__(self, vocab_size: int, cfg: NNLMConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        in_dim = (cfg.order - 1) * cfg.dim
        self.C = nn.Embedding(vocab_size + 1, cfg.dim)
        nn.init.uniform_(self.C.weight, -0.1, 0.1)
        self.H = nn.Linear(in_dim, cfg.hidden) if cfg.hidden else None  # bias = d
        self.U = nn.Linear(cfg.hidden, vocab_size, bias=False) if cfg.hidden else None
        self.W = nn.Linear(in_dim, vocab_size, bias=False) if cfg.direct else None
        self.b = nn.Parameter(torch.zeros(vocab_size))
        self.drop = nn.Dropout(cfg.dropout)

    def logits(self, context: torch.Tensor) -> torch.Tensor:
        """context: int64 [B, n-1] (oldest first) -> unnormalised log-probabilities [B, V]."""
        x = self.C(context).flatten(1)  # [B, (n-1) m]
        y = self.b
        if self.H is not None:
            y = y + self.U(self.drop(torch.tanh(self.H(x))))
        if self.W is not None:
            y = y + self.W(x)
        return y

    def forward(self, batch: dict[str, torch.Tensor]) -> StepOutput:
        """batch: ``context`` int64 [B, n-1], ``target`` int64 [B]; loss = mean cross-entropy."""
        logits = self.logits(batch["context"])
        loss = nn.functional.cross_entropy(logits, batch["target"])
        B = batch["target"].shape[0]
        return StepOutput(loss=loss, metrics={}, n_tokens=B, n_predictions=B)

    @torch.no_grad()
    def log_probs(self, source: "NGramWindows") -> np.ndarray:
        """Natural-log probability of every target of ``source`` in order, float64 [N]."""
        was = self.training
        self.eval()
        dev = next(self.parameters()).device
        out = []
        try:
            for batch in source.eval_batches():
                lp = torch.log_softmax(self.logits(batch["context"].to(dev)).float(), dim=-1)
                out.append(lp.gather(1, batch["target"].to(dev)[:, None])[:, 0].double().cpu().numpy())
        finally:
            self.train(was)
        return np.concatenate(out)

    def word_vectors(self, vocab: LMVocab):
        """The feature matrix C (without the ``<s>`` row) as WordVectors [V, m]."""
        from ptmkit.static.vectors import WordVectors

        return WordVectors(list(vocab.words), self.C.weight[: len(vocab)].detach().float().cpu().numpy(), vocab.counts)


# ----------------------------------------------------------------------------- batches


class NGramWindows:
    """(context, target) windows of a padded corpus; implements ``BatchSource``.

    padded: int64 [P] ids with ``n-1`` ``<s>`` before and ``</s>`` after every sentence;
    targets: int64 [N] positions of the predicted symbols in ``padded``.
    ``__call__(epoch, step)`` = rows ``step*B .. (step+1)*B`` of a permutation seeded by
    ``(seed, epoch)``: a pure function, so a resumed run sees the same batches.
    """

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, vocab: LMVocab, order: int, batch_size: int,
                 seed: int = 0, eval_batch_size: int = 4096):
        self.order = order
        self.padded, self.targets = pad_sentences(ids, offsets, vocab.bos, vocab.eos, order - 1)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.seed = seed
        self.steps_per_epoch = self.targets.shape[0] // batch_size
        self._perm_epoch, self._perm = -1, None
        self._offsets = np.arange(-(order - 1), 0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def _rows(self, pos: np.ndarray) -> dict[str, torch.Tensor]:
        ctx = self.padded[pos[:, None] + self._offsets]
        return {"context": torch.from_numpy(ctx), "target": torch.from_numpy(self.padded[pos])}

    def __call__(self, epoch: int, step: int) -> dict[str, torch.Tensor]:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng((self.seed, epoch)).permutation(self.targets.shape[0])
            self._perm_epoch = epoch
        rows = self._perm[step * self.batch_size:(step + 1) * self.batch_size]
        return self._rows(self.targets[rows])

    def eval_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        for lo in range(0, self.targets.shape[0], self.eval_batch_size):
            yield self._rows(self.targets[lo:lo + self.eval_batch_size])


# ----------------------------------------------------------------------------- training


class _EarlyStop(Exception):
    pass


class EarlyStopping:
    """Trainer callback: after each evaluation keep the best weights (lowest eval loss) and stop
    after ``patience`` evaluations without improvement."""

    def __init__(self, patience: int):
        self.patience = patience
        self.best = math.inf
        self.best_step = 0
        self.best_state: dict | None = None
        self.bad = 0
        self.history: list[tuple[int, float]] = []

    def __call__(self, trainer, step: int) -> None:
        ev = trainer.last_eval
        if not ev or ev.get("step") != step or (self.history and self.history[-1][0] == step):
            return
        self.history.append((step, float(ev["loss"])))
        if ev["loss"] < self.best - 1e-4:
            self.best, self.best_step, self.bad = float(ev["loss"]), step, 0
            self.best_state = copy.deepcopy(trainer.model.state_dict())
        else:
            self.bad += 1
            if self.bad >= self.patience:
                raise _EarlyStop()


def train_nnlm(
    train: tuple[np.ndarray, np.ndarray],
    valid: tuple[np.ndarray, np.ndarray],
    vocab: LMVocab,
    cfg: NNLMConfig = NNLMConfig(),
    train_cfg=None,
    run_dir: str | os.PathLike | None = None,
    patience: int = 2,
) -> tuple[NNLM, dict]:
    """Train an NNLM on ``train`` = (ids, offsets) with the shared Trainer.

    Evaluates on ``valid`` every ``train_cfg.eval_every`` steps, keeps the weights with the lowest
    validation loss and stops after ``patience`` evaluations without improvement.
    Returns the model (best weights) and stats (``valid_ppl``, ``best_step``, ``history``).
    """
    from ptmkit.train.config import TrainConfig
    from ptmkit.train.trainer import Trainer

    if train_cfg is None:
        train_cfg = TrainConfig(batch_size=256, lr=1e-3, max_steps=2000, eval_every=500, eval_batches=10**6,
                                schedule="constant", weight_decay=0.0, clip_norm=1.0, device="cpu", log_every=100)
    source = NGramWindows(*train, vocab, cfg.order, train_cfg.batch_size, seed=train_cfg.seed)
    valid_source = NGramWindows(*valid, vocab, cfg.order, train_cfg.batch_size, seed=train_cfg.seed)
    torch.manual_seed(train_cfg.seed)
    model = NNLM(len(vocab), cfg)
    stopper = EarlyStopping(patience)
    trainer = Trainer(model, source, train_cfg, run_dir=run_dir, eval_batches=valid_source, callbacks=[stopper])
    stopped = False
    try:
        trainer.fit()
    except _EarlyStop:
        stopped = True
    ev = trainer.last_eval if trainer.last_eval.get("step") == trainer.step else trainer.evaluate()
    if not stopper.history or stopper.history[-1][0] != trainer.step:
        stopper.history.append((trainer.step, float(ev["loss"])))
    if stopper.best_state is not None and stopper.best < ev["loss"]:
        model.load_state_dict(stopper.best_state)
    else:
        stopper.best, stopper.best_step = float(ev["loss"]), trainer.step
    stats = {
        "valid_ppl": math.exp(stopper.best),
        "best_step": stopper.best_step,
        "steps": trainer.step,
        "early_stopped": stopped,
        "history": stopper.history,
        "epochs": trainer.step / max(1, source.steps_per_epoch),
    }
    return model, stats
