"""ptmkit: pre-train, transfer, compress and analyse the whole family of pre-trained language models.

The main entry points are importable from the top level (loaded lazily, so ``import ptmkit``
stays fast)::

    import ptmkit
    run = ptmkit.pretrain("bert-tiny", data="corpus.txt", out_dir="runs/bert", overrides=["train.max_steps=500"])
    model = ptmkit.load_pretrained(run)              # Pretrained(config, tokenizer, backbone, objective)
    ptmkit.generate("runs/gpt", "the cat", max_new_tokens=20, top_p=0.9)  # a run trained with clm or bart
    vectors = ptmkit.train_word2vec("corpus.txt", {"model": "skipgram", "loss": "ns"})
    vectors.most_similar("king")
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "pretrain": "ptmkit.workflows.pretrain",
    "load_pretrained": "ptmkit.pretrained",
    "save_pretrained": "ptmkit.pretrained",
    "Pretrained": "ptmkit.pretrained",
    "build_model": "ptmkit.build",
    "Trainer": "ptmkit.train.trainer",
    "TrainConfig": "ptmkit.train.config",
    "Tokenizer": "ptmkit.tokenization",
    "Corpus": "ptmkit.data.corpus",
    "prepare": "ptmkit.data.prepare",
    "fetch": "ptmkit.data.sources.base",
    "Encoder": "ptmkit.encoders",
    "TransformerEncoder": "ptmkit.encoders",
    "TransformerConfig": "ptmkit.encoders",
    "load_preset": "ptmkit.presets",
    "finetune": "ptmkit.tasks.finetune",
    "generate": "ptmkit.workflows.generate",
    "predict": "ptmkit.workflows.predict",
    "encode": "ptmkit.workflows.encode",
    "GenerationConfig": "ptmkit.generation",
    "FinetuneConfig": "ptmkit.tasks.finetune",
    "load_task": "ptmkit.data.tasks",
    "load_files": "ptmkit.data.tasks",
    "load_tasks": "ptmkit.tasks.multitask",
    "MultiTaskData": "ptmkit.tasks.multitask",
    "export_hf": "ptmkit.interop",
    "import_hf": "ptmkit.interop",
    "load_hf": "ptmkit.interop",
    "WordVectors": "ptmkit.static.vectors",
    "train_word2vec": "ptmkit.static.word2vec",
    "train_fasttext": "ptmkit.static.fasttext",
    "train_glove": "ptmkit.static.glove",
    "train_svd_ppmi": "ptmkit.static.svd_ppmi",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ptmkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
