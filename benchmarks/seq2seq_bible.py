"""Text-to-text fine-tuning on ``bible-modernise`` (KJV verse -> WEB verse, test books unseen) or
``bible-translate-en-es`` (``--task``: KJV verse -> Reina-Valera 1909 verse): what pre-training an
encoder–decoder buys, and what beam search adds over greedy decoding.

For each model (``bart-tiny``, ``t5-tiny``):

* ``pretrained``: the preset pre-trained with its own objective (BART: text infilling + sentence
  permutation; T5: span corruption) for ``--pretrain-steps`` steps on the *training books'* verses,
  both sides of the task's training pairs (one verse a line, a chapter a document; for
  translation a joint denoising pre-training over both languages, as mBART's, without language
  tags); no dev or test book is read;
* ``random``: the same architecture and tokenizer from a random initialisation;

each fine-tuned on ``--train-size`` training pairs (a fixed subset) for ``--epochs`` epochs at the
same settings and seeds (equal fine-tuning budget), the epoch chosen by dev loss on the first
``--eval-size`` dev pairs, then the first ``--eval-size`` test pairs decoded greedily and with 4
beams (length penalty 1, early stopping) from the same selected weights.  The copy baseline
(output = source) is scored on the same test pairs.  Finished pre-training runs in ``--out`` are
reused (delete them to re-measure).

    python benchmarks/seq2seq_bible.py [--task bible-modernise] [--out runs/bible-modernise] [--models bart-tiny t5-tiny]
        [--pretrain-steps 2000] [--train-size 4000] [--epochs 8] [--eval-size 500] [--seeds 1 2 3] [--quick]

Prints a Markdown table and, as the last line, one JSON object; writes ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from ptmkit.data.sources.base import fetch
from ptmkit.data.sources.bible_books import BOOKS
from ptmkit.data.tasks import builtin_tasks, load_task
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, _backbone, finetune
from ptmkit.tasks.seq2seq import Seq2Seq, text_scores
from ptmkit.workflows.pretrain import pretrain


def pretraining_text(out: Path, task: str) -> Path:
    """Both sides of the task's training pairs, one verse a line, a blank line between chapters."""
    data = load_task(task)
    path = out / "pretrain-text.txt"
    if path.is_file():
        return path
    refs = [row.get("verse") or row.get("ref") for row in _train_rows(task)]
    order = sorted(range(len(refs)), key=lambda i: _canonical(refs[i]))  # chapters whole, in canonical order
    lines, chapter = [], None
    for ref, source in ((refs[i], data.train.sources[i]) for i in order):
        here = ref.rsplit(".", 1)[0]
        if chapter is not None and here != chapter:
            lines.append("")
        chapter = here
        lines.append(source)
    lines.append("")
    lines.extend(data.train.targets[i] for i in order)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _canonical(ref: str) -> tuple[int, int, int]:
    book, chapter, verse = ref.split(".")
    return BOOKS.index(book), int(chapter), int(verse)


def _train_rows(task: str) -> list[dict]:
    source, spec = builtin_tasks()[task]
    return [json.loads(line) for line in (fetch(source) / spec["files"][0]).read_text(encoding="utf-8").splitlines()]


