"""Pre-train a model from a preset on the user's corpus (the workflow behind ``ptm pretrain``).

``pretrain("bert-tiny", "corpus.txt", "runs/tiny", ["train.max_steps=200"])`` resolves the
preset with the overrides, trains a tokenizer and prepares the corpus when given raw text (or
opens a prepared corpus directory), builds the encoder + the objective (:mod:`ptmkit.build`), and runs the
:class:`~ptmkit.train.trainer.Trainer`.  The run directory receives ``config.json`` (the fully
resolved config), ``metrics.jsonl``, ``loss.png`` and ``checkpoints/``; what a new, resumed,
overwritten or continued run may find there is :mod:`ptmkit.workflows.rundir`'s to decide.
A static model or preset goes to :mod:`ptmkit.workflows.static`, a vision–language preset (one
with a ``vision`` section) to :mod:`ptmkit.workflows.vision_language`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ptmkit import outputs
from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides, from_dict
from ptmkit.data.batches import PretrainBatches, split_spans
from ptmkit.data.blend import join_corpora, member_spans, parse_weights, training_batches
from ptmkit.data.corpus import Corpus
from ptmkit.data.prepare import prepare
from ptmkit.data.textfiles import TextFormat
from ptmkit.errors import PtmError
from ptmkit.fileio import read_record
from ptmkit.presets import load_preset
from ptmkit.pretrained import Pretrained, load_pretrained
from ptmkit.runcard import write_run_card
from ptmkit.static.init_embeddings import init_word_embeddings
from ptmkit.tokenization import Tokenizer
from ptmkit.train import checkpoint as ckpt
from ptmkit.train import distributed as dist
from ptmkit.train.budget import TimeEstimate, follow_budget, schedule_warnings
from ptmkit.train.config import TrainConfig
from ptmkit.train.trainer import Callback, Trainer, seed_everything
from ptmkit.workflows import rundir
from ptmkit.workflows.rundir import DATA_DIR, EVAL_DATA_DIR, RUN_CONFIG, DataArg, as_paths, is_corpus
from ptmkit.workflows.static import static_model, train_static
from ptmkit.workflows.vision_language import refuse_text_options, stored_vl_config, train_vl, vision_language_config

log = logging.getLogger(__name__)


def pretrain(
    preset_or_config: str | Path | dict[str, Any] | None,
    data: DataArg,
    out_dir: str | Path,
    overrides: Sequence[str] = (),
    resume: bool = False,
    eval_data: DataArg | None = None,
    overwrite: bool = False,
    callbacks: Iterable[Callback] = (),
    verbose: bool = True,
    init_from: str | Path | None = None,
    data_weights: str | Sequence[float] | None = None,
    fmt: TextFormat | None = None,
) -> Path:
    """Pre-train and return the run directory (see the module docstring).

    resume: continue RUN_DIR's latest checkpoint with the config the run stored (its preset and
    overrides need not be given again; ``preset_or_config`` may be ``None``): overrides may change
    only the ``train.`` settings of :data:`ptmkit.workflows.rundir.RESUMABLE_CHANGES`
    (``max_steps``, ``eval_every``, ...); any other is refused by name.

    A lowered ``train.max_steps`` without ``train.warmup_steps`` scales the preset's warm-up to
    the same share of the run (:func:`ptmkit.train.budget.follow_budget`); a plan whose warm-up
    outlasts it or that reads the corpus more than 20 times gets a warning before training.

    init_from: continued pre-training (ULMFiT's second stage: the LM fine-tuned on target-task
    text): the weights (encoder and objective heads), tokenizer and config of this run or
    checkpoint, with ``overrides`` applied; a fresh optimizer and schedule.  ``preset_or_config``
    must describe the same encoder (same parameter shapes); when it names another objective
    (SenseBERT continuing an MLM run, ERNIE continuing an imported BERT), that objective's section
    is the preset's, the encoder's weights are the run's, and each head tensor the run has with the
    same name and shape is carried over (the rest start fresh); ``data`` is
    prepared with the run's tokenizer (text), or must have been (a prepared corpus).

    A static model or preset (``word2vec``, ``glove``, ...; :mod:`ptmkit.static.presets`) is trained
    by :func:`ptmkit.workflows.static.train_static` (text files in, ``vectors.bin`` out), a
    vision–language preset by :func:`ptmkit.workflows.vision_language.train_vl` (``data``: ``emoji``
    or a directory with ``captions.jsonl``).

    data / eval_data: a prepared corpus directory (or sharded set), several of them (read as one,
    each document in its corpus), or text file(s) (one sentence per line, a blank line between
    documents). Without eval_data, ``train.eval_fraction`` of each corpus's examples is held out.
    data_weights: one weight per prepared corpus of ``data`` (``"0.7,0.3"``): each epoch draws the
    corpora's examples in these proportions (:mod:`ptmkit.data.blend`).  fmt: where the text is in
    JSON Lines / CSV / Parquet files of ``data`` and ``eval_data`` (``--field``, ``--column``).
    """
    run_dir = Path(out_dir)
    overrides = list(overrides)
    if data_weights is not None and not all(is_corpus(p) for p in as_paths(data)):
        raise PtmError("--data-weights weighs prepared corpora, one weight each: prepare each text with "
                       "`ptm prepare FILES -t TOKENIZER -o DIR` (one tokenizer for all) and give the directories as --data")
    if preset_or_config is not None and static_model(preset_or_config) is not None:
        if data_weights is not None:
            raise PtmError("--data-weights is for pre-training on prepared corpora; a static model reads text files")
        if fmt is not None and fmt != TextFormat():
            raise PtmError("--field / --column say where text is in structured files; a static model reads plain text files")
        return train_static(preset_or_config, as_paths(data), run_dir, overrides, overwrite, verbose, resume=resume,
                            eval_data=eval_data, init_from=init_from)
    vision = vision_language_config(preset_or_config) or (stored_vl_config(run_dir) if resume else None)
    if vision is not None:
        refuse_text_options(data_weights, fmt is not None and fmt != TextFormat(), eval_data, init_from)
        return train_vl(vision, data, run_dir, overrides, overwrite, verbose, resume)
    if preset_or_config is not None and not isinstance(preset_or_config, dict):
        outputs.check_inputs(run_dir, [preset_or_config])  # a preset YAML file is an input too
    stored = stored_run_config(run_dir) if resume else None
    if preset_or_config is None and stored is None:
        raise PtmError("name a preset (or a YAML file): only --resume of a run with a checkpoint reads the config from the run")
    source = continued_start(preset_or_config or stored, init_from, overrides) if init_from is not None else None
    if stored is not None:  # resume remembers: the run's own config, changed only where resume allows
        raw = resumed_config(stored, preset_or_config, overrides)
    else:
        base = source.base if source is not None else load_config(preset_or_config)
        raw = follow_budget(base.get("train") or {}, source.raw if source is not None else apply_overrides(base, overrides),
                            overrides)
    device = str((raw.get("train") or {}).get("device", "auto"))
    dist.resolve_device(device)  # train.device=cuda without a GPU fails before anything is written
    started = not dist.is_distributed()
    info = dist.init_distributed(device)
    succeeded = False
    try:
        with contextlib.ExitStack() as stack:  # holds RUN_DIR's lock and manifest (see rundir.open_run)
            result = _pretrain(raw, data, run_dir, overrides, resume, eval_data, overwrite, list(callbacks), verbose, info,
                               stack, source, data_weights, fmt)
        succeeded = True
        return result
    finally:
        if started:
            dist.cleanup(succeeded)


def _pretrain(raw, data, run_dir, overrides, resume, eval_data, overwrite, callbacks, verbose, info, stack,
              source=None, data_weights=None, fmt=None) -> Path:
    from_dict(TrainConfig, raw.get("train"), "train")  # fail on a bad key before any slow work
    inputs = as_paths(data) + (as_paths(eval_data) if eval_data is not None else [])
    if source is not None:
        inputs.append(source.checkpoint)
    run = rundir.open_run(run_dir, resume, overwrite, info, inputs, stack)

    # the data, the config resolved against their tokenizer, and what a resumed run must match
    corpus, tokenizer = _open_training_data(data, raw.get("tokenizer") or {}, run, source, fmt)
    if source is not None:
        rundir.check_same_tokenizer(source.checkpoint, tokenizer, corpus, "continue pre-training")
        overrides = [*overrides, f"model.vocab_size={raw['model']['vocab_size']}"]  # the run's, not the tokenizer's
    config = resolve_config(raw, tokenizer, overrides)
    record = rundir.inputs_record(data, eval_data)
    if data_weights is not None:  # resolved once (alpha=A from the corpora's sizes); a resumed run must draw the same shares
        members = getattr(corpus, "members", None) or [corpus]
        data_weights = parse_weights(data_weights, len(members), [m.n_tokens for m in members]).tolist()
        record["data_weights"] = data_weights
    run.check_resumed(config, tokenizer, corpus, record)
    run.start_over(corpus)
    train_cfg = from_dict(TrainConfig, config["train"], "train")

    # the model, its training and held-out examples, and its weights at step 0
    seed_everything(train_cfg.seed)  # identical initial weights for a given seed
    # Under FSDP only rank 0 builds real weights: the other ranks build the model's shapes on the
    # meta device (no memory) and receive their shards of rank 0's weights when it is sharded.
    meta = train_cfg.strategy == "fsdp" and info.world_size > 1 and not info.is_main
    with torch.device("meta") if meta else contextlib.nullcontext():
        model = build_model(config, tokenizer)
    eval_corpus, train_spans, eval_spans, sizes = _examples(model.objective, corpus, tokenizer, eval_data, train_cfg, run, fmt)
    if not run.resuming and not meta:  # a resumed run loads its weights instead
        _initial_weights(model, source, corpus, train_spans, train_cfg, verbose and info.is_main)
    if len(train_spans) < train_cfg.batch_size:
        raise PtmError(
            f"the corpus gives {len(train_spans)} training examples of <= {train_cfg.seq_len} tokens, fewer than "
            f"train.batch_size={train_cfg.batch_size}; use more text or a smaller batch"
        )
    common = dict(seq_len=train_cfg.seq_len, batch_size=train_cfg.batch_size, seed=train_cfg.seed, rank=info.rank,
                  world_size=info.world_size)
    batches = training_batches(corpus, model.objective, train_spans, sizes, data_weights, **common)
    if info.is_main and not run.resuming:
        for line in schedule_warnings(train_cfg.max_steps, train_cfg.warmup_steps, batches.steps_per_epoch):
            log.warning(line)
    eval_source = PretrainBatches(eval_corpus, model.objective, eval_spans, **common) if len(eval_spans) else None

    # train
    run.write_record(config, record)
    if verbose and info.is_main:
        callbacks = [*callbacks, TimeEstimate()]  # the whole run's time, said after a few measured steps
    trainer = Trainer(model, batches, train_cfg, run_dir, eval_source, {"config": config, "tokenizer": tokenizer}, callbacks)
    if verbose and info.is_main:
        _print_plan(config, model, corpus, batches, train_spans, eval_spans, train_cfg, trainer, info, run_dir)
    result = trainer.fit(resume=resume)
    if info.is_main:
        write_run_card(run_dir, derives_from=[source.checkpoint] if source is not None else [])
    if verbose and info.is_main:
        _print_result(result, run_dir)
    return run_dir


# -- configs --------------------------------------------------------------------------------------------
def load_config(preset_or_config: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A preset name, a YAML path or an already nested dict -> a fresh nested dict."""
    if isinstance(preset_or_config, dict):
        return copy.deepcopy(preset_or_config)
    return load_preset(str(preset_or_config))


