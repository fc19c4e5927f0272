"""What pre-trained models have learned: the workflow behind ``ptm analyse`` (docs/analysis.md).

1. OUT is checked and every model loaded before anything slow: pre-training runs and checkpoints
   of every encoder family, HF directories, and with ``random_twins`` a random-init copy of each
   (same architecture, tokenizer and config).  An analysis a model cannot have (attention on an
   LSTM, head importance without pre-training heads, a layer beyond the model) is refused here.
2. Per model, in order, the analyses of ``what`` (:mod:`ptmkit.analysis`):

   * ``contextuality``: Ethayarajh's statistics over the corpus (streamed; words with at least 5
     occurrences) and first-PC static vectors of ``static_layers`` as word2vec text files in
     ``OUT/vectors/`` (``ptm vectors evaluate`` reads them);
   * ``probe``: POS on ``pos_task`` (brown-pos, gold) and, with ``trees``, relation labels and the
     structural probe, each with its control task, plus Tenney's expected layer and center of gravity;
   * ``attention``: Clark et al.'s head statistics (and, on ``trees``, per-relation head accuracy in
     both directions and the attention-only probe trained on the training trees);
   * ``heads``: Michel et al.'s head importance under the model's own pre-training loss.

3. ``analysis.json`` (every number), ``report.md`` and the figures (``OUT/figures/``) go to OUT through
   ``outputs.writing`` (kind ``analyse``).  The same command gives the same numbers: every draw
   (the baseline's sample, control tasks, probe initialisation and batches, masking) is seeded
   from ``seed``, and PyTorch runs on ``threads`` threads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ptmkit import outputs
from ptmkit.analysis.attention_probe import UPDATES
from ptmkit.analysis.attention_run import attention
from ptmkit.analysis.contextuality_run import check_layers, contextuality
from ptmkit.analysis.importance_run import check_importance, importance
from ptmkit.analysis.models import Subject, load_subject, random_twin
from ptmkit.analysis.probes import ProbeConfig
from ptmkit.analysis.probing import dependency_probes, pos_probe
from ptmkit.analysis.treebank import check_words, treebank_splits
from ptmkit.compress.importance import head_shape
from ptmkit.data.sources.base import fetch
from ptmkit.data.tasks import load_task
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.tasks.tagging import TaggingSplit, read_tagged
from ptmkit.workflows.analyse_report import report, write_figures
from ptmkit.workflows.quantize import cpu_name

WHAT = ("contextuality", "probe", "attention", "heads")
JSON_FILE, REPORT_FILE, FIGURES_DIR, VECTORS_DIR = "analysis.json", "report.md", "figures", "vectors"


def parse_what(what: str | Sequence[str]) -> list[str]:
    """``"contextuality,probe"`` -> the analyses, checked against :data:`WHAT`."""
    items = [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w.strip()]
    bad = [w for w in items if w not in WHAT]
    if bad or not items:
        raise PtmError(f"--what takes a comma-separated list of {', '.join(WHAT)}; got {what!r}")
    return list(dict.fromkeys(items))


def _check(subject: Subject, what: list[str], static_layers: Sequence[int]) -> None:
    if "contextuality" in what:
        check_layers(subject, static_layers)
    if "attention" in what:
        head_shape(subject.backbone)  # an LSTM: "the lstm encoder has no attention heads ..."
    if "heads" in what:
        check_importance(subject)


def _tagging(task: str, train: int, test: int) -> tuple[TaggingSplit, TaggingSplit]:
    """The POS probe's sentences: a built-in tagging task's train and test splits, or a tagged file
    (JSONL tokens/tags or CoNLL) whose first sentences train and the rest test."""
    if Path(task).is_file():
        split = read_tagged(task)
        k = min(train, len(split) * 3 // 4)
        return split.subset(np.arange(k)), split.subset(np.arange(k, min(len(split), k + test)))
    data = load_task(task)
    if getattr(data, "task_type", None) != "tagging":
        raise PtmError(f"--pos-task {task} is not a tagging task")
    return (data.train.subset(np.arange(min(train, len(data.train)))),
            data.test.subset(np.arange(min(test, len(data.test)))))


def _trees(trees: str | Path | None, train: int, test: int) -> tuple[list, list, str] | None:
    if trees is None:
        return None
    path = Path(trees)
    return treebank_splits(path if path.exists() else fetch(str(trees)), train, test)


def analyse(runs: Sequence[str | Path], corpus: str | Path, out: str | Path, what: str | Sequence[str] = WHAT,
            random_twins: bool = False, labels: Sequence[str] | None = None, static_layers: Sequence[int] = (1,),
            max_sentences: int | None = 5000, max_words: int | None = 2000, pooling: str = "first",
            pos_task: str = "brown-pos", trees: str | Path | None = None, probe_sentences: tuple[int, int] = (1000, 300),
            probe_epochs: int = 10, attention_sentences: int = 500, attention_probe_updates: int = UPDATES,
            seed: int = 0, threads: int = 1,
            overwrite: bool = False, progress: bool = True) -> dict[str, Any]:
    """``ptm analyse`` (see the module docstring).  Returns what ``OUT/analysis.json`` holds."""
    what = parse_what(what)
    out, corpus = Path(out), Path(corpus)
    if not corpus.is_file():
        raise PtmError(f"--corpus {corpus} is not a file: give a text file, one sentence per line")
    if labels is not None and len(labels) != len(runs):
        raise PtmError(f"--label was given {len(labels)} times for {len(runs)} models; give one per model or none")
    inputs = [Path(r) for r in runs] + [corpus]
    outputs.check(out, "analyse", inputs, overwrite)
    started = time.time()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        subjects = []
        for k, run in enumerate(runs):
            s = load_subject(run, labels[k] if labels else None)
            subjects.append(s)
            if random_twins:
                subjects.append(random_twin(s, seed))
        for s in subjects:
            _check(s, what, static_layers)
        tagged = _tagging(pos_task, *probe_sentences) if "probe" in what else None
        bank = _trees(trees, *probe_sentences) if ("probe" in what or "attention" in what) else None
        if bank is not None:
            for s in subjects:
                check_words(bank[0], s.tokenizer, s.causal, f"{bank[2]}, training")
                check_words(bank[1], s.tokenizer, s.causal, f"{bank[2]}, test")
        cfg = ProbeConfig(epochs=probe_epochs, seed=seed)
        results: dict[str, Any] = {}
        with outputs.writing(out, "analyse", inputs, overwrite=overwrite) as session:
            if overwrite and session.state == "own":
                outputs.clean(out)
            for s in subjects:
                print(f"analysing {s.label} ({s.encoder_name})", flush=True)
                r: dict[str, Any] = {"source": s.source, "encoder": s.encoder_name, "causal": s.causal}
                if "contextuality" in what:
                    (out / VECTORS_DIR).mkdir(exist_ok=True)
                    r["contextuality"] = contextuality(s, corpus, out / VECTORS_DIR, static_layers, max_sentences, max_words,
                                                       pooling=pooling, seed=seed, progress=progress)
                if "probe" in what:
                    r["probe"] = {"pos": pos_probe(s, *tagged, cfg, pooling=pooling, seed=seed)}
                    if bank is not None:
                        dep = dependency_probes(s, bank[0], bank[1], cfg, pooling=pooling, seed=seed)
                        r["probe"]["relations"] = dep.pop("relations")
                        r["probe"]["structural"] = dep.pop("structural")
                        r["probe"]["treebank"] = {**dep, "source": bank[2]}
                if "attention" in what:
                    r["attention"] = attention(s, corpus, attention_sentences, bank[1] if bank else None,
                                               train_trees=bank[0] if bank else None, seed=seed,
                                               probe_updates=attention_probe_updates)
                if "heads" in what:
                    r["heads"] = importance(s, corpus, seed=seed)
                results[s.label] = r
            doc = {"corpus": str(corpus), "sentences": max_sentences, "what": what, "pooling": pooling, "seed": seed,
                   "pos_task": pos_task if "probe" in what else None, "trees": str(trees) if trees else None,
                   "cpu": cpu_name(), "threads": threads, "time_s": round(time.time() - started, 1), "models": results}
            (out / FIGURES_DIR).mkdir(exist_ok=True)
            figures = [f"{FIGURES_DIR}/{name}" for name in write_figures(results, out / FIGURES_DIR)]
            atomic_write_text(out / JSON_FILE, json.dumps(doc, indent=1) + "\n")
            atomic_write_text(out / REPORT_FILE, report(doc, figures))
    finally:
        torch.set_num_threads(before)
    print(f"report: {out / REPORT_FILE}")
    return doc


__all__ = ["JSON_FILE", "REPORT_FILE", "WHAT", "analyse", "parse_what"]