def decode_test(run: Path, pre, data, cfg: FinetuneConfig, init: str, seed: int, num_beams: int) -> dict[str, float]:
    """Test scores of the fine-tuned run's selected weights, decoded with ``num_beams`` beams."""
    task_cfg = replace(cfg, task={**cfg.task, "num_beams": num_beams})
    task = Seq2Seq(data, task_cfg, pre.tokenizer, False, False)
    model = task.build(_backbone(pre, init, seed))
    model.load_state_dict(load_file(str(run / "best.safetensors")))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return task.score("test", task.predict(model.to(device), task.encode("test"), device))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="bible-modernise", choices=["bible-modernise", "bible-translate-en-es"])
    ap.add_argument("--out", default=None, help="default runs/TASK")
    ap.add_argument("--models", nargs="+", default=["bart-tiny", "t5-tiny"])
    ap.add_argument("--pretrain-steps", type=int, default=2000)
    ap.add_argument("--train-size", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--eval-size", type=int, default=500)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--inits", nargs="+", default=["pretrained", "random"], choices=["pretrained", "random"],
                    help="which starts to fine-tune (random needs only the pre-training run's tokenizer and config)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-len", type=int, default=96, help="source and target tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="seconds: tiny budgets, one seed (checks the script)")
    args = ap.parse_args()
    if args.quick:
        args.pretrain_steps, args.train_size, args.epochs, args.eval_size, args.seeds = 20, 64, 1, 16, [1]
        args.out = (args.out or f"runs/{args.task}") + "-quick"
    torch.set_num_threads(args.threads)
    out = Path(args.out or f"runs/{args.task}")
    started = time.time()
    text = pretraining_text(out, args.task)
    full = load_task(args.task)
    first = lambda split, n: split.subset(np.arange(min(n, len(split))))  # noqa: E731
    data = replace(full.with_train_size(args.train_size, seed=0), dev=first(full.dev, args.eval_size),
                   test=first(full.test, args.eval_size))
    copy = text_scores(data.test.sources, data.test.targets)
    cfg = FinetuneConfig(epochs=args.epochs, lr=args.lr, batch_size=32, eval_batch_size=64, max_seq_len=args.max_len,
                         warmup=0.1, select="loss", num_threads=args.threads, task={"max_target_len": args.max_len})
    rows = []
    for preset in args.models:
        run = out / f"pretrain-{preset}"
        if not (run / "checkpoints" / "latest").is_file():
            pretrain(preset, [text], run, [f"train.max_steps={args.pretrain_steps}", "train.seq_len=128",
                                           f"train.save_every={args.pretrain_steps}", f"train.num_threads={args.threads}",
                                           f"train.eval_every={args.pretrain_steps}"], overwrite=run.exists())
        pre = load_pretrained(run, heads=False)
        for init in args.inits:
            for seed in args.seeds:
                ft = out / "finetune" / preset / f"{init}-seed{seed}"
                t0 = time.time()
                result = finetune(pre, data, ft, cfg, init=init, seed=seed, progress=False, overwrite=ft.exists())
                seconds = time.time() - t0
                for beams in (1, 4):
                    scores = decode_test(ft, pre, data, cfg, init, seed, beams)
                    rows.append({"model": preset, "init": init, "seed": seed, "decoding": "greedy" if beams == 1 else "beam 4",
                                 "bleu": scores["bleu"], "chrf": scores["chrf"], "rouge_l": scores["rouge_l"],
                                 "dev_loss": result["dev"]["loss"], "best_epoch": result["best_epoch"],
                                 "finetune_seconds": round(seconds, 1)})
                    print(json.dumps(rows[-1]), flush=True)

    def cell(values: list[float]) -> str:
        return f"{np.mean(values):.2f} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:.2f}"

    table = ["| model | start | decoding | BLEU | chrF | ROUGE-L |", "|---|---|---|---|---|---|",
             f"| copy baseline (output = source) | | | {copy['bleu']:.2f} | {copy['chrf']:.2f} | {copy['rouge_l']:.2f} |"]
    summary = {}
    for preset in args.models:
        for init in [i for i in ("random", "pretrained") if i in args.inits]:
            for decoding in ("greedy", "beam 4"):
                sel = [r for r in rows if r["model"] == preset and r["init"] == init and r["decoding"] == decoding]
                summary[f"{preset}/{init}/{decoding}"] = {k: float(np.mean([r[k] for r in sel])) for k in ("bleu", "chrf", "rouge_l")}
                table.append(f"| {preset} | {init} | {decoding} | {cell([r['bleu'] for r in sel])} | "
                             f"{cell([r['chrf'] for r in sel])} | {cell([r['rouge_l'] for r in sel])} |")
    print("\n".join(table))
    result = {"copy": copy, "summary": summary, "runs": rows, "settings": vars(args), "seconds": round(time.time() - started)}
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"copy_bleu": copy["bleu"], **{k: round(v["bleu"], 2) for k, v in summary.items()}}))


if __name__ == "__main__":
    main()
