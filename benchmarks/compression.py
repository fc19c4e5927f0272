"""The compression chapter on a real pre-trained teacher: all-MiniLM-L6-v2 fine-tuned on MR.

Stages (each a ``ptm`` command; a finished stage is read back, an interrupted one resumed; every
student stage trains one student per teacher seed):

* ``teacher``: MiniLM (6 layers, H 384) fine-tuned on MR's full training split, seeds 1-3;
* ``kd``: a 3-layer student made of the teacher's layers 1, 3, 5 (DistilBERT's one-of-two), distilled
  (alpha 0.5, T 2) from each teacher seed; ``labels``: the same student on the gold labels alone
  (alpha 1); ``tinybert``: + TinyBERT's hidden-state and attention losses; ``bilstm``: Tang et al.'s
  BiLSTM student, distilled and on labels alone; ``augment``: the BiLSTM distilled on a transfer set
  grown ``--augment`` times by Tang et al.'s augmentation; ``theseus``: BERT-of-Theseus 6 -> 3;
* ``heads``: head pruning curves (importance and random order, 10 % steps) and the physically pruned model;
  ``magnitude``: unstructured magnitude pruning; ``layerdrop``: fine-tuned with LayerDrop 0.2 and cut
  to layers 1, 3, 5, against the plain teacher cut the same way and a 3-layer MiniLM fine-tuned
  directly; ``int8``: dynamic int8 quantization of every teacher (and of the distilled student);
* ``pos``: the same 3-layer distillation (and the labels-only student) from MiniLM fine-tuned on brown-pos
  (a fixed 4,000-sentence training subset, the one the students see too);
* ``general``: task-agnostic distillation of MiniLM into 3 layers on a slice of english-mix (TinyBERT's
  general distillation: hidden states, attention maps, cosine), then fine-tuned on MR and brown-pos
  beside MiniLM and the directly cut 3-layer MiniLM (brown-pos: a fixed 4,000-sentence training subset);
* ``small``: the small-data row: MiniLM fine-tuned on a fixed 500-sentence MR subset with the
  small-data recipe (5 epochs, batch 16, LR 1e-4), the 3-layer student distilled from each seed with
  ``ptm distil``'s defaults for a small transfer set (Tang et al.'s augmentation, a labels-only twin),
  and int8 of each teacher; the majority class of MR's test split beside them;
* ``speed``: CPU inference of the teacher, the 3-layer student, the BiLSTM and the int8 models on MR's
  test sentences, batch 1 and 32, interleaved rounds, medians.

    python benchmarks/compression.py [--out runs/compression] [--seeds 1 2 3] [--stages teacher,kd,...]

Prints a table and, as the last line, one JSON object; writes ``results.json`` there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ptmkit.train.mfu import cpu_name

STAGES = ("teacher", "kd", "labels", "tinybert", "bilstm", "augment", "theseus", "heads", "magnitude", "layerdrop", "int8",
          "general", "pos", "small", "speed")
TEACHER = ["epochs=2", "lr=5e-5", "batch_size=32", "max_seq_len=64", "precision=bf16"]
STUDENT = ["epochs=3", "lr=1e-4"]
POS = ["--task", "brown-pos", "--train-size", 4000, *TEACHER]  # a fixed 4,000-sentence training subset
LAYERS = "1,3,5"
SMALL = ["--task", "mr", "--train-size", 500, "epochs=5", "lr=1e-4", "batch_size=16", "max_seq_len=64", "precision=bf16"]


def ptm(*args: object) -> None:
    cmd = [sys.executable, "-m", "ptmkit.cli", *map(str, args)]
    print("$ ptm " + " ".join(map(str, args)), flush=True)
    subprocess.run(cmd, check=True)


def done(path: Path, name: str = "summary.json") -> bool:
    return (path / name).is_file()


def resume_flag(path: Path) -> list[str]:
    return ["--resume"] if path.exists() else []


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def minilm(out: Path) -> Path:
    import ptmkit
    from ptmkit.data.sources.base import fetch

    path = out / "minilm"
    if not (path / "config.json").is_file():
        ptmkit.import_hf(fetch("minilm"), path)
    return path


def minilm_3(out: Path, base: Path) -> Path:
    """MiniLM cut to its layers 1, 3, 5 before any fine-tuning (the same depth, no distillation)."""
    from ptmkit.pretrained import load_pretrained, save_pretrained

    path = out / "minilm-3"
    if not (path / "config.json").is_file():
        pre = load_pretrained(base)
        pre.backbone.keep_layers([int(i) for i in LAYERS.split(",")])
        save_pretrained(path, {**pre.config, "model": {**pre.config["model"], "num_layers": 3}}, pre.model, pre.tokenizer)
    return path


def teacher_runs(out: Path, seeds: list[int], base: Path) -> list[Path]:
    d = out / "mr-teacher"
    if not done(d):
        ptm("finetune", base, "--task", "mr", "--seeds", *seeds, "-o", d, *TEACHER, "--quiet", *resume_flag(d))
    return [d / f"pretrained-seed{s}" for s in seeds]


def distil(out: Path, name: str, teacher: Path, seed: int, *args: object) -> Path:
    d = out / name / f"t{seed}"
    if not done(d):
        ptm("distil", teacher, "-o", d, "--seeds", seed, "--quiet", *args, *resume_flag(d))
    return d / f"student-seed{seed}"


def finetune(out: Path, name: str, model: Path, seeds: list[int], *args: object) -> list[Path]:
    """One fine-tuning per seed in ``out/name``; seeds added later train beside the finished ones."""
    d = out / name
    runs = [d / f"pretrained-seed{s}" for s in seeds]
    if not all(done(r, "results.json") for r in runs):
        ptm("finetune", model, "--seeds", *seeds, "-o", d, "--quiet", *args, *resume_flag(d))
    return runs


def once(out: Path, name: str, *args: object) -> Path:
    """A ``ptm prune`` / ``ptm quantize`` output (not resumable: rerun when it did not finish)."""
    d = out / name
    if not done(d, "results.json"):
        ptm(*args, "-o", d, *(["--overwrite"] if d.exists() else []))
    return d


def scores(runs: list[Path], key: str = "accuracy") -> dict:
    """Test and dev ``key`` of each run (a fine-tuned, distilled or pruned model's ``results.json``),
    with the test mean and sample standard deviation over them."""
    test = [read(r / "results.json")["test"][key] for r in runs]
    dev = [read(r / "results.json")["dev"][key] for r in runs]
    return {"test": test, "dev": dev, "test_mean": float(np.mean(test)), "test_sd": float(np.std(test, ddof=1)) if len(test) > 1 else 0.0}


def small_data(out: Path, base: Path, seeds: list[int]) -> dict:
    """The small-data row: teacher, distilled student (small-set defaults), its labels-only twin and
    int8, on a fixed 500-sentence MR training subset; MR's test majority class beside them."""
    from ptmkit.data.tasks import load_task

    teachers = finetune(out, "small-teacher", base, seeds, *SMALL)
    students = [distil(out, "small-kd", t, s, "--layers", LAYERS, *STUDENT) for t, s in zip(teachers, seeds)]
    twins = [out / "small-kd" / f"t{s}" / f"labels-only-seed{s}" for s in seeds]
    q = [once(out, f"small-int8-t{s}", "quantize", t, "--int8", "--quiet") for t, s in zip(teachers, seeds)]
    int8 = [read(p / "results.json") for p in q]
    labels = load_task("mr").test.labels
    summary = read(out / "small-kd" / f"t{seeds[0]}" / "summary.json")
    return {"teacher": scores(teachers), "kd": scores(students), "labels": scores(twins),
            "int8_test": [x["test"]["int8"]["accuracy"] for x in int8],
            "fp32_test": [x["test"]["float32"]["accuracy"] for x in int8],
            "majority_test": float(np.bincount(labels).max() / len(labels)),
            "augment": summary.get("augment"), "verdict": summary.get("labels_only", {}).get("verdict")}


def english_slice(out: Path, megabytes: float = 6.0, name: str = "english-mix-slice.txt") -> Path:
    """``out/name``: the first ``megabytes`` of english-mix, cut at a document boundary."""
    from ptmkit.data.sources.base import fetch

    path = out / name
    if not path.is_file():
        src = fetch("english-mix") / "english-mix.txt"
        with open(src, encoding="utf-8") as f, open(path, "w", encoding="utf-8") as g:
            size = 0
            for line in f:
                g.write(line)
                size += len(line)
                if size > megabytes * 1e6 and not line.strip():
                    break
    return path


def speed(models: dict[str, Path], threads: int = 2, rounds: int = 5) -> dict:
    """Median seconds per MR test sentence at batch 1 (the first 200) and batch 32 (all 1,005),
    rounds interleaved over the models."""
    import torch

    from ptmkit.tasks.saved import load_task_model

    torch.set_num_threads(threads)
    loaded = {k: load_task_model(p) for k, p in models.items()}
    times: dict[str, dict[str, list[float]]] = {k: {"b1": [], "b32": []} for k in loaded}
    for _ in range(rounds):
        for name, tm in loaded.items():
            enc = tm.encoded("test")
            for label, bs, n in (("b1", 1, 200), ("b32", 32, len(enc))):
                from ptmkit.tasks.classification import collate

                pad = tm.tokenizer.pad_id
                order = np.arange(n)
                start = time.perf_counter()
                with torch.inference_mode():
                    for i in range(0, n, bs):
                        batch = collate(enc, order[i:i + bs], pad, None, tm.task.with_types)
                        tm.model.logits(batch)
                times[name][label].append((time.perf_counter() - start) / n)
    return {k: {b: float(np.median(v)) for b, v in t.items()} for k, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/compression")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--general-steps", type=int, default=600)
    ap.add_argument("--augment", type=int, default=4, help="synthetic sentences per MR sentence (augment stage)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stages = args.stages.split(",")
    seeds, s0 = args.seeds, args.seeds[0]
    base = minilm(out)
    res: dict = {"cpu": cpu_name(), "threads": 2, "seeds": seeds}
    path = out / "results.json"
    if path.is_file():
        res = {**read(path), **res}

    def save() -> None:
        path.write_text(json.dumps(res, indent=2) + "\n")

    if "small" in stages:  # needs none of the full-data teachers
        res["small"] = small_data(out, base, seeds)
        save()
        if set(stages) == {"small"}:
            print(json.dumps(res["small"]))
            return
    teachers = teacher_runs(out, seeds, base)
    res["teacher"] = scores(teachers)
    save()
    if "kd" in stages:
        res["kd"] = scores([distil(out, "mr-kd", t, s, "--layers", LAYERS, *STUDENT) for t, s in zip(teachers, seeds)])
        res["kd_params"] = {k: read(out / "mr-kd" / f"t{s0}" / "summary.json")[k]
                            for k in ("parameter_ratio", "non_embedding_parameters")}
        save()
    if "labels" in stages:
        res["labels"] = scores([distil(out, "mr-labels", t, s, "--layers", LAYERS, "--alpha", 1, *STUDENT)
                                for t, s in zip(teachers, seeds)])
        save()
    if "tinybert" in stages:
        res["tinybert"] = scores([distil(out, "mr-tinybert", t, s, "--layers", LAYERS, "--hidden", 1, "--attention", 1,
                                         *STUDENT) for t, s in zip(teachers, seeds)])
        save()
    if "bilstm" in stages:
        bilstm = ["--student", "bilstm", "epochs=4", "lr=1e-3"]
        res["bilstm"] = scores([distil(out, "mr-bilstm", t, s, *bilstm) for t, s in zip(teachers, seeds)])
        res["bilstm_labels"] = scores([distil(out, "mr-bilstm-labels", t, s, *bilstm, "--alpha", 1)
                                       for t, s in zip(teachers, seeds)])
        res["bilstm_params"] = read(out / "mr-bilstm" / f"t{s0}" / "summary.json")["parameter_ratio"]
        save()
    if "augment" in stages:
        # Tang et al. (2019, section 3.3): the transfer set grown by masking, POS-guided replacement and
        # n-gram sampling, the synthetic sentences labelled by the teacher
        bilstm = ["--student", "bilstm", "epochs=4", "lr=1e-3", "--augment", args.augment]
        res["bilstm_augment"] = scores([distil(out, f"mr-bilstm-augment{args.augment}", t, s, *bilstm)
                                        for t, s in zip(teachers, seeds)])
        save()
    if "theseus" in stages:
        res["theseus"] = scores([distil(out, "mr-theseus", t, s, "--theseus", "--layers", LAYERS, *STUDENT)
                                 for t, s in zip(teachers, seeds)])
        save()
    if "heads" in stages:
        heads = once(out, "prune-heads", "prune", teachers[0], "--curve", "--quiet")  # both orders, step by step
        res["heads"] = {"results": read(heads / "results.json"), "curve": read(heads / "curve.json")}
        save()
    if "magnitude" in stages:
        mag = once(out, "prune-magnitude", "prune", teachers[0], "--method", "magnitude", "--curve", "--quiet")
        res["magnitude"] = read(mag / "results.json")
        save()
    if "layerdrop" in stages:
        lds = finetune(out, "mr-layerdrop", base, seeds, "--task", "mr", *TEACHER, "layerdrop=0.2")
        cut = ["--method", "layers", "--keep-layers", LAYERS, "--quiet"]
        # seed 1's cuts keep their first directory names
        cut_ld = [once(out, "mr-layerdrop-cut" + (f"-{s}" if s != 1 else ""), "prune", ld, *cut)
                  for ld, s in zip(lds, seeds)]
        plain = [once(out, "mr-teacher-cut" + (f"-{s}" if s != 1 else ""), "prune", t, *cut)
                 for t, s in zip(teachers, seeds)]
        direct = finetune(out, "mr-minilm3", minilm_3(out, base), seeds, "--task", "mr", *TEACHER)
        res["layerdrop"] = {"full": scores(lds), "cut": scores(cut_ld), "plain_cut": scores(plain),
                            "direct": scores(direct)}
        save()
    if "int8" in stages:
        q = [once(out, f"int8-t{s}", "quantize", t, "--int8", "--quiet") for t, s in zip(teachers, seeds)]
        res["int8"] = [read(p / "results.json") for p in q]
        kd0 = out / "mr-kd" / f"t{s0}" / f"student-seed{s0}"
        if kd0.is_dir():
            res["int8_student"] = read(once(out, "int8-kd", "quantize", kd0, "--int8", "--quiet") / "results.json")
        save()
    if "general" in stages:
        g = out / "general"
        if not _finished(g):
            ptm("distil", base, "--general", "--data", english_slice(out), "-o", g, "--layers", LAYERS, "--hidden", 1,
                "--attention", 1, "--mlm", 0, "--cosine", 1, f"train.max_steps={args.general_steps}", "train.seq_len=64",
                "train.batch_size=32", "train.precision=bf16", "train.num_threads=2", *resume_flag(g))
        res["general"] = {
            "mr": scores(finetune(out, "mr-general", g, seeds, "--task", "mr", *TEACHER)),
            "pos": scores(finetune(out, "pos-general", g, seeds, *POS)),
            "pos_teacher": scores(finetune(out, "pos-minilm", base, seeds, *POS)),
            "pos_direct": scores(finetune(out, "pos-minilm3", minilm_3(out, base), seeds, *POS)),
        }
        save()
    if "pos" in stages:
        # task-specific distillation of the brown-pos teachers: the student sees the teacher's own
        # 4,000 training sentences (the subset recorded in its task_model.json)
        pos_teachers = finetune(out, "pos-minilm", base, seeds, *POS)
        res["pos"] = {"teacher": scores(pos_teachers),
                      "kd": scores([distil(out, "pos-kd", t, s, "--layers", LAYERS, *STUDENT)
                                    for t, s in zip(pos_teachers, seeds)]),
                      "labels": scores([distil(out, "pos-labels", t, s, "--layers", LAYERS, "--alpha", 1, *STUDENT)
                                        for t, s in zip(pos_teachers, seeds)])}
        save()
    if "speed" in stages:
        models = {"teacher": teachers[0], "student": out / "mr-kd" / f"t{s0}" / f"student-seed{s0}",
                  "bilstm": out / "mr-bilstm" / f"t{s0}" / f"student-seed{s0}", "teacher_int8": out / f"int8-t{s0}",
                  "student_int8": out / "int8-kd"}
        res["speed"] = speed({k: v for k, v in models.items() if (v / "task_model.json").is_file()})
        save()
    print(table(res))
    print(json.dumps(res))


def _mean_sd(x: dict | None) -> str:
    if not x:
        return "—"
    n = len(x["test"])
    return f"{x['test_mean']:.4f} ± {x['test_sd']:.4f}" if n > 1 else f"{x['test_mean']:.4f} (1 seed)"


def table(res: dict) -> str:
    """The Markdown table of the headline rows: test accuracy (mean ± sd over seeds) and retention."""
    t = res["teacher"]["test_mean"]
    rows = [("MiniLM teacher (6 layers)", res.get("teacher")), ("3-layer student, distilled", res.get("kd")),
            ("3-layer student, gold labels only", res.get("labels")),
            ("3-layer student, + TinyBERT hidden/attention losses", res.get("tinybert")),
            ("3-layer student, BERT-of-Theseus", res.get("theseus")),
            ("BiLSTM student, distilled", res.get("bilstm")), ("BiLSTM, gold labels only", res.get("bilstm_labels")),
            ("BiLSTM student, distilled on the augmented transfer set", res.get("bilstm_augment"))]
    pos = res.get("pos") or {}
    lines = ["| model | MR test accuracy | retention |", "|---|---|---|"]
    for name, x in rows:
        if x:
            lines.append(f"| {name} | {_mean_sd(x)} | {x['test_mean'] / t:.1%} |")
    for name, x in (("brown-pos: MiniLM teacher", pos.get("teacher")), ("brown-pos: 3-layer student, distilled", pos.get("kd")),
                    ("brown-pos: 3-layer student, gold labels only", pos.get("labels"))):
        if x:
            lines.append(f"| {name} | {_mean_sd(x)} | {x['test_mean'] / pos['teacher']['test_mean']:.1%} |")
    for q in res.get("int8", []):
        lines.append(f"| int8 teacher ({q['source'].rsplit('-', 1)[-1]}) | {q['test']['int8']['accuracy']:.4f} "
                     f"(fp32 {q['test']['float32']['accuracy']:.4f}) | |")
    return "\n".join(lines)


def _finished(run: Path) -> bool:
    """Whether a pre-training run reached its last step (its final checkpoint records it)."""
    from ptmkit.train import checkpoint as ckpt

    latest = ckpt.latest_checkpoint(run) if run.is_dir() else None
    if latest is None:
        return False
    cfg = ckpt.read_config(latest)
    return latest.name == ckpt.step_name(int(cfg["train"]["max_steps"]))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