@dataclass(frozen=True)
class ContinuedStart:
    """Where continued pre-training starts: the source checkpoint, its tokenizer, and the raw
    config (the source run's resolved config with the overrides applied)."""

    checkpoint: Path
    tokenizer: Any
    raw: dict[str, Any]
    switched_from: str | None = None  # the source run's objective when the new run trains another one
    base: dict[str, Any] | None = None  # the config before the overrides (its schedule is scaled to them)


def continued_start(preset_or_config: str | Path | dict[str, Any], init_from: str | Path, overrides: Sequence[str]) -> ContinuedStart:
    """Read the run (or checkpoint) ``init_from``; its config with ``overrides`` applied is the new
    run's config.  ``preset_or_config`` must name the same encoder (an error otherwise); another
    objective replaces the run's objective section (its heads are checked by name and shape when
    the weights load); where its model keys differ from the run's (a run trained with size overrides),
    the run's are kept and a note says so.  Overrides that would change a parameter's shape are
    refused: the weights would not fit."""
    ck = ckpt.resolve_checkpoint(init_from)
    ckpt.validate_checkpoint(ck)
    stored = ckpt.read_config(ck)
    tok_file = ck / ckpt.TOKENIZER_FILE
    if not tok_file.is_file():
        raise PtmError(f"--init-from {init_from}: checkpoint {ck} has no {ckpt.TOKENIZER_FILE}")
    tokenizer = Tokenizer.load(tok_file)
    preset = load_config(preset_or_config)
    name = preset_or_config if not isinstance(preset_or_config, dict) else "the given config"

    def names(cfg: dict[str, Any]) -> tuple[str, str]:
        return str((cfg.get("model") or {}).get("encoder", "transformer")), str((cfg.get("objective") or {}).get("name"))

    (e1, o1), (e2, o2) = names(stored), names(preset)
    if e1 != e2:
        raise PtmError(
            f"--init-from {init_from}: that run trained encoder {e1!r} (objective {o1!r}), but {name} describes "
            f"encoder {e2!r} (objective {o2!r}); give a preset of the run's encoder"
        )
    base = {k: v for k, v in stored.items() if k in ("model", "objective", "tokenizer", "train")}
    switched = o1 != o2  # another objective on the same encoder: the preset's objective section
    raw = apply_overrides({**base, "objective": copy.deepcopy(preset["objective"])} if switched else base, overrides)
    pin = [f"model.vocab_size={stored['model']['vocab_size']}"]

    def shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        with torch.device("meta"):  # shapes only, no memory
            model = build_model(resolve_config(cfg, tokenizer, pin), tokenizer)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}

    before, after = shapes(base), shapes(raw)
    if switched:  # the new objective's heads are its own; the encoder must fit
        before, after = ({k: v for k, v in d.items() if k.startswith("backbone.")} for d in (before, after))
    if before != after:
        diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        shown = "; ".join(f"{k}: {before.get(k)} in the run, {after.get(k)} now" for k in diff[:3])
        raise PtmError(
            f"--init-from {init_from}: the overrides change the model's shape ({shown}{'; ...' if len(diff) > 3 else ''}), "
            f"so the run's weights would not fit; continue with the run's sizes (drop the model size overrides)"
        )
    differ = sorted(k for k, v in (preset.get("model") or {}).items()
                    if k != "vocab_size" and k in raw["model"] and raw["model"][k] != v)
    if differ:
        log.info("--init-from: the run's model settings differ from %s in %s; the run's are used", name, ", ".join(differ))
    if switched:
        log.info("--init-from: objective %r continues the encoder of a run trained with %r", o2, o1)
    return ContinuedStart(ck, tokenizer, raw, o1 if switched else None, base)


