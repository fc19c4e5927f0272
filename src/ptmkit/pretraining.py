"""Pre-train a Transformer from a preset on the user's corpus (the API behind ``ptm pretrain``).

``pretrain("bert-tiny", "corpus.txt", "runs/tiny", ["train.max_steps=200"])`` resolves the
preset with the overrides, trains a tokenizer and prepares the corpus when given raw text (or
opens a prepared corpus directory), builds the encoder + the objective (:mod:`ptmkit.build`), and runs the
:class:`~ptmkit.train.trainer.Trainer`.  The run directory receives ``config.json`` (the fully
resolved config), ``metrics.jsonl``, ``loss.png`` and ``checkpoints/``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ptmkit import outputs
from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides, from_dict
from ptmkit.errors import PtmError
from ptmkit.identity import differences, fingerprint
from ptmkit.pretrained import Pretrained
from ptmkit.train import checkpoint as ckpt
from ptmkit.train import distributed as dist
from ptmkit.train.config import TrainConfig
from ptmkit.train.trainer import Callback, Trainer, seed_everything

log = logging.getLogger(__name__)

RUN_CONFIG = "config.json"
INPUTS_FILE = "inputs.json"  # fingerprints of the data the run trains on, compared on resume
DATA_DIR, EVAL_DATA_DIR = "data", "eval_data"
# Settings that may change when a run is resumed without changing its result step for step.
RESUMABLE_CHANGES = {
    "max_steps", "eval_every", "eval_batches", "save_every", "keep_checkpoints", "log_every",
    "num_threads", "device", "nan_guard", "max_seconds",
}

DataArg = str | Path | Sequence[str | Path]


def load_config(preset_or_config: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A preset name, a YAML path or an already nested dict -> a fresh nested dict."""
    if isinstance(preset_or_config, dict):
        return copy.deepcopy(preset_or_config)
    from ptmkit.presets import load_preset

    return load_preset(str(preset_or_config))


def _as_paths(data: DataArg) -> list[Path]:
    items = [data] if isinstance(data, (str, Path)) else list(data)
    if not items:
        raise PtmError("no training data given: pass a prepared corpus directory or text file(s)")
    return [Path(p) for p in items]


def _is_corpus(path: Path) -> bool:
    return path.is_dir() and (path / "meta.json").is_file()


def _open_training_data(data: DataArg, tok_section: dict[str, Any], run_dir: Path, info: dist.DistInfo, reuse: bool,
                        tokenizer: Any = None):
    """``(corpus, tokenizer)``: a prepared corpus as is, or raw text -> tokenizer + corpus in RUN_DIR/data
    (kept and reused when resuming, so the resumed run sees the same token ids).  With ``tokenizer``
    (continued pre-training) raw text is prepared with it instead of a newly trained one."""
    from ptmkit.data.corpus import Corpus
    from ptmkit.data.prepare import prepare
    from ptmkit.tokenization import Tokenizer

    paths = _as_paths(data)
    if len(paths) == 1 and _is_corpus(paths[0]):
        corpus = Corpus.open(paths[0])
        return corpus, corpus.load_tokenizer()
    for p in paths:
        if p.is_dir():
            raise PtmError(f"{p} is a directory but not a prepared corpus (no meta.json); run `ptm prepare` or give text files")
        if not p.is_file():
            raise PtmError(f"training data not found: {p}")
    out = run_dir / DATA_DIR
    if reuse:  # --resume: the run's own prepared copy of the text, never re-prepared
        _check_same_text(out, paths)
    if info.is_main and not (reuse and _is_corpus(out)):
        section = dict(tok_section)
        kind = section.pop("kind", "wordpiece")
        vocab_size = section.pop("vocab_size", 30522)
        if tokenizer is not None:
            tok = tokenizer
        else:
            try:
                tok = Tokenizer.train(paths, kind=kind, vocab_size=vocab_size, **section)
            except TypeError as exc:
                raise PtmError(f"invalid tokenizer section {tok_section}: {exc}") from exc
        prepare(paths, tok, out, overwrite=True)
    dist.barrier()
    corpus = Corpus.open(out)
    return corpus, corpus.load_tokenizer()


