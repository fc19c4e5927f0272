"""The run directory of a pre-training run: new, resumed, overwritten or continued from another run.

One call per workflow, :func:`open_run`, checks RUN_DIR before any slow work and opens it for
writing (the lock and manifest of :mod:`ptmkit.outputs`); the :class:`RunDir` it returns then
answers the questions a resumed run raises as the workflow reaches them: is it the same text
(:meth:`RunDir.check_text`), the same config, tokenizer and data (:meth:`RunDir.check_resumed`),
and with ``--overwrite`` it removes the previous run's files once the inputs are read
(:meth:`RunDir.start_over`).  Continued pre-training (``--init-from``) checks its corpus against
the source run's tokenizer with :func:`check_same_tokenizer`.  A comparison of several runs
(``ptm compare``) records what it was asked for and resumes only the same (:func:`check_settings`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Sequence

from ptmkit import outputs
from ptmkit.data.sources.base import sha256
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text, read_record
from ptmkit.identity import differences, fingerprint
from ptmkit.tokenization import Tokenizer
from ptmkit.train import checkpoint as ckpt
from ptmkit.train import distributed as dist
from ptmkit.train.config import TrainConfig

log = logging.getLogger(__name__)

RUN_CONFIG = "config.json"
INPUTS_FILE = "inputs.json"  # fingerprints of the data the run trains on, compared on resume
DATA_DIR, EVAL_DATA_DIR = "data", "eval_data"
# Settings that may change when a run is resumed without changing its result step for step.
RESUMABLE_CHANGES = {
    "max_steps", "eval_every", "eval_batches", "save_every", "keep_checkpoints", "log_every",
    "num_threads", "device", "nan_guard", "max_seconds", "report_to",
}

DataArg = str | Path | Sequence[str | Path]


def as_paths(data: DataArg) -> list[Path]:
    """``--data`` as a list of paths; :class:`PtmError` when it names nothing."""
    items = [data] if isinstance(data, (str, Path)) else list(data)
    if not items:
        raise PtmError("no training data given: pass a prepared corpus directory or text file(s)")
    return [Path(p) for p in items]


def is_corpus(path: Path) -> bool:
    """Whether ``path`` is a prepared corpus directory (it has a ``meta.json``)."""
    return path.is_dir() and (path / "meta.json").is_file()


def inputs_record(data: DataArg, eval_data: DataArg | None) -> dict[str, Any]:
    """What the run trains on, as fingerprints (:func:`ptmkit.identity.fingerprint`): the text
    files or prepared corpus given as ``--data`` and ``--eval-data``."""
    return {"data": [fingerprint(p) for p in as_paths(data)],
            "eval_data": [fingerprint(p) for p in as_paths(eval_data)] if eval_data is not None else None}


def check_compatible(stored: dict[str, Any], new: dict[str, Any]) -> None:
    """Raise unless ``new`` continues ``stored`` exactly (only logging/length settings may change).
    A train setting the stored run does not record (it was written before the setting existed) is
    read as its default, which is what that run trained with."""
    diffs = []
    defaults = json.loads(json.dumps(vars(TrainConfig())))  # as a stored config reads (lists, not tuples)
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
            fallback = defaults.get(key) if section == "train" else None
            was, now = a.get(key, fallback), b.get(key, fallback)
            if was != now:
                diffs.append(f"{section}.{key}: {was!r} in the run, {now!r} now")
    if diffs:
        raise PtmError(
            "cannot resume: the config differs from the stored run's config (" + "; ".join(diffs) + "); "
            "resume with the same preset and overrides, or start a new run directory"
        )


def check_same_tokenizer(checkpoint: Path, tokenizer: Any, corpus: Any, what: str = "resume") -> None:
    """The corpus must use the checkpoint's tokenizer: the same vocabulary size is not enough
    (other token ids would silently mean other words).  The corpus's ``meta.json`` records its
    tokenizer's hash; the checkpoint's ``tokenizer.json`` is compared with it, then by content.
    ``what`` names the action refused (``resume``, ``continue pre-training``)."""
    tok_file = checkpoint / ckpt.TOKENIZER_FILE
    if not tok_file.is_file():
        return
    if corpus.meta.get("tokenizer_sha256") == sha256(tok_file):
        return
    if Tokenizer.load(tok_file).to_json() == tokenizer.to_json():
        return  # the same tokenizer, serialised differently
    if what != "resume":
        raise PtmError(
            f"cannot {what}: the corpus {corpus.path} was prepared with a different tokenizer than the checkpoint's; "
            f"give text files, or a corpus from `ptm prepare --tokenizer {checkpoint / ckpt.TOKENIZER_FILE}`"
        )
    raise PtmError(
        f"cannot resume: the corpus {corpus.path} was prepared with a different tokenizer than the checkpoint "
        f"{checkpoint} was trained with; resume with the run's data, or start a new run directory"
    )


def read_run_config(stored_file: Path, latest: Path) -> dict[str, Any]:
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


class RunDir:
    """A run directory opened by :func:`open_run` for one command (``resume``: continue its
    latest checkpoint; ``overwrite``: start it over)."""

    def __init__(self, path: Path, resume: bool, overwrite: bool, info: dist.DistInfo) -> None:
        self.path, self.resume, self.overwrite, self.info = path, resume, overwrite, info

    @property
    def resuming(self) -> bool:
        """Whether training continues from a checkpoint of this directory (else it starts at step 0)."""
        return self.resume and bool(ckpt.checkpoint_steps(self.path))

    @property
    def config_file(self) -> Path:
        return self.path / RUN_CONFIG

    def check_text(self, paths: list[Path]) -> None:
        """On resume, the text given must be the text ``RUN_DIR/data`` was prepared from (by file
        name and size): the run continues on that prepared copy, so other text would be silently ignored."""
        prepared = self.path / DATA_DIR
        if not is_corpus(prepared):
            raise PtmError(
                f"cannot resume on text: the run has no prepared copy of its text in {prepared} (it was trained on a "
                f"prepared corpus directory); resume with --data set to that corpus"
            )
        meta = read_record(prepared / "meta.json", "it records which text the run was trained on: restore it, or "
                           "start a new run directory")
        try:
            recorded = [(Path(s["path"]).name, int(s["bytes"])) for s in meta.get("sources") or []]
        except (KeyError, TypeError, ValueError) as exc:
            raise PtmError(f"{prepared / 'meta.json'} is damaged (its sources: {exc}); it records which text the "
                           f"run was trained on: restore it, or start a new run directory") from exc
        given = [(p.name, p.stat().st_size) for p in paths]
        if recorded and recorded != given:
            was = ", ".join(f"{n} ({b:,} bytes)" for n, b in recorded)
            now = ", ".join(f"{n} ({b:,} bytes)" for n, b in given)
            raise PtmError(
                f"cannot resume: the run was trained on {was}, but --data now gives {now}; resume with the same "
                f"text, or start a new run directory to train on this one"
            )

    def check_resumed(self, config: dict[str, Any], tokenizer: Any, corpus: Any, record: dict[str, Any]) -> None:
        """A resumed run continues only with its tokenizer, its config (but the settings of
        :data:`RESUMABLE_CHANGES`), its data (by content) and a ``train.max_steps`` not behind it."""
        if not self.resuming:
            return
        latest = ckpt.latest_checkpoint(self.path)
        check_same_tokenizer(latest, tokenizer, corpus)
        check_compatible(read_run_config(self.config_file, latest), config)
        self._check_same_inputs(record)
        step = ckpt.checkpoint_steps(self.path)[-1][0]
        if config["train"]["max_steps"] < step:
            raise PtmError(
                f"cannot resume: the run is at step {step}, past train.max_steps={config['train']['max_steps']}; "
                f"give a larger train.max_steps to train on"
            )

    def _check_same_inputs(self, now: dict[str, Any]) -> None:
        """On resume, the data must be the data the run started on (by content, not by name)."""
        path = self.path / INPUTS_FILE
        if not path.is_file():
            raise PtmError(
                f"cannot resume: {path} is missing, so ptm cannot check that --data is what the run was trained on; "
                f"restore it, or start a new run directory"
            )
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

    def start_over(self, corpus: Any) -> None:
        """--overwrite: remove the previous run's files (checkpoints, logs, config, prepared data)
        now that the inputs are read and the new config is resolved, so a failing command loses
        nothing it did not have to; a prepared copy of the text just written for this run stays.
        Files in RUN_DIR that ptm did not write stay too.  Without --overwrite: nothing."""
        if not self.overwrite:
            return
        if self.info.is_main:
            just_prepared = Path(corpus.path).resolve() == (self.path / DATA_DIR).resolve()
            outputs.clean(self.path, keep=[DATA_DIR] if just_prepared else [])
        dist.barrier()

    def write_record(self, config: dict[str, Any], record: dict[str, Any]) -> None:
        """The resolved config and the inputs' fingerprints, which a later --resume compares."""
        if self.info.is_main:
            ckpt.atomic_write_text(self.config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")
            ckpt.atomic_write_text(self.path / INPUTS_FILE, json.dumps(record, indent=1) + "\n")


SETTINGS = "settings.json"  # what a comparison was asked for; --resume must ask for the same


def check_settings(out: Path, settings: dict[str, Any], resume: bool) -> None:
    """``ptm compare``'s output directory: record the comparison's settings, or on --resume refuse
    other ones (other data, budget, contenders or protocol would mix two comparisons in one table).
    Tasks may be added on --resume (the recorded ones kept, in their order): the pre-trained runs
    and the finished fine-tuning are read back, and only the new tasks are fine-tuned."""
    path = out / SETTINGS
    if resume and path.is_file():
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PtmError(f"cannot resume: {path} is unreadable ({exc}); start a new comparison directory") from exc
        before, now = list(recorded.get("tasks") or []), list(settings.get("tasks") or [])
        added = before != now and now[: len(before)] == before
        diffs = differences({**recorded, "tasks": now} if added else recorded, settings)
        if diffs:
            raise PtmError(
                f"cannot resume {out}: it was started with other settings ({'; '.join(diffs[:6])}"
                f"{'; ...' if len(diffs) > 6 else ''}); resume with the same ones (tasks may be added after "
                f"the recorded ones), or start a new output directory"
            )
        if added:
            atomic_write_text(path, json.dumps(settings, indent=1) + "\n")
        return
    if resume and (out / "runs").exists():
        raise PtmError(f"cannot resume {out}: it records no settings ({SETTINGS}); start a new output directory")
    atomic_write_text(path, json.dumps(settings, indent=1) + "\n")


def open_run(run_dir: Path, resume: bool, overwrite: bool, info: dist.DistInfo, inputs: Sequence[Any],
             stack: contextlib.ExitStack) -> RunDir:
    """Check RUN_DIR before any slow work (:func:`ptmkit.outputs.check`: new, empty or a run of
    ptm's; no input inside it; ``--resume`` needs a checkpoint, a directory holding checkpoints
    needs ``--resume`` or ``--overwrite``), then open it for writing (:func:`ptmkit.outputs.writing`:
    the lock, the manifest) for the rest of the command held by ``stack``.  Nothing is removed
    here: with --overwrite the previous run's files go once the inputs have been read
    (:meth:`RunDir.start_over`); a failing command removes what it created unless a checkpoint
    exists (a killed run keeps what --resume needs)."""
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
    return RunDir(run_dir, resume, overwrite, info)
