"""The English transfer suite: first- and second-generation models on the same tasks and protocol.

Pre-trains, on one clean general-domain corpus, the models the suite compares, then runs
``ptm evaluate --suite en`` on all of them (and optionally the learning curve):

* ``word2vec``: Skip-gram with negative sampling (``word2vec-sg-ns``), its vectors as features;
* ``elmo``: the ``elmo-tiny`` biLM (character CNN + 2 LSTM layers each way);
* ``bert-tiny``: the demo's BERT-tiny recipe (Skip-gram-initialised embeddings, then MLM);
* ``minilm``: the real all-MiniLM-L6-v2 weights (``ptm data get minilm``, imported), a reference
  row of a model pre-trained at scale.

The from-scratch baseline (BERT-tiny's architecture, random init) comes from ``ptm evaluate``.

The pre-training corpus is english-mix **without** the sources the suite's test sets come from
(Brown: brown-pos; the KJV and WEB Bibles: bible-paraphrase; WordNet: wordnet-wsd, wordnet-qa;
GCIDE, which includes WordNet 1.5 glosses), plus MR's unlabelled *training* sentences: PTB train,
three Bible commentaries, FOLDOC, the Jargon File and fortunes (~4.9M words).  english-mix
writes its sources in a fixed order with a blank line after each document, so a source is a run
of documents whose count ``stats.json`` records.

Every model has a step budget (not a time budget), so the numbers do not depend on the machine's
load; pre-training runs already in ``--out`` are reused.

    python benchmarks/transfer_suite.py --out runs/transfer-suite [--bert-steps 1500]
        [--elmo-steps 2000] [--train-size 500] [--eval-size 400] [--epochs 4] [--seeds 1 2 3]
        [--lrs 3e-4] [--features-lrs 1e-3] [--quick]

The protocol's defaults are sized to a 2-core CPU (about 20 fine-tuning runs per model and
task); an interrupted run continues where it stopped when started again with the same ``--out``.
Writes ``OUT/eval/table.md``, ``table.png``, ``results.json``; prints the table and, as the
last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

GENERAL = ("ptb", "commentaries", "foldoc", "jargon", "fortunes")


def english_mix_sources(path: Path, stats: dict, keep: tuple[str, ...]) -> list[str]:
    """The lines of english-mix that come from the sources in ``keep`` (documents kept whole)."""
    counts = [(name, s["documents"]) for name, s in stats["sources"].items()]
    docs = path.read_text(encoding="utf-8").split("\n\n")
    out, i = [], 0
    for name, n in counts:
        if name in keep:
            out.extend(d.strip("\n") + "\n" for d in docs[i:i + n])
        i += n
    if i != len([d for d in docs if d.strip()]):
        raise SystemExit(f"english-mix has {len(docs)} documents, stats.json counts {i}: rebuild it (ptm data get english-mix --force)")
    return out


def build_corpus(out: Path, quick: bool) -> tuple[Path, dict]:
    from ptmkit.data.sources.base import fetch
    from ptmkit.data.sources.english_mix import normalise

    path = out / "corpus.txt"
    mix_dir = Path(fetch("english-mix"))
    stats = json.loads((mix_dir / "stats.json").read_text())
    if not path.exists():
        docs = english_mix_sources(mix_dir / "english-mix.txt", stats, GENERAL)
        mr = [normalise(line) for line in (Path(fetch("mr")) / "unlabeled_train.txt").read_text().splitlines()]
        text = "\n".join(docs) + "\n" + "\n".join(line for line in mr if line) + "\n"
        if quick:
            text = "\n".join(text.splitlines()[:20000]) + "\n"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    words = sum(line.count(" ") + 1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return path, {"sources": list(GENERAL) + ["mr unlabelled train"], "words": words}


def finished(run: Path) -> bool:
    """A pre-training run that wrote its final checkpoint (checkpoints are written only at the end)."""
    return any((run / "checkpoints").glob("step-*"))


def pretrain_models(out: Path, corpus: Path, args: argparse.Namespace) -> dict[str, Path]:
    import ptmkit
    from ptmkit.workflows.demo import DemoConfig, quick_config

    models: dict[str, Path] = {}
    # word2vec: vectors as features (first generation)
    w2v = out / "word2vec"
    if not (w2v / "vectors.bin").exists():
        ptmkit.pretrain("word2vec-sg-ns", data=corpus, out_dir=w2v, overwrite=True,
                        overrides=["epochs=1"] if args.quick else [])
    models["word2vec"] = w2v / "vectors.bin"

    # ELMo's biLM
    elmo = out / "elmo"
    if not finished(elmo):
        over = [f"train.max_steps={30 if args.quick else args.elmo_steps}", "train.save_every=0", "train.eval_every=500",
                "train.eval_fraction=0.01", "train.eval_batches=20"]
        if args.quick:
            over += ["model.hidden_size=64", "model.projection_size=32", "train.eval_every=10"]
        ptmkit.pretrain("elmo-tiny", data=corpus, out_dir=elmo, overrides=over, overwrite=True)
    models["elmo"] = elmo

    # BERT-tiny: the demo's recipe, with this corpus and step budget
    bert = out / "bert-tiny"
    if not finished(bert):
        base = quick_config() if args.quick else DemoConfig()
        over = [o for o in base.pretrain_overrides if not o.startswith("train.max_steps=")]
        over.append(f"train.max_steps={30 if args.quick else args.bert_steps}")
        ptmkit.pretrain(base.preset, data=corpus, out_dir=bert, overrides=over, overwrite=True)
    models["bert-tiny"] = bert

    # MiniLM: real weights pre-trained at scale (reference row)
    if not args.quick:
        from ptmkit.data.sources.base import fetch

        minilm = out / "minilm"
        if not (minilm / "config.json").exists() and not any(minilm.glob("*")):
            ptmkit.import_hf(fetch("minilm"), minilm)
        models["minilm"] = minilm
    return models


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/transfer-suite"))
    p.add_argument("--bert-steps", type=int, default=1500)
    p.add_argument("--elmo-steps", type=int, default=2000)
    p.add_argument("--train-size", type=int, default=500)
    p.add_argument("--eval-size", type=int, default=400)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--lrs", type=float, nargs="+", default=[3e-4], help="fine-tuning LR grid (chosen on dev)")
    p.add_argument("--features-lrs", type=float, nargs="+", default=[1e-3], help="features-mode LR grid")
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--models", nargs="+", default=None, help="evaluate only these (default: all)")
    p.add_argument("--quick", action="store_true", help="tiny settings that check the pipeline in minutes")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    from ptmkit.workflows.evaluate import Protocol, evaluate

    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    corpus, corpus_info = build_corpus(args.out, args.quick)
    models = pretrain_models(args.out, corpus, args)
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models}
    # bert-tiny first: its architecture is the from-scratch baseline's
    order = ["bert-tiny", "elmo", "word2vec", "minilm"]
    models = {k: models[k] for k in order if k in models}
    t_pre = time.perf_counter() - t0
    protocol = Protocol(train_size=100 if args.quick else args.train_size, eval_size=100 if args.quick else args.eval_size,
                        seeds=tuple(args.seeds[:1] if args.quick else args.seeds), lrs=tuple(args.lrs),
                        features_lrs=tuple(args.features_lrs),
                        epochs=1 if args.quick else args.epochs, max_seq_len=args.max_seq_len)
    result = evaluate({k: str(v) for k, v in models.items()}, "en", args.out / "eval", protocol, progress=False,
                      resume=True)
    print((args.out / "eval" / "table.md").read_text())
    print(json.dumps({"corpus": corpus_info, "pretrain_seconds": round(t_pre, 1),
                      "evaluate_seconds": round(time.perf_counter() - t0 - t_pre, 1), "protocol": protocol.__dict__,
                      "table": result["table"]}, default=list))


if __name__ == "__main__":
    main(sys.argv[1:])