def _check_same_text(prepared: Path, paths: list[Path]) -> None:
    """On resume, the text given must be the text ``RUN_DIR/data`` was prepared from (by file name
    and size): the run continues on that prepared copy, so other text would be silently ignored."""
    if not _is_corpus(prepared):
        raise PtmError(
            f"cannot resume on text: the run has no prepared copy of its text in {prepared} (it was trained on a "
            f"prepared corpus directory); resume with --data set to that corpus"
        )
    try:
        sources = json.loads((prepared / "meta.json").read_text(encoding="utf-8")).get("sources") or []
        recorded = [(Path(s["path"]).name, int(s["bytes"])) for s in sources]
    except (OSError, ValueError, KeyError, TypeError):
        return  # an old corpus without a readable record: nothing to compare
    given = [(p.name, p.stat().st_size) for p in paths]
    if recorded and recorded != given:
        was = ", ".join(f"{n} ({b:,} bytes)" for n, b in recorded)
        now = ", ".join(f"{n} ({b:,} bytes)" for n, b in given)
        raise PtmError(
            f"cannot resume: the run was trained on {was}, but --data now gives {now}; resume with the same "
            f"text, or start a new run directory to train on this one"
        )


def _check_same_tokenizer(checkpoint: Path, tokenizer: Any, corpus: Any, what: str = "resume") -> None:
    """On resume, the corpus must use the checkpoint's tokenizer: the same vocabulary size is not
    enough (other token ids would silently mean other words).  The corpus's ``meta.json`` records
    its tokenizer's hash; the checkpoint's ``tokenizer.json`` is compared with it, then by content."""
    from ptmkit.data.sources.base import sha256
    from ptmkit.tokenization import Tokenizer

    tok_file = checkpoint / ckpt.TOKENIZER_FILE
    if not tok_file.is_file():
        return
    if corpus.meta.get("tokenizer_sha256") == sha256(tok_file):
        return
    if Tokenizer.load(tok_file).to_json() == tokenizer.to_json():
        return  # the same tokenizer, serialised differently
    if what != "resume":
        raise PtmError(
            f"cannot {what}: the corpus {corpus.path} was prepared with a different tokenizer than the checkpoint "
            f"{checkpoint} was trained with (its token ids would mean other words); give text files (they are "
            f"prepared with the run's tokenizer) or a corpus prepared with `ptm prepare --tokenizer {checkpoint / ckpt.TOKENIZER_FILE}`"
        )
    raise PtmError(
        f"cannot resume: the corpus {corpus.path} was prepared with a different tokenizer than the checkpoint "
        f"{checkpoint} was trained with (its token ids would mean other words); resume with the data the run "
        f"was trained on, or start a new run directory"
    )


def _open_eval_data(data: DataArg, tokenizer: Any, run_dir: Path, info: dist.DistInfo, reuse: bool):
    from ptmkit.data.corpus import Corpus
    from ptmkit.data.prepare import prepare

    paths = _as_paths(data)
    if len(paths) == 1 and _is_corpus(paths[0]):
        corpus = Corpus.open(paths[0])
        if corpus.load_tokenizer().to_json() != tokenizer.to_json():
            raise PtmError(f"the eval corpus {paths[0]} was prepared with a different tokenizer than the training data")
        return corpus
    for p in paths:
        if not p.is_file():
            raise PtmError(f"eval data not found: {p} (give a prepared corpus directory or text file(s))")
    out = run_dir / EVAL_DATA_DIR
    if info.is_main and not (reuse and _is_corpus(out)):
        prepare(paths, tokenizer, out, overwrite=True)
    dist.barrier()
    return Corpus.open(out)


def _inputs_record(data: DataArg, eval_data: DataArg | None) -> dict[str, Any]:
    """What the run trains on, as fingerprints (:func:`ptmkit.identity.fingerprint`): the text
    files or prepared corpus given as ``--data`` and ``--eval-data``."""
    return {"data": [fingerprint(p) for p in _as_paths(data)],
            "eval_data": [fingerprint(p) for p in _as_paths(eval_data)] if eval_data is not None else None}


def _check_same_inputs(run_dir: Path, now: dict[str, Any]) -> None:
    """On resume, the data must be the data the run started on (by content, not by name)."""
    path = run_dir / INPUTS_FILE
    if not path.is_file():
        log.info("%s records no input fingerprints (an earlier ptmkit wrote it); the data are not compared", run_dir)
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PtmError(f"cannot resume: {path} is unreadable ({exc}); start a new run directory") from exc
    diffs = differences(recorded, now)
    if diffs:
        raise PtmError(
            "cannot resume: the data differ from those the run was trained on (" + "; ".join(diffs[:4])
            + "); resume with the same --data and --eval-data, or start a new run directory"
        )