def stored_run_config(run_dir: str | Path) -> dict[str, Any] | None:
    """The config a run with a checkpoint was started with (``None``: no checkpoint to resume).
    RUN_DIR is checked to be ptm's first: nothing is read from a folder that only looks like a run."""
    outputs.check(Path(run_dir), "run", [], reuse=True)
    latest = ckpt.latest_checkpoint(Path(run_dir))
    if latest is None:
        return None
    return rundir.read_run_config(Path(run_dir) / RUN_CONFIG, latest)


def resumed_config(stored: dict[str, Any], preset_or_config: str | Path | dict[str, Any] | None,
                   overrides: Sequence[str]) -> dict[str, Any]:
    """A resumed run's raw config: the run's own, with the overrides that resume allows
    (``train.`` keys of :data:`ptmkit.workflows.rundir.RESUMABLE_CHANGES`); any other override is
    refused by name unless it restates the run's value.  A preset, when given, must name the
    run's encoder and objective."""
    base = {k: v for k, v in stored.items() if k in ("model", "objective", "tokenizer", "train")}
    if preset_or_config is not None:
        preset = load_config(preset_or_config)

        def names(cfg: dict[str, Any]) -> tuple[str, str]:
            return str((cfg.get("model") or {}).get("encoder", "transformer")), str((cfg.get("objective") or {}).get("name"))

        if names(preset) != names(base):
            raise PtmError(f"cannot resume: the run trains {names(base)[0]!r} with objective {names(base)[1]!r}, "
                           f"not {names(preset)[1]!r} of {preset_or_config}; resume without a preset (`ptm pretrain "
                           f"--resume -o RUN --data DATA`) or with the run's own")
    raw = apply_overrides(base, list(overrides))
    for item in overrides:
        key = item.partition("=")[0].strip()
        section, _, name = key.partition(".")
        if section == "train" and name in rundir.RESUMABLE_CHANGES:
            continue
        was, now = base, raw
        for part in key.split("."):
            was = was.get(part) if isinstance(was, dict) else None
            now = now.get(part) if isinstance(now, dict) else None
        if was != now:
            allowed = ", ".join(f"train.{k}" for k in sorted(rundir.RESUMABLE_CHANGES))
            raise PtmError(f"cannot resume with {item}: the run keeps the config it started with ({key}={was!r}); on "
                           f"resume only {allowed} may change; start a new run directory to change {key}")
    return raw


