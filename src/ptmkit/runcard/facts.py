"""What a run is, read from its own files: :func:`describe` gives a :class:`Card` for a
pre-training run, a fine-tuning run, a distilled student and its distillation, a pruned or a
quantized task model, a static-vectors run, an HF export, an imported checkpoint, a checkpoint
directory or an HF model directory; anything else is a :class:`PtmError`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptmkit.errors import PtmError
from ptmkit.identity import fingerprint
from ptmkit.outputs.kinds import KINDS, MARKER
from ptmkit.runcard.files import (
    count_lines,
    count_parameters,
    last_records,
    marker_kind,
    number,
    read_json,
    safetensors_shapes,
    tokenizer_summary,
    unreadable_records,
    vectors_header,
    weights_file,
)

LABELS = {
    "run": "pre-training run",
    "finetune": "fine-tuning run",
    "student": "distilled student",
    "distil": "distillation",
    "prune": "pruned task model",
    "quantize": "quantized task model (int8)",
    "vectors": "static word-vectors run",
    "export": "HF transformers export",
    "checkpoint": "imported checkpoint",
    "step": "checkpoint",
    "hf": "HF model directory",
}


@dataclass
class Card:
    """The facts a run card shows (``rows``: model, parameters, tokenizer, ... as label -> text)."""

    path: Path
    kind: str  # a key of LABELS
    name: str = ""  # the directory's name as the card shows it (a staged output is written under another)
    rows: dict[str, str] = field(default_factory=dict)
    data: list[dict[str, Any]] = field(default_factory=list)  # {"name", "bytes", "sha256"} (+ "what")
    budget: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # final metrics, shown in this order
    key_metrics: dict[str, Any] = field(default_factory=dict)  # the few `ptm runs` lists
    command: str | None = None
    derives_from: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return LABELS[self.kind]


def describe(path: Path | str, data: list[Path] | tuple = (), derives_from: list[Any] | tuple = (),
             kind: str | None = None, name: str | None = None) -> Card:
    """The :class:`Card` of the run or model directory ``path``.  ``data`` (files to fingerprint)
    and ``derives_from`` (runs it was made from) add what the directory does not record itself;
    ``kind`` and ``name`` describe a staged output (a scratch directory without ptm's marker yet)."""
    d = Path(path)
    if not d.is_dir():
        raise PtmError(f"{d} is not a directory; ptm info takes a run or model directory")
    kind = kind or classify(d)
    card = Card(d, kind, name or d.name)
    READERS[kind](d, card)
    bad = unreadable_records(d)
    if bad:
        card.rows["unreadable records"] = (", ".join(bad) + " cannot be read: the facts they hold are missing "
                                           "from this card; restore them from a backup or a checkpoint's copy")
    card.data.extend(fingerprint(p) for p in data)
    card.derives_from.extend(str(p) for p in derives_from if str(p) not in card.derives_from)
    return card


def classify(d: Path) -> str:
    """Which kind of run ``d`` is (a key of :data:`LABELS`), or a :class:`PtmError` saying what it is instead."""
    kind = marker_kind(d)
    config = read_json(d / "config.json")
    if kind in ("run", "vectors", "export", "checkpoint", "prune", "quantize", "distil"):
        return kind
    if kind == "finetune":
        if (d / "results.json").is_file() or (d / "checkpoints").is_dir() or (d / "metrics.jsonl").is_file():
            return "student" if is_student(d) else "finetune"
        seeds = sorted(p.name for p in d.iterdir() if p.is_dir() and marker_kind(p) == "finetune")
        raise PtmError(
            f"{d} holds {len(seeds)} fine-tuning run(s) ({', '.join(seeds[:6]) or 'none finished'}), not one; "
            f"give one of them to ptm info, or list them all with `ptm runs {d}`"
        )
    if kind is not None:
        what = KINDS[kind].label if kind in KINDS else f"{kind} output"
        raise PtmError(f"{d} is a {what}, not a run; list the runs under it with `ptm runs {d}`")
    if isinstance(config, dict) and "model_type" in config:
        return "hf"
    if isinstance(config, dict) and isinstance(config.get("model"), dict) and weights_file(d) is not None:
        return "step"
    raise PtmError(
        f"{d} is not a run: it has no ptm marker ({MARKER}) and no model config.json with weights; "
        f"`ptm runs {d}` lists the runs under a folder"
    )


# -- one reader per kind -------------------------------------------------------------------------------
def _model_rows(card: Card, config: dict[str, Any]) -> None:
    model, objective = config.get("model") or {}, config.get("objective") or {}
    sizes = [f"{model[k]} {label}" for k, label in (("num_layers", "layers"), ("hidden_size", "hidden"),
                                                    ("num_heads", "heads")) if k in model]
    card.rows["model"] = f"encoder `{model.get('encoder', 'transformer')}`" + (f" ({', '.join(sizes)})" if sizes else "")
    vision = config.get("vision") or {}
    if vision:  # a vision-language run: the image encoder beside the text tower
        sizes = [f"{vision[k]} {label}" for k, label in (("image_size", "px"), ("num_layers", "layers"),
                                                         ("hidden_size", "hidden")) if k in vision]
        card.rows["image encoder"] = f"`{vision.get('encoder')}`" + (f" ({', '.join(sizes)})" if sizes else "")
        if not model:
            card.rows.pop("model")
    if objective.get("name"):
        card.rows["objective"] = f"`{objective['name']}`"


def _weights_rows(card: Card, d: Path, encoder_prefix: str | None = None) -> None:
    weights = weights_file(d)
    if weights is None:
        return
    shapes = safetensors_shapes(weights)
    total = count_parameters(shapes)
    text = f"{total:,}"
    if encoder_prefix is not None and count_parameters(shapes, encoder_prefix) not in (0, total):
        text += f" ({count_parameters(shapes, encoder_prefix):,} in the encoder, the rest in the objective's heads)"
    card.rows["parameters"] = text
    card.key_metrics["parameters"] = total


def _tokenizer_row(card: Card, path: Path, config: dict[str, Any] | None = None) -> None:
    summary = tokenizer_summary(path)
    kind = ((config or {}).get("tokenizer") or {}).get("kind")
    if summary or kind:
        card.rows["tokenizer"] = (f"`{kind}`: " if kind else "") + (summary or "")


def _pretraining(d: Path, card: Card) -> None:
    config = read_json(d / "config.json") or {}
    latest = d / "checkpoints" / _read_text(d / "checkpoints" / "latest")
    ck_config = read_json(latest / "config.json") if latest != d / "checkpoints" else None
    config = config or ck_config or {}
    _model_rows(card, config)
    if latest.is_dir():
        _weights_rows(card, latest, "backbone.")
        _tokenizer_row(card, latest / "tokenizer.json", config)
    inputs = read_json(d / "inputs.json") or {}
    for what in ("data", "eval_data"):
        for item in inputs.get(what) or []:
            if isinstance(item, dict):  # a record of another layout is left out, never a crash
                card.data.append({**item, "what": what.replace("_", " ")})
    train = config.get("train") or {}
    last = last_records(d / "metrics.jsonl")
    step = (last.get("train") or last.get("eval") or {}).get("step")
    if train:
        tokens = train.get("batch_size", 0) * train.get("seq_len", 0) * train.get("max_steps", 0)
        card.budget["steps"] = f"{step if step is not None else 0:,} of train.max_steps={train.get('max_steps'):,}"
        card.budget["batch"] = f"{train.get('batch_size')} x {train.get('seq_len')} tokens (at most {tokens:,} tokens in all)"
        card.budget["optimizer"] = (f"AdamW, lr {train.get('lr')}, {train.get('schedule')} schedule, "
                                    f"{train.get('warmup_steps')} warm-up steps")
        card.budget["precision, device"] = f"{train.get('precision')}, {train.get('device')}"
        if train.get("max_seconds"):
            card.budget["time limit"] = f"{train['max_seconds']} s"
    if "elapsed" in (last.get("train") or {}):
        card.budget["training time"] = f"{last['train']['elapsed']:.1f} s"
    for split in ("eval", "train"):
        for k, v in (last.get(split) or {}).items():
            if k not in ("step", "split", "epoch", "elapsed"):
                card.metrics[f"{split} {k}"] = v
    final = last.get("eval") or last.get("train") or {}
    card.key_metrics.update({"step": step, **{k: final[k] for k in ("loss", "ppl") if k in final}})


def _finetuning(d: Path, card: Card) -> None:
    results = read_json(d / "results.json") or {}
    summary = read_json(d.parent / "summary.json") or {}
    cfg = results.get("config") or (read_json(d / "task_model.json") or {}).get("finetune") or {}
    task = results.get("task") or summary.get("task")
    card.rows["task"] = f"`{task}` ({results.get('task_type', 'classification')})" if task else "unknown (not finished)"
    card.rows["start"] = f"{results.get('init', '?')} weights, seed {results.get('seed', '?')}"
    if cfg:
        card.rows["settings"] = ", ".join(f"{k}={cfg[k]}" for k in ("mode", "pooling", "head", "lr", "batch_size", "epochs")
                                          if k in cfg)
    if "num_parameters" in results:
        card.rows["parameters"] = f"{results['num_parameters']:,} ({results.get('trainable_parameters', 0):,} trained)"
        card.key_metrics["parameters"] = results["num_parameters"]
    if (d / "tokenizer.json").is_file():
        _tokenizer_row(card, d / "tokenizer.json")
    if results.get("data_sha256"):
        sizes = results.get("sizes") or {}
        card.data.append({"name": f"task {task}", "what": " / ".join(f"{sizes[s]:,} {s}" for s in sizes) + " examples",
                          "sha256": results["data_sha256"]})
    card.budget["epochs"] = f"{cfg.get('epochs', '?')} (best on dev: {results.get('best_epoch', '?')}, by {results.get('select', '?')})"
    if "time_s" in results:
        card.budget["time"] = f"{results['time_s']} s"
    for split in ("dev", "test"):
        for k, v in (results.get(split) or {}).items():
            card.metrics[f"{split} {k}"] = v
    main = (results.get("metrics") or [results.get("select")])[0]
    card.key_metrics.update({"task": task, f"dev {main}": (results.get("dev") or {}).get(main),
                             f"test {main}": (results.get("test") or {}).get(main)})
    source = results.get("model") or summary.get("model")
    if source:
        card.derives_from.append(str(source))


def _settings(settings: dict[str, Any]) -> str:
    """``kind=layers, layers=[1]``: the settings that are set."""
    return ", ".join(f"{k}={v}" for k, v in settings.items() if v not in (None, {}, [], ""))


def is_student(d: Path) -> bool:
    """Whether the fine-tuning run ``d`` is a student ``ptm distil`` trained (its results record the method)."""
    results = read_json(d / "results.json") or {}
    return (results.get("compression") or {}).get("method") in ("distillation", "theseus")


def _student(d: Path, card: Card) -> None:
    _finetuning(d, card)
    results = read_json(d / "results.json") or {}
    compression = results.get("compression") or {}
    card.rows["method"] = f"{compression.get('method')} (student {_settings(compression.get('student') or {})})"
    card.rows["start"] = f"student made from the teacher, seed {results.get('seed', '?')}"
    teacher = ((results.get("derived_from") or {}).get("teacher") or {}).get("run")
    if teacher and str(teacher) not in card.derives_from:
        card.derives_from.insert(0, str(teacher))


def _distillation(d: Path, card: Card) -> None:
    summary = read_json(d / "summary.json") or {}
    teacher = summary.get("teacher") or {}
    student = summary.get("student") or {}
    card.rows["method"] = f"{summary.get('method', '?')}: student {_settings(student)}"
    seeds = sorted(p.name for p in d.iterdir() if p.is_dir() and (p / "results.json").is_file())
    card.rows["students"] = ", ".join(s for s in seeds if s.startswith("student-")) or "none finished"
    twins = summary.get("labels_only") or {}
    if twins.get("verdict"):  # the labels-only twins' seeds are not students: they get a row of their own
        card.rows["against labels alone"] = twins["verdict"][0]
    if "parameter_ratio" in summary:
        card.rows["size"] = (f"{summary.get('non_embedding_parameters', 0):,} non-embedding parameters, "
                             f"{summary['parameter_ratio']:.0%} of the teacher's {teacher.get('non_embedding_parameters', 0):,}")
        card.key_metrics["size ratio"] = summary["parameter_ratio"]
    for split in ("dev", "test"):
        for k, v in (teacher.get(split) or {}).items():
            card.metrics[f"teacher {split} {k}"] = v
    for init in (summary.get("summary") or {}).values():
        for k, v in init.items():
            if k.startswith(("dev_", "test_")) and isinstance(v, dict):
                card.metrics[f"students {k.replace('_', ' ', 1)} (mean)"] = v.get("mean")
    for split, v in (summary.get("retention") or {}).items():
        card.metrics[f"{split} retention"] = v
        card.key_metrics[f"{split} retention"] = v
    if teacher.get("run"):
        card.derives_from.append(str(teacher["run"]))


def _compressed_rows(d: Path, card: Card, results: dict[str, Any]) -> None:
    """What a pruned and a quantized task model share: task, tokenizer, speed, source run (call it
    after the reader's own scores: ``ptm runs`` shows the task, the scores, the size, the speed-up)."""
    card.rows["task"] = f"`{results.get('task')}` ({results.get('task_type') or 'classification'})"
    scores = {k: v for k, v in card.key_metrics.items() if k.startswith(("dev ", "test "))}
    card.key_metrics = {"task": results.get("task"), **scores,
                        **{k: v for k, v in card.key_metrics.items() if k not in scores}}
    if (d / "tokenizer.json").is_file():
        _tokenizer_row(card, d / "tokenizer.json")
    speed = results.get("speed") or {}
    for key in (k for k in speed if k.startswith("batch_")):
        b = speed[key]
        card.metrics[f"speed-up, {key.replace('_', ' ')} x {speed.get('seq_len')} tokens"] = b.get("speedup")
    if "batch_1" in speed:
        card.key_metrics["speed-up"] = speed["batch_1"].get("speedup")
    if results.get("cpu"):
        card.budget["timed on"] = f"{results['cpu']}, {speed.get('threads', '?')} threads"
    if "time_s" in results:
        card.budget["time"] = f"{results['time_s']} s"
    if results.get("source"):
        card.derives_from.append(str(results["source"]))


def _pruned(d: Path, card: Card) -> None:
    results = read_json(d / "results.json") or {}
    c, metric = results.get("compression") or {}, results.get("select") or "accuracy"
    amount = {"heads": lambda: f"{c.get('fraction')} of the attention heads ({results.get('num_heads_pruned')} of "
                               f"{results.get('total_heads')}), {c.get('order')} order",
              "magnitude": lambda: f"sparsity {number(c.get('sparsity'))} of the encoder's linear weights",
              "layers": lambda: f"kept layers {', '.join(map(str, c.get('kept_layers') or []))}"}
    method = c.get("method")
    card.rows["method"] = f"{method} pruning: " + (amount[method]() if method in amount else "?")
    counts = results.get("num_parameters") or {}
    if counts:
        before, after = (counts.get("before") or {}).get("model"), (counts.get("after") or {}).get("model")
        card.rows["parameters"] = f"{after:,} (from {before:,})" if before and after else "?"
        card.key_metrics["parameters"] = after
    for split in ("dev", "test"):
        for k, v in (results.get(split) or {}).items():
            card.metrics[f"{split} {k}"] = v
            card.metrics[f"{split} {k} unpruned"] = ((results.get("unpruned") or {}).get(split) or {}).get(k)
    card.key_metrics.update({f"{s} {metric}": (results.get(s) or {}).get(metric) for s in ("dev", "test")})
    _compressed_rows(d, card, results)


def _quantized(d: Path, card: Card) -> None:
    results = read_json(d / "results.json") or {}
    q = (results.get("compression") or {}).get("quantization") or {}
    card.rows["method"] = (f"int8 ({q.get('backend', '?')}): {q.get('linear_int8', '?')} linear layers"
                           + (f", {q['embeddings_int8']} embedding tables" if q.get("embeddings_int8") else ""))
    size = results.get("size") or {}
    if size:
        card.rows["size"] = (f"{size.get('int8_bytes', 0):,} bytes (from {size.get('float32_bytes', 0):,}; "
                             f"ratio {number(size.get('ratio'))})")
        card.key_metrics["size ratio"] = size.get("ratio")
    for split in ("dev", "test"):
        scores = results.get(split) or {}
        for k, v in (scores.get("int8") or {}).items():
            card.metrics[f"{split} {k}"] = v
            card.metrics[f"{split} {k} float32"] = (scores.get("float32") or {}).get(k)
    main = next(iter((results.get("test") or {}).get("int8") or {}), None)
    if main is not None:
        card.key_metrics.update({f"{s} {main}": ((results.get(s) or {}).get("int8") or {}).get(main) for s in ("dev", "test")})
    _compressed_rows(d, card, results)


def _vectors(d: Path, card: Card) -> None:
    config = read_json(d / "config.json") or {}
    header = vectors_header(d / "vectors.bin")
    name = config.get("static", "static model")
    settings = ", ".join(f"{k}={config[k]}" for k in ("model", "loss", "dim", "window", "epochs", "min_count") if k in config)
    preset = f", preset `{config['preset']}`" if config.get("preset") else ""
    card.rows["model"] = f"`{name}`" + (f" ({settings})" if settings else "") + preset
    if header is not None:
        card.rows["parameters"] = f"{header[0] * header[1]:,} ({header[0]:,} words x {header[1]} dimensions in vectors.bin)"
        card.key_metrics.update({"words": header[0], "dim": header[1]})
    vocab = count_lines(d / "vocab.txt")
    if vocab is not None:
        card.rows["tokenizer"] = f"words (vocab.txt: {vocab:,} words, min_count={config.get('min_count', '?')})"
    stats = config.get("stats") or {}
    for k, v in stats.items():
        if k.startswith(("valid_", "test_")):  # a knowledge-graph model's link-prediction figures
            card.metrics[k.replace("_", " ")] = v
        else:
            card.budget[k.replace("_", " ")] = number(v)
    for k in ("words_per_second", "train_words_per_s", "seconds"):
        if k in stats:
            card.metrics[k.replace("_", " ")] = stats[k]


def _hf(d: Path, card: Card) -> None:
    config = read_json(d / "config.json") or {}
    arch = ", ".join(config.get("architectures") or []) or "?"
    sizes = [f"{config[k]} {label}" for k, label in (("num_hidden_layers", "layers"), ("n_layer", "layers"),
                                                    ("hidden_size", "hidden"), ("d_model", "hidden"), ("n_embd", "hidden"),
                                                    ("num_attention_heads", "heads"), ("n_head", "heads")) if k in config]
    card.rows["model"] = f"HF `{config.get('model_type')}` model, `{arch}`" + (f" ({', '.join(sizes)})" if sizes else "")
    _weights_rows(card, d)
    if (d / "tokenizer.json").is_file():
        _tokenizer_row(card, d / "tokenizer.json")
    if config.get("transformers_version"):
        card.rows["written by"] = f"transformers {config['transformers_version']}"


def _checkpoint(d: Path, card: Card) -> None:
    config = read_json(d / "config.json") or {}
    _model_rows(card, config)
    _weights_rows(card, d, "backbone.")
    _tokenizer_row(card, d / "tokenizer.json", config)
    if config.get("imported_from"):
        card.derives_from.append(str(config["imported_from"]))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


READERS = {"run": _pretraining, "finetune": _finetuning, "student": _student, "distil": _distillation,
           "prune": _pruned, "quantize": _quantized, "vectors": _vectors, "export": _hf, "hf": _hf,
           "checkpoint": _checkpoint, "step": _checkpoint}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (nested in dicts and lists) as ``None``: JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def card_json(card: Card) -> str:
    """The card's facts as JSON (``ptm info --json``); a NaN or infinite metric is ``null``."""
    return json.dumps(finite({"path": str(card.path), "name": card.name, "kind": card.kind, "label": card.label,
                              "rows": card.rows, "data": card.data, "budget": card.budget, "metrics": card.metrics,
                              "command": card.command, "derives_from": card.derives_from}), indent=1, allow_nan=False)