def _read_run_config(stored_file: Path, latest: Path) -> dict[str, Any]:
    """The run's config.json, or the latest checkpoint's copy when the run has none."""
    if not stored_file.is_file():
        return ckpt.read_config(latest)
    try:
        stored = json.loads(stored_file.read_text(encoding="utf-8"))
        if not isinstance(stored, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise PtmError(
            f"cannot resume: {stored_file} is unreadable ({exc}); the latest checkpoint keeps a copy of the run's "
            f"config: cp {latest / ckpt.CONFIG_FILE} {stored_file}"
        ) from exc
    return stored


def check_compatible(stored: dict[str, Any], new: dict[str, Any]) -> None:
    """Raise unless ``new`` continues ``stored`` exactly (only logging/length settings may change)."""
    diffs = []
    was, now = (stored.get("train") or {}).get("max_steps"), (new.get("train") or {}).get("max_steps")
    if isinstance(was, int) and isinstance(now, int) and now < was:
        diffs.append(f"train.max_steps: {was} in the run, {now} now (it may only grow on resume)")
    for section in sorted(set(stored) | set(new)):
        a, b = stored.get(section, {}), new.get(section, {})
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b:
                diffs.append(f"{section}: {a!r} in the run, {b!r} now")
            continue
        for key in sorted(set(a) | set(b)):
            if section == "train" and key in RESUMABLE_CHANGES:
                continue
            if a.get(key) != b.get(key):
                diffs.append(f"{section}.{key}: {a.get(key)!r} in the run, {b.get(key)!r} now")
    if diffs:
        raise PtmError(
            "cannot resume: the config differs from the stored run's config (" + "; ".join(diffs) + "); "
            "resume with the same preset and overrides, or start a new run directory"
        )


def _prepare_run_dir(run_dir: Path, resume: bool, overwrite: bool, info: dist.DistInfo, inputs: Sequence[Any],
                     stack: contextlib.ExitStack) -> None:
    """Check RUN_DIR before any slow work (:func:`ptmkit.outputs.check`: new, empty or a run of
    ptm's; no input inside it), then open it for writing (:func:`ptmkit.outputs.writing`: the lock,
    the manifest) for the rest of the command.  Nothing is removed here: with --overwrite the
    previous run's files go once the inputs have been read (:func:`_start_over`); a failing
    command removes what it created unless a checkpoint exists (a killed run keeps what
    --resume needs)."""
    outputs.check(run_dir, "run", inputs, overwrite=overwrite, reuse=True)
    has_checkpoints = bool(ckpt.checkpoint_steps(run_dir))
    if resume and not has_checkpoints:
        where = "does not exist" if not run_dir.exists() else "has no checkpoint"
        raise PtmError(
            f"nothing to resume: {run_dir} {where}; drop --resume to start a new run there, or give the "
            f"run directory of the run to continue"
        )
    if has_checkpoints and not resume and not overwrite:
        raise PtmError(
            f"{run_dir} already holds checkpoints; pass --resume to continue that run, "
            f"--overwrite to start it over, or choose another output directory"
        )
    dist.barrier()  # every rank has looked before anything is written
    if info.is_main:
        has_checkpoint = lambda: bool(ckpt.checkpoint_steps(run_dir))  # noqa: E731
        names = [*outputs.KINDS["run"].names, INPUTS_FILE]
        stack.enter_context(outputs.writing(run_dir, "run", inputs, overwrite=overwrite, reuse=True, names=names,
                                            keep=has_checkpoint))
    dist.barrier()


def _start_over(run_dir: Path, corpus: Any, info: dist.DistInfo) -> None:
    """--overwrite: remove the previous run's files (checkpoints, logs, config, prepared data) now
    that the inputs are read and the new config is resolved, so a failing command loses nothing
    it did not have to; a prepared copy of the text just written for this run stays.  Files in
    RUN_DIR that ptm did not write stay too."""
    if info.is_main:
        just_prepared = Path(corpus.path).resolve() == (run_dir / DATA_DIR).resolve()
        outputs.clean(run_dir, keep=[DATA_DIR] if just_prepared else [])
    dist.barrier()


@dataclass(frozen=True)
class ContinuedStart:
    """Where continued pre-training starts: the source checkpoint, its tokenizer, and the raw
    config (the source run's resolved config with the overrides applied)."""

    checkpoint: Path
    tokenizer: Any
    raw: dict[str, Any]


def continued_start(preset_or_config: str | Path | dict[str, Any], init_from: str | Path, overrides: Sequence[str]) -> ContinuedStart:
    """Read the run (or checkpoint) ``init_from``; its config with ``overrides`` applied is the new
    run's config.  ``preset_or_config`` must name the same encoder and objective (an error
    otherwise); where its model keys differ from the run's (a run trained with size overrides),
    the run's are kept and a note says so.  Overrides that would change a parameter's shape are
    refused: the weights would not fit."""
    import torch

    from ptmkit.tokenization import Tokenizer

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

    if names(preset) != names(stored):
        (e1, o1), (e2, o2) = names(stored), names(preset)
        raise PtmError(
            f"--init-from {init_from}: that run trained encoder {e1!r} with objective {o1!r}, but {name} describes "
            f"encoder {e2!r} with objective {o2!r}; give the preset the run was trained with"
        )
    base = {k: v for k, v in stored.items() if k in ("model", "objective", "tokenizer", "train")}
    raw = apply_overrides(base, overrides)
    pin = [f"model.vocab_size={stored['model']['vocab_size']}"]

    def shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        with torch.device("meta"):  # shapes only, no memory
            model = build_model(resolve_config(cfg, tokenizer, pin), tokenizer)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}

    before, after = shapes(base), shapes(raw)
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
    return ContinuedStart(ck, tokenizer, raw)