# -- data -----------------------------------------------------------------------------------------------
def _open_training_data(data: DataArg, tok_section: dict[str, Any], run: rundir.RunDir,
                        source: ContinuedStart | None = None, fmt: TextFormat | None = None):
    """``(corpus, tokenizer)``: a prepared corpus as is, or raw text -> tokenizer + corpus in RUN_DIR/data
    (kept and reused when resuming, so the resumed run sees the same token ids).  Continued
    pre-training prepares raw text with the source run's tokenizer instead of a newly trained one, and
    a ``tokenizer.file`` with that tokenizer.json."""
    paths = as_paths(data)
    corpora = [is_corpus(p) for p in paths]
    if all(corpora):  # prepared corpora (or sharded sets); several are read as one
        corpus = join_corpora(paths)
        return corpus, corpus.load_tokenizer()
    if any(corpora):
        raise PtmError(f"--data mixes prepared corpora ({paths[corpora.index(True)]}) and text files "
                       f"({paths[corpora.index(False)]}); prepare the text with `ptm prepare` and give only corpora")
    for p in paths:
        if p.is_dir():
            raise PtmError(f"{p} is a directory but not a prepared corpus (no meta.json); run `ptm prepare` or give text files")
        if not p.is_file():
            raise PtmError(f"training data not found: {p}")
    out = run.path / DATA_DIR
    if run.resume:  # --resume: the run's own prepared copy of the text, never re-prepared
        run.check_text(paths)
    if run.info.is_main and not (run.resume and is_corpus(out)):
        if source is not None:
            tok = source.tokenizer
        elif tok_section.get("file"):  # an existing tokenizer (a teacher's, for its distilled student)
            tok = Tokenizer.load(tok_section["file"])
        else:
            section = dict(tok_section)
            kind = section.pop("kind", "wordpiece")
            vocab_size = section.pop("vocab_size", 30522)
            try:
                tok = Tokenizer.train(paths, kind=kind, vocab_size=vocab_size, fmt=fmt, **section)
            except TypeError as exc:
                raise PtmError(f"invalid tokenizer section {tok_section}: {exc}") from exc
        prepare(paths, tok, out, overwrite=True, fmt=fmt)
    dist.barrier()
    corpus = Corpus.open(out)
    return corpus, corpus.load_tokenizer()


