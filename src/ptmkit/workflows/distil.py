"""``ptm distil``: distil a fine-tuned teacher into a smaller student, one run per seed.

The teacher is a saved task model (a fine-tuning run, :mod:`ptmkit.tasks.saved`); the task is the
one it was fine-tuned on (or the user's files again).  Optional unlabelled text of the task's
domain, and synthetic sentences made from the training split (Tang et al. 2019's augmentation,
:mod:`ptmkit.compress.augment`), are labelled by the teacher and added to the training split
(their examples count in the soft loss only).  Each seed's student is fine-tuned through
:func:`ptmkit.tasks.finetune.finetune` with :class:`ptmkit.compress.distil.Distillation`, so it
selects its epoch on dev, checkpoints every epoch, resumes exactly, and is saved as an ordinary
task model (``OUT/student-seed{S}``) that ``ptm finetune --eval-only``, ``ptm prune`` and
``ptm quantize`` read.  ``OUT/summary.json`` holds the teacher's and the students' scores,
parameter counts and retention (and, with augmentation, its settings and the number of synthetic
sentences); ``OUT/distil.png`` draws the teacher's scores beside each student's, and
``OUT/README.md`` is the distillation's run card (each student has its own, as a distilled student).

On a small transfer set (:mod:`ptmkit.compress.small_data`) the augmentation is on by default, and
each student gets a labels-only twin (``OUT/labels-only-seed{S}``, :mod:`ptmkit.compress.labels_only`)
whose scores ``summary.json`` holds beside the verdict: whether distillation beat the labels alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from torch import nn

from ptmkit import outputs
from ptmkit.compress.augment import AugmentSettings, augment_count, synthetic_sentences
from ptmkit.compress.distil import CACHE_FILE, Distillation, DistilSettings
from ptmkit.compress.labels_only import TWIN_DIR, twin_settings, verdict, verdict_lines
from ptmkit.compress.small_data import requested, twin_wanted
from ptmkit.compress.students import StudentSpec, build_student
from ptmkit.compress.theseus import Theseus
from ptmkit.config import parse_value  # noqa: F401  (for the command, which imports only this module)
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text, read_record
from ptmkit.runcard import CARD_FILE, write_run_card
from ptmkit.tasks.base import task_type_of
from ptmkit.tasks.efficient import without_method
from ptmkit.tasks.finetune import _resumable, finetune
from ptmkit.tasks.finetune_config import FinetuneConfig
from ptmkit.tasks.saved import TaskModel, encoder_of, load_task_model, uses_token_types
from ptmkit.train import checkpoint as ckpt
from ptmkit.workflows.compress_figures import distil_figure
from ptmkit.workflows.distil_general import distil_general  # noqa: F401
from ptmkit.workflows.finetune import parse_overrides, task_data  # noqa: F401
from ptmkit.workflows.report import format_table, summarize_inits

SUMMARY_FILE, FIGURE_FILE = "summary.json", "distil.png"


def non_embedding_parameters(model: Any) -> int:
    """Parameters of the task model outside its token, position and type embedding tables (the size
    DistilBERT and TinyBERT compare)."""
    enc = encoder_of(model)
    tables = {id(p) for m in enc.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in tables)


def with_unlabelled(teacher: TaskModel, texts: list[str]) -> tuple[TaskData, int]:
    """The teacher's task with ``texts`` added to its training split, labelled by the teacher's
    predictions; returns it and the number of gold examples (they come first)."""
    data = teacher.task_data
    if not isinstance(data, TaskData) or data.is_pair:
        raise PtmError("unlabelled text extends single-sentence classification tasks; this task is "
                       f"{getattr(data, 'task_type', 'classification')}{' with sentence pairs' if isinstance(data, TaskData) else ''}")
    if not texts:
        raise PtmError("the unlabelled file holds no text (one example per line)")
    extra = TaskSplit(texts, np.zeros(len(texts), dtype=np.int64))
    probe = TaskData(data.name, data.label_names, extra, extra, extra)
    task = task_type_of(probe, teacher.cfg, teacher.tokenizer, teacher.task.causal,
                        uses_token_types(teacher.backbone, probe))
    probs = task.predict(teacher.model.eval(), task.encode("train"), "cpu")
    train = TaskSplit(data.train.texts + texts, np.concatenate([data.train.labels, probs.argmax(-1)]))
    return TaskData(data.name, data.label_names, train, data.dev, data.test, data.meta), len(data.train)


def read_unlabelled(path: str | os.PathLike, limit: int | None = None) -> list[str]:
    """Non-empty lines of a UTF-8 text file (the first ``limit``)."""
    try:
        lines = [s.strip() for s in Path(path).read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise PtmError(f"cannot read the unlabelled text {path}: {exc}") from None
    lines = [s for s in lines if s]
    return lines[:limit] if limit else lines


def distil(teacher_run: str | os.PathLike, out_dir: str | os.PathLike, student: StudentSpec, settings: DistilSettings,
           cfg: FinetuneConfig | list[str], seeds: Sequence[int] = (0,), load_data: Any = None, unlabelled: str | None = None,
           unlabelled_limit: int | None = None, cache: bool = True, overwrite: bool = False, resume: bool = False,
           progress: bool = True, inputs: Sequence[Any] = (), replacing: tuple[float, float] | None = None,
           augment: int | str | AugmentSettings = "auto", augment_seed: int = 0,
           labels_only: str = "auto") -> dict[str, Any]:
    """Distil the task model in ``teacher_run`` into ``student`` students, one per seed, under ``out_dir``.
    cfg: the students' fine-tuning settings, or ``KEY=VALUE`` overrides of the teacher's (LoRA and
    BitFit not carried over: a student trains every weight unless they are given again).
    augment: synthetic sentences per training sentence (Tang et al. 2019; 0: none), drawn with
    ``augment_seed``, or :class:`AugmentSettings` (the rules' probabilities too); ``"auto"``: some
    when the transfer set is small, ``"on"``: some anyway (:func:`ptmkit.compress.augment.augment_count`).
    labels_only: ``"auto"`` | ``"on"`` | ``"off"``: train each student's labels-only twin too
    (``auto``: when the transfer set is small) and say whether distillation beat it.
    replacing: ``(rate, full_at)``: BERT-of-Theseus module replacing instead of the distillation
    losses (:mod:`ptmkit.compress.theseus`; a ``layers`` student: one successor layer per module)."""
    if resume and overwrite:
        raise PtmError("--resume continues the runs in OUT and --overwrite replaces them: give one of them")
    asked = augment.n if isinstance(augment, AugmentSettings) else requested(augment)
    if replacing is not None and (student.kind != "layers" or unlabelled or asked):
        raise PtmError("module replacing trains successor layers made from the teacher's (--student layers) "
                       "on the task's own data (no --unlabelled or --augment)")
    out = Path(out_dir)
    inputs = [teacher_run, unlabelled, *inputs]
    outputs.check(out, "distil", inputs, overwrite, reuse=resume)
    # students are made from the teacher's weights: LoRA's updates, if any, are folded into them first
    teacher = load_task_model(teacher_run, load_data() if load_data is not None else None, merged=True)
    if not isinstance(cfg, FinetuneConfig):
        # a student learns every weight unless the overrides ask for LoRA or BitFit again
        cfg = parse_overrides(list(cfg), base=without_method(teacher.cfg))
    data, labelled, augmented = teacher.task_data, None, None
    extra = read_unlabelled(unlabelled, unlabelled_limit) if unlabelled else []
    if unlabelled and not extra:
        raise PtmError("the unlabelled file holds no text (one example per line)")
    size = len(teacher.task_data.split("train")) + len(extra)  # the transfer set before augmentation
    earlier = _earlier_augmentation(out) if resume and augment == "auto" else None
    if earlier is not None:  # a resumed run goes on as it started, whatever "auto" decides today
        augmenting = earlier
    else:
        augmenting = augment if isinstance(augment, AugmentSettings) else AugmentSettings(
            augment_count(augment, size, teacher.task_data, teacher.tokenizer, replacing is not None), augment_seed)
    if augmenting.n:
        synthetic, augmented = synthetic_sentences(teacher, augmenting)
        extra += synthetic
    if extra:
        data, labelled = with_unlabelled(teacher, extra)
    source = {"run": str(teacher_run), "task": teacher.info.get("task"), "derived_from": teacher.info.get("derived_from")}
    t_dev, t_test = teacher.evaluate("dev"), teacher.evaluate("test")
    with outputs.writing(out, "distil", inputs, overwrite=overwrite, reuse=resume, names=[SUMMARY_FILE, CACHE_FILE, FIGURE_FILE, CARD_FILE],
                         keep=lambda: _resumable(out)) as session:
        if overwrite and session.state == "own":
            outputs.clean(out)
        runs = []
        for seed in seeds:
            pretrained = build_student(teacher, student, seed)
            if replacing is not None:
                training = Theseus(teacher.model, *replacing, cfg.epochs, source, student.describe())
            else:
                training = Distillation(teacher.model, settings, source, student.describe(), labelled, cache, out,
                                        augmented)
            r = finetune(pretrained, data, out / f"student-seed{seed}", replace(cfg), seed=seed, progress=progress,
                         desc=f"distil seed={seed}", resume=resume, training=training)
            r["init"] = "student"
            runs.append(r)
        twins = []
        if twin_wanted(labels_only, size):
            for seed in seeds:  # the same student and seed on the gold examples alone
                training = Distillation(teacher.model, twin_settings(), source, student.describe())
                r = finetune(build_student(teacher, student, seed), teacher.task_data, out / TWIN_DIR.format(seed=seed),
                             replace(cfg), seed=seed, progress=progress, desc=f"labels-only seed={seed}",
                             resume=resume, training=training)
                r["init"] = "labels only"
                twins.append(r)
        key = runs[0]["select"]
        t_params = non_embedding_parameters(teacher.model)
        s_params = [read_record(out / f"student-seed{s}" / "results.json", "resume to train that student again")
                    .get("num_parameters") for s in seeds]
        student_ne = non_embedding_parameters(load_task_model(out / f"student-seed{seeds[0]}", data).model)
        summary = {
            "teacher": {"run": str(teacher_run), "dev": t_dev, "test": t_test, "non_embedding_parameters": t_params},
            "student": student.describe(),
            "method": "theseus" if replacing is not None else "distillation",
            "settings": ({"rate": replacing[0], "full_at": replacing[1]} if replacing is not None else settings.__dict__),
            **({"augment": augmented} if augmented is not None else {}),
            "summary": summarize_inits(runs),
            "non_embedding_parameters": student_ne, "parameters": s_params[0],
            "parameter_ratio": round(student_ne / max(t_params, 1), 4),
            "retention": {split: float(np.mean([r[split][key] for r in runs]) / t[key])
                          for split, t in (("dev", t_dev), ("test", t_test)) if t.get(key)},
            "runs": runs,
            **({"labels_only": _against_twins(runs, twins)} if twins else {}),
        }
        atomic_write_text(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
        distil_figure(summary, out / FIGURE_FILE)
        write_run_card(out, kind="distil")
    table = {**summary["summary"], **(summarize_inits(twins) if twins else {})}
    print(format_table(table))
    print(f"teacher test {key} {t_test[key]:.4f}; student keeps {summary['retention'].get('test', float('nan')):.1%} "
          f"with {summary['parameter_ratio']:.0%} of its non-embedding parameters")
    for line in summary.get("labels_only", {}).get("verdict", []):
        print(line)
    print(f"results: {out / SUMMARY_FILE}")
    return summary


def _earlier_augmentation(out: Path) -> AugmentSettings | None:
    """How the students already in ``out`` were augmented (``n = 0``: not at all), read from the
    first with results or a checkpoint (any seed's: a resume may add seeds); ``None`` when none has
    either."""
    for run in sorted(p for p in out.glob("student-seed*") if p.is_dir()):
        latest = ckpt.latest_checkpoint(run)
        if (run / "results.json").is_file():
            record = read_record(run / "results.json", "resume with --augment N (or off) to say how it was augmented")
        elif latest is not None:
            record = ckpt.read_config(latest)
        else:
            continue
        made = (record.get("training") or {}).get("augment") or {}
        return AugmentSettings(**{f.name: made[f.name] for f in fields(AugmentSettings) if f.name in made})
    return None


def _against_twins(runs: list[dict[str, Any]], twins: list[dict[str, Any]]) -> dict[str, Any]:
    """The labels-only twins' scores and the verdict on the test split, in the selection metric."""
    key = runs[0]["select"]
    distilled, alone = [r["test"][key] for r in runs], [r["test"][key] for r in twins]
    v = verdict(distilled, alone)
    lines = verdict_lines(v, key, float(np.mean(distilled)), float(np.mean(alone)))
    return {"summary": summarize_inits(twins), "metric": key, "split": "test", **v, "verdict": lines, "runs": twins}