def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def pretrain(
    preset_or_config: str | Path | dict[str, Any],
    data: DataArg,
    out_dir: str | Path,
    overrides: Sequence[str] = (),
    resume: bool = False,
    eval_data: DataArg | None = None,
    overwrite: bool = False,
    callbacks: Iterable[Callback] = (),
    verbose: bool = True,
    init_from: str | Path | None = None,
) -> Path:
    """Pre-train and return the run directory (see the module docstring).

    init_from: continued pre-training (ULMFiT's second stage: the LM fine-tuned on target-task
    text): the weights (encoder and objective heads), tokenizer and config of this run or
    checkpoint, with ``overrides`` applied; a fresh optimizer and schedule.  ``preset_or_config``
    must describe the same model (same encoder and objective, same parameter shapes); ``data`` is
    prepared with the run's tokenizer (text), or must have been (a prepared corpus).

    A static model or static preset (``word2vec``, ``glove``, ``word2vec-cbow-hs``, ...; see
    :mod:`ptmkit.static.presets`) is trained by :func:`ptmkit.static.run.run_static` instead: data
    are text files, overrides are that model's config keys, and ``out_dir`` receives ``vectors.bin``.

    data / eval_data: a prepared corpus directory, or text file(s) (one sentence per line, a blank
    line between documents). Without eval_data, ``train.eval_fraction`` of the examples is held out.
    """
    run_dir = Path(out_dir)
    overrides = list(overrides)
    static = _static_model(preset_or_config)
    if static is not None:
        if resume or eval_data is not None or init_from is not None:
            raise PtmError(
                f"{preset_or_config!r} is a static word-embedding model: it trains in one pass over the text "
                f"(no --resume, no --eval-data, no --init-from); evaluate its vectors with `ptm vectors evaluate`"
            )
        from ptmkit.static.run import run_static

        run_static(preset_or_config, [str(p) for p in _as_paths(data)], run_dir, overrides, progress=verbose, overwrite=overwrite)
        if verbose:
            _print_static_summary(static, run_dir)
        return run_dir
    if not isinstance(preset_or_config, dict):
        outputs.check_inputs(run_dir, [preset_or_config])  # a preset YAML file is an input too
    source = None
    if init_from is not None:
        source = continued_start(preset_or_config, init_from, overrides)
        raw = source.raw
    else:
        raw = apply_overrides(load_config(preset_or_config), overrides)
    device = str((raw.get("train") or {}).get("device", "auto"))
    dist.resolve_device(device)  # train.device=cuda without a GPU fails before anything is written
    started = not dist.is_distributed()
    info = dist.init_distributed(device)
    succeeded = False
    try:
        with contextlib.ExitStack() as stack:  # holds RUN_DIR's lock and manifest (see _prepare_run_dir)
            result = _pretrain(raw, data, run_dir, overrides, resume, eval_data, overwrite, list(callbacks), verbose, info,
                               stack, source)
        succeeded = True
        return result
    finally:
        if started:
            dist.cleanup(succeeded)


def _static_model(preset_or_config: str | Path | dict[str, Any]) -> str | None:
    """The static model's name when ``preset_or_config`` names a static model or static preset."""
    from ptmkit.static.presets import resolve_static

    resolved = resolve_static(preset_or_config)
    return None if resolved is None else resolved[0]