def _open_eval_data(data: DataArg, tokenizer: Any, run: rundir.RunDir, fmt: TextFormat | None = None) -> Corpus:
    paths = as_paths(data)
    if all(is_corpus(p) for p in paths):  # one prepared corpus (or sharded set), or several read as one
        corpus = join_corpora(paths)
        if corpus.load_tokenizer().to_json() != tokenizer.to_json():
            raise PtmError(f"the eval corpus {paths[0]} was prepared with a different tokenizer than the training data")
        return corpus
    for p in paths:
        if not p.is_file():
            raise PtmError(f"eval data not found: {p} (give a prepared corpus directory or text file(s))")
    out = run.path / EVAL_DATA_DIR
    if run.info.is_main and not (run.resume and is_corpus(out)):
        prepare(paths, tokenizer, out, overwrite=True, fmt=fmt)
    dist.barrier()
    return Corpus.open(out)


def _examples(objective, corpus, tokenizer, eval_data: DataArg | None, train_cfg: TrainConfig, run: rundir.RunDir,
              fmt: TextFormat | None = None):
    """``(eval_corpus, train_spans, eval_spans, sizes)``: the held-out examples come from
    ``--eval-data``, else ``train.eval_fraction`` of each training corpus's examples, else there
    are none; ``sizes``: how many training spans each corpus of ``--data`` gave (in order)."""
    parts = member_spans(objective, corpus, train_cfg.seq_len)
    if eval_data is not None:
        eval_corpus = _open_eval_data(eval_data, tokenizer, run, fmt)
        return eval_corpus, np.concatenate(parts), objective.example_spans(eval_corpus, train_cfg.seq_len), \
            [len(p) for p in parts]
    if train_cfg.eval_fraction > 0:
        contiguous = bool(getattr(objective, "reads_streams", False))
        split = [split_spans(p, train_cfg.eval_fraction, train_cfg.seed, contiguous) for p in parts]
        return corpus, np.concatenate([t for t, _ in split]), np.concatenate([e for _, e in split]), \
            [len(t) for t, _ in split]
    return corpus, np.concatenate(parts), parts[0][:0], [len(p) for p in parts]


