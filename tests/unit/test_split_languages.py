"""Fine-tuning a model pre-trained with language embeddings: each split's inputs carry its language."""

from __future__ import annotations

from dataclasses import replace

import torch
from conftest import SENTIMENT_WORDS, toy_sentiment

from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides
from ptmkit.presets import load_preset
from ptmkit.pretrained import save_pretrained
from ptmkit.tasks import split_languages
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tokenization import Tokenizer


def _checkpoint(root, language_embeddings: bool = True):
    (root / "en.txt").write_text(" ".join(SENTIMENT_WORDS + ["good", "bad"]) + "\n", encoding="utf-8")
    (root / "es.txt").write_text("bueno malo casa perro\n", encoding="utf-8")
    tok = Tokenizer.train([root / "en.txt", root / "es.txt"], "wordpiece", 120, min_frequency=1,
                          languages=["en", "es"])
    raw = apply_overrides(load_preset("xlm-tiny"), ["model.hidden_size=32", "model.num_heads=2",
                                                     "model.intermediate_size=64", "model.max_position=64", "train.seq_len=32",
                                                     f"objective.language_embeddings={str(language_embeddings).lower()}"])
    config = resolve_config(raw, tok)
    torch.manual_seed(0)
    return save_pretrained(root / "ck", config, build_model(config, tok), tok)


def test_each_split_is_fed_its_language(tmp_path, monkeypatch):
    seen: list[tuple[str, int]] = []
    hook = split_languages.SplitLanguages._hook

    def spy(self, module, args, kwargs):
        args, kwargs = hook(self, module, args, kwargs)
        seen.append((self.current, int(kwargs["token_type_ids"].unique().item())))
        return args, kwargs

    monkeypatch.setattr(split_languages.SplitLanguages, "_hook", spy)
    data = toy_sentiment((32, 16, 16))
    data = replace(data, meta={**data.meta, "languages": {"train": "en", "dev": "en", "test": "es"}})
    finetune(_checkpoint(tmp_path), data, None, FinetuneConfig(epochs=1, batch_size=16, max_seq_len=32), progress=False)
    assert ("train", 0) in seen and ("dev", 0) in seen and ("test", 1) in seen
    assert set(seen) == {("train", 0), ("dev", 0), ("test", 1)}


def test_models_and_tasks_without_languages_are_left_alone(tmp_path):
    backbone = torch.nn.Linear(2, 2)
    languages = {"languages": {"train": "en", "dev": "en", "test": "es"}}
    no_embeddings = {"objective": {"name": "xlm", "language_embeddings": False}}
    with_embeddings = {"objective": {"name": "xlm", "language_embeddings": True}}
    tok = type("T", (), {"languages": ("en", "es")})()
    task = type("D", (), {"meta": languages})()
    plain_task = type("D", (), {"meta": {}})()
    assert split_languages.SplitLanguages.attach(backbone, no_embeddings, tok, task) is None
    assert split_languages.SplitLanguages.attach(backbone, with_embeddings, tok, plain_task) is None
    hook = split_languages.SplitLanguages.attach(backbone, with_embeddings, tok, task)
    assert hook is not None and hook.index == {"train": 0, "dev": 0, "test": 1}
    hook.remove()