def _print_static_summary(model: str, run_dir: Path) -> None:
    from ptmkit.static.run import vectors_header

    n, dim = vectors_header(run_dir)
    stats = json.loads((run_dir / RUN_CONFIG).read_text()).get("stats", {}) if (run_dir / RUN_CONFIG).is_file() else {}
    speed = stats.get("words_per_second") or stats.get("train_words_per_s")
    timing = f" in {stats['seconds']:.1f} s" if "seconds" in stats else ""
    timing += f" ({speed:,.0f} words/s)" if speed else ""
    print(f"{model}: {n:,} words x {dim} dimensions{timing}\nvectors: {run_dir / 'vectors.bin'}", flush=True)


def init_from_corpus(encoder, objective, corpus, train_spans, train_cfg: TrainConfig, verbose: bool = False) -> None:
    """The data-dependent part of the initial weights (before step 1): the objective's own
    (``Objective.init_from_corpus``), then with ``train.init_embeddings`` word2vec vectors of the
    training examples' tokens as the word embeddings.  Deterministic (word2vec on one thread with
    a fixed seed), so every DDP rank computes the same weights."""
    objective.init_from_corpus(corpus, train_spans)
    if train_cfg.init_embeddings == "none":
        return
    from ptmkit.static.init_embeddings import init_word_embeddings

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


def initial_model(run_dir: str | Path):
    """A pre-training run's starting point (step 0) as a ``Pretrained``: fresh weights from the
    run's seed plus ``init_from_corpus`` on its prepared corpus (``RUN_DIR/data``) and training
    split.  With ``train.init_embeddings`` this is "word vectors only, no Transformer objective".
    (A run whose ``--eval-data`` was a prepared corpus directory left no trace of it in RUN_DIR: its
    start is rebuilt as if ``eval_fraction`` had been held out.)"""
    from ptmkit.data.batches import split_spans
    from ptmkit.data.corpus import Corpus

    run_dir = Path(run_dir)
    config = json.loads((run_dir / RUN_CONFIG).read_text())
    if not _is_corpus(run_dir / DATA_DIR):
        raise PtmError(f"{run_dir} has no prepared corpus in {DATA_DIR}/ (it was trained on a corpus directory)")
    corpus = Corpus.open(run_dir / DATA_DIR)
    tokenizer = corpus.load_tokenizer()
    train_cfg = from_dict(TrainConfig, config["train"], "train")
    seed_everything(train_cfg.seed)
    model = build_model(config, tokenizer)
    spans = model.objective.example_spans(corpus, train_cfg.seq_len)
    held_out = train_cfg.eval_fraction > 0 and not (run_dir / EVAL_DATA_DIR).exists()  # as _pretrain splits
    contiguous = bool(getattr(model.objective, "reads_streams", False))
    train_spans = split_spans(spans, train_cfg.eval_fraction, train_cfg.seed, contiguous)[0] if held_out else spans
    init_from_corpus(model.backbone, model.objective, corpus, train_spans, train_cfg)
    return Pretrained(config, tokenizer, model.backbone, model.objective, None, model)