# -- initial weights ------------------------------------------------------------------------------------
def _initial_weights(model, source: ContinuedStart | None, corpus, train_spans, train_cfg: TrainConfig,
                     verbose: bool) -> None:
    """Step 0: every weight of the source run (continued pre-training), or fresh weights plus
    :func:`init_from_corpus`."""
    if source is not None and source.switched_from is not None:
        # the encoder as the source run uses it (its objective's input embeddings folded in)
        model.backbone.load_state_dict(load_pretrained(source.checkpoint, heads=False).backbone.state_dict())
        kept, fresh = ckpt.load_fitting_weights(model.objective, source.checkpoint, "objective.")
        model.objective.init_from_corpus(corpus, train_spans)  # its new parts' data-dependent start
        if verbose:
            print(f"  encoder, tokenizer and config from {source.checkpoint} (trained with {source.switched_from!r}); "
                  f"objective heads: {len(kept)} tensors carried over, {len(fresh)} fresh", flush=True)
    elif source is not None:
        ckpt.load_model_weights(model, source.checkpoint)
        if verbose:
            print(f"  weights, tokenizer and config from {source.checkpoint}", flush=True)
    else:
        init_from_corpus(model.backbone, model.objective, corpus, train_spans, train_cfg, verbose)


def init_from_corpus(encoder, objective, corpus, train_spans, train_cfg: TrainConfig, verbose: bool = False) -> None:
    """The data-dependent part of the initial weights (before step 1): the objective's own
    (``Objective.init_from_corpus``), then with ``train.init_embeddings`` word2vec vectors of the
    training examples' tokens as the word embeddings.  Deterministic (word2vec on one thread with
    a fixed seed), so every DDP rank computes the same weights."""
    objective.init_from_corpus(corpus, train_spans)
    if train_cfg.init_embeddings == "none":
        return
    table = encoder.input_embeddings()
    if table is None:
        raise PtmError(f"train.init_embeddings needs a word embedding table; the {encoder.name} encoder has none")
    n_set = init_word_embeddings(
        table.weight, corpus, train_spans, train_cfg.init_embeddings,
        std=float(getattr(encoder.config, "init_std", 0.02)), epochs=train_cfg.init_embeddings_epochs, seed=train_cfg.seed + 1,
        progress=verbose,
    )
    if verbose:
        print(f"  word embeddings: {n_set:,} rows initialised from {train_cfg.init_embeddings} vectors", flush=True)


