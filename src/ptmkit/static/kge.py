"""TransE and DistMult as static models: ``ptm pretrain transe --data TRAIN [VALID] TEST -o OUT``.

Knowledge-graph embeddings are first-generation vectors of entities instead of words, so they
take the static models' road (:mod:`ptmkit.static.run`: config keys as overrides, a staged
output, a run card).  DATA is one to three triple files (``head<TAB>relation<TAB>tail``, see
:mod:`ptmkit.knowledge.triples`): the training triples, then optionally the validation triples
(the epoch of best filtered MRR is kept) and the test triples (one file after the training one is
the test part).  The models and their training are :mod:`ptmkit.knowledge.kge`.

OUT receives ``vectors.bin`` (the entity embeddings in word2vec binary, one row per entity name,
so ``ptm vectors`` and gensim read them), ``relations.bin`` (the relation embeddings, same
format), ``vocab.txt`` (each entity with its number of training triples), ``results.json`` (the
filtered MRR, Hits@1/3/10 and mean rank on valid and test, head and tail prediction, and the
per-epoch history) and ``config.json`` (the config, with those figures under ``stats``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.interop import word2vec_format as w2vf
from ptmkit.knowledge.kge import KGEConfig, embeddings, train_kge
from ptmkit.knowledge.triples import read_split
from ptmkit.registry import register
from ptmkit.static.configs import as_config
from ptmkit.static.output import check_out_dir, save_run
from ptmkit.static.vectors import WordVectors


@dataclass(frozen=True)
class TransEConfig:
    """Bordes et al. (2013)'s WN18 setting (k = 20, λ = 0.01, γ = 2, L1, at most 1,000 epochs)."""

    dim: int = 20
    epochs: int = 1000
    lr: float = 0.01
    margin: float = 2.0
    norm: int = 1
    batch_size: int = 1024
    eval_every: int = 50
    eval_batch_size: int = 256
    seed: int = 0


@dataclass(frozen=True)
class DistMultConfig:
    """Logistic loss on ``negatives`` corrupted triples each, Adam; the defaults are the ones chosen
    on the WN18RR-style split's valid part (docs/knowledge.md)."""

    dim: int = 100
    epochs: int = 20
    lr: float = 0.003
    negatives: int = 10
    l2: float = 0.003
    batch_size: int = 1024
    eval_every: int = 2
    eval_batch_size: int = 256
    seed: int = 0


def _flat(results: dict) -> dict:
    """``{"test_mrr": ..., "test_hits@10": ...}``: the headline figures for config.json's stats."""
    out = {f"{part}_{k}": round(v, 4) for part in ("valid", "test") for k, v in (results.get(part) or {}).items()
           if k in ("mrr", "hits@1", "hits@3", "hits@10", "mean_rank")}
    best = {"best_epoch": results["best_epoch"]} if results.get("best_epoch") is not None else {}
    return {**out, "seconds": results["seconds"], **best}


def train_kge_files(model: str, data: list[str], cfg, out=None, progress: bool = True):
    """Train ``model`` (``transe`` | ``distmult``) on triple files and, with ``out``, write the run."""
    if not 1 <= len(data) <= 3:
        raise PtmError(f"{model} reads 1 to 3 triple files (train [valid] test), got {len(data)}")
    out_dir = check_out_dir(out)
    paths = [Path(p) for p in data]
    split = read_split(paths[0], paths[1] if len(paths) == 3 else None, paths[-1] if len(paths) > 1 else None)
    spaced = next((n for n in [*split.entities, *split.relations] if any(c.isspace() for c in n)), None)
    if spaced is not None:  # before training: a vectors file names its rows by whitespace-free words
        raise PtmError(f"{paths[0]}: the name {spaced!r} holds whitespace, which a vectors file cannot store; "
                       f"write it with underscores ({'_'.join(spaced.split())!r}) in the triple files")
    unseen = split.unseen_entities("test")
    if len(unseen):
        raise PtmError(f"{paths[-1]}: {len(unseen)} test entities (the first: {split.entities[int(unseen[0])]!r}) are "
                       f"in no training triple of {paths[0]}, so they have no trained embedding; move their triples to training")
    kge, results = train_kge(split, KGEConfig(model=model, **asdict(cfg)), progress=progress)
    entity, relation = embeddings(kge)
    counts = np.bincount(split.train[:, [0, 2]].ravel(), minlength=len(split.entities))
    wv = WordVectors(split.entities, entity, counts=counts)
    if out_dir is not None:
        save_run(out_dir, wv, {"model": model, **asdict(cfg)}, _flat(results))
        w2vf.write_word2vec(out_dir / "relations.bin", split.relations, relation, binary=True)
        atomic_write_text(out_dir / "results.json", json.dumps(results, indent=2) + "\n")
    return wv


@register("static", "transe")
class TransEModel:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress) -> WordVectors``."""

    config_class = TransEConfig

    @staticmethod
    def train(data: list[str], cfg: TransEConfig | dict | None = None, out=None, progress: bool = True) -> WordVectors:
        return train_kge_files("transe", data, as_config(TransEConfig, cfg), out, progress)


@register("static", "distmult")
class DistMultModel:
    """Registry entry: ``config_class`` + ``train(data, cfg, out, progress) -> WordVectors``."""

    config_class = DistMultConfig

    @staticmethod
    def train(data: list[str], cfg: DistMultConfig | dict | None = None, out=None, progress: bool = True) -> WordVectors:
        return train_kge_files("distmult", data, as_config(DistMultConfig, cfg), out, progress)