def _pretrain(raw, data, run_dir, overrides, resume, eval_data, overwrite, callbacks, verbose, info, stack,
              source=None) -> Path:
    from ptmkit.data.batches import PretrainBatches, split_spans

    from_dict(TrainConfig, raw.get("train"), "train")  # fail on a bad key before any slow work
    inputs = _as_paths(data) + (_as_paths(eval_data) if eval_data is not None else [])
    if source is not None:
        inputs.append(source.checkpoint)
    _prepare_run_dir(run_dir, resume, overwrite, info, inputs, stack)
    given_tokenizer = source.tokenizer if source is not None else None
    corpus, tokenizer = _open_training_data(data, raw.get("tokenizer") or {}, run_dir, info, resume, given_tokenizer)
    if source is not None:
        _check_same_tokenizer(source.checkpoint, tokenizer, corpus, "continue pre-training")
        overrides = [*overrides, f"model.vocab_size={raw['model']['vocab_size']}"]  # the run's, not the tokenizer's
    config = resolve_config(raw, tokenizer, overrides)
    stored_file = run_dir / RUN_CONFIG
    inputs_record = _inputs_record(data, eval_data)
    if resume and ckpt.checkpoint_steps(run_dir):
        latest = ckpt.latest_checkpoint(run_dir)
        _check_same_tokenizer(latest, tokenizer, corpus)
        stored = _read_run_config(stored_file, latest)
        check_compatible(stored, config)
        _check_same_inputs(run_dir, inputs_record)
        step = ckpt.checkpoint_steps(run_dir)[-1][0]
        if config["train"]["max_steps"] < step:
            raise PtmError(
                f"cannot resume: the run is at step {step}, past train.max_steps={config['train']['max_steps']}; "
                f"give a larger train.max_steps to train on"
            )
    if overwrite:
        _start_over(run_dir, corpus, info)
    train_cfg = from_dict(TrainConfig, config["train"], "train")

    seed_everything(train_cfg.seed)  # identical initial weights for a given seed
    model = build_model(config, tokenizer)
    backbone, objective = model.backbone, model.objective

    seq_len = train_cfg.seq_len
    spans = objective.example_spans(corpus, seq_len)
    if eval_data is not None:
        eval_corpus = _open_eval_data(eval_data, tokenizer, run_dir, info, resume)
        train_spans, eval_spans = spans, objective.example_spans(eval_corpus, seq_len)
    elif train_cfg.eval_fraction > 0:
        eval_corpus = corpus
        train_spans, eval_spans = split_spans(spans, train_cfg.eval_fraction, train_cfg.seed,
                                              contiguous=bool(getattr(objective, "reads_streams", False)))
    else:
        eval_corpus, train_spans, eval_spans = corpus, spans, spans[:0]
    if not (resume and ckpt.checkpoint_steps(run_dir)):  # a resumed run loads its weights instead
        if source is not None:  # continued pre-training: every weight from the source run
            ckpt.load_model_weights(model, source.checkpoint)
            if verbose and info.is_main:
                print(f"  weights, tokenizer and config from {source.checkpoint}", flush=True)
        else:
            init_from_corpus(backbone, objective, corpus, train_spans, train_cfg, verbose and info.is_main)
    if len(train_spans) < train_cfg.batch_size:
        raise PtmError(
            f"the corpus gives {len(train_spans)} training examples of <= {seq_len} tokens, fewer than "
            f"train.batch_size={train_cfg.batch_size}; use more text or a smaller batch"
        )
    common = dict(seq_len=seq_len, batch_size=train_cfg.batch_size, seed=train_cfg.seed, rank=info.rank, world_size=info.world_size)
    batches = PretrainBatches(corpus, objective, train_spans, **common)
    eval_source = PretrainBatches(eval_corpus, objective, eval_spans, **common) if len(eval_spans) else None

    if info.is_main:
        ckpt.atomic_write_text(stored_file, json.dumps(config, indent=2, sort_keys=True) + "\n")
        ckpt.atomic_write_text(run_dir / INPUTS_FILE, json.dumps(inputs_record, indent=1) + "\n")
    trainer = Trainer(model, batches, train_cfg, run_dir, eval_source, {"config": config, "tokenizer": tokenizer}, callbacks)
    if verbose and info.is_main:
        n_params = count_parameters(model)
        table = backbone.input_embeddings()
        n_emb = table.weight.numel() if table is not None else 0
        tokens_per_step = train_cfg.batch_size * seq_len
        epochs = train_cfg.max_steps / max(1, batches.steps_per_epoch)
        print(
            f"pretrain {config['objective']['name']}: {n_params / 1e6:.2f}M parameters "
            f"({(n_params - n_emb) / 1e6:.2f}M without word embeddings), vocab {config['model']['vocab_size']}\n"
            f"  data: {corpus.n_tokens:,} tokens, {len(train_spans):,} train / {len(eval_spans):,} eval examples "
            f"of <= {seq_len} tokens\n"
            f"  steps: {train_cfg.max_steps:,} x batch {train_cfg.batch_size} (<= {tokens_per_step:,} tokens/step, "
            f"{epochs:.2f} epochs), {info.world_size} process(es) on {trainer.device}\n"
            f"  run directory: {run_dir}",
            flush=True,
        )
    result = trainer.fit(resume=resume)
    if verbose and info.is_main:
        parts = [f"step {result['step']}"]
        if "train_loss" in result:
            parts.append(f"train loss {result['train_loss']:.4f}")
        for k in sorted(result):
            if k.startswith("eval_"):
                parts.append(f"{k.replace('_', ' ')} {result[k]:.4f}")
        print("final: " + ", ".join(parts), flush=True)
        print(f"checkpoint: {ckpt.latest_checkpoint(run_dir)}", flush=True)
    return run_dir