def initial_model(run_dir: str | Path) -> Pretrained:
    """A pre-training run's starting point (step 0) as a ``Pretrained``: fresh weights from the
    run's seed plus ``init_from_corpus`` on its prepared corpus (``RUN_DIR/data``) and training
    split.  With ``train.init_embeddings`` this is "word vectors only, no Transformer objective".
    (A run whose ``--eval-data`` was a prepared corpus directory left no trace of it in RUN_DIR: its
    start is rebuilt as if ``eval_fraction`` had been held out.)"""
    run_dir = Path(run_dir)
    config = read_record(run_dir / RUN_CONFIG, f"restore it from the latest checkpoint's copy "
                         f"({run_dir}/checkpoints/step-*/config.json)")
    if not is_corpus(run_dir / DATA_DIR):
        raise PtmError(f"{run_dir} has no prepared corpus in {DATA_DIR}/ (it was trained on a corpus directory)")
    corpus = Corpus.open(run_dir / DATA_DIR)
    tokenizer = corpus.load_tokenizer()
    train_cfg = from_dict(TrainConfig, config["train"], "train")
    seed_everything(train_cfg.seed)
    model = build_model(config, tokenizer)
    spans = model.objective.example_spans(corpus, train_cfg.seq_len)
    held_out = train_cfg.eval_fraction > 0 and not (run_dir / EVAL_DATA_DIR).exists()  # as _examples splits
    contiguous = bool(getattr(model.objective, "reads_streams", False))
    train_spans = split_spans(spans, train_cfg.eval_fraction, train_cfg.seed, contiguous)[0] if held_out else spans
    init_from_corpus(model.backbone, model.objective, corpus, train_spans, train_cfg)
    return Pretrained(config, tokenizer, model.backbone, model.objective, None, model)


# -- what the run prints --------------------------------------------------------------------------------
def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _print_plan(config, model, corpus, batches, train_spans, eval_spans, train_cfg: TrainConfig, trainer, info,
                run_dir: Path) -> None:
    n_params = count_parameters(model)
    table = model.backbone.input_embeddings()
    n_emb = table.weight.numel() if table is not None else 0
    seq_len = train_cfg.seq_len
    epochs = train_cfg.max_steps / max(1, batches.steps_per_epoch)
    print(
        f"pretrain {config['objective']['name']}: {n_params / 1e6:.2f}M parameters "
        f"({(n_params - n_emb) / 1e6:.2f}M without word embeddings), vocab {config['model']['vocab_size']}\n"
        f"  data: {corpus.n_tokens:,} tokens, {len(train_spans):,} train / {len(eval_spans):,} eval examples "
        f"of <= {seq_len} tokens\n"
        + (f"  blend: {', '.join(f'{Path(m.path).name} {c:,}' for m, c in zip(corpus.members, batches.counts))} "
           f"examples per epoch\n" if hasattr(batches, "counts") else "")
        + f"  steps: {train_cfg.max_steps:,} x batch {train_cfg.batch_size} (<= {train_cfg.batch_size * seq_len:,} "
        f"tokens/step, {epochs:.2f} epochs), {info.world_size} process(es) on {trainer.device}\n"
        f"  run directory: {run_dir}",
        flush=True,
    )


def _print_result(result: dict[str, Any], run_dir: Path) -> None:
    parts = [f"step {result['step']}"]
    if "train_loss" in result:
        parts.append(f"train loss {result['train_loss']:.4f}")
    for k in sorted(result):
        if k.startswith("eval_"):
            parts.append(f"{k.replace('_', ' ')} {result[k]:.4f}")
    print("final: " + ", ".join(parts), flush=True)
    print(f"checkpoint: {ckpt.latest_checkpoint(run_dir)}", flush=True)
