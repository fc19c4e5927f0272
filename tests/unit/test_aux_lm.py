"""GPT's auxiliary LM loss in fine-tuning (Radford et al. 2018): L = L_task + λ L_LM over the input text."""

from __future__ import annotations

from dataclasses import asdict
from types import SimpleNamespace

import pytest
import torch

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.tasks.classification import SequenceClassifier
from ptmkit.tasks.finetune import FinetuneConfig, build_classifier

V = 50
GPT = TransformerConfig(
    vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position=32, type_vocab_size=0,
    norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5, embedding_norm=False, pooler=False,
)


def batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, V, (3, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 1])}


def test_loss_is_task_loss_plus_weighted_lm_loss() -> None:
    torch.manual_seed(0)
    clf = SequenceClassifier(TransformerEncoder(GPT), 2, causal=True, aux_lm_weight=0.5).double().eval()
    b = batch()
    out = clf(b)
    # the reference, term by term in float64: the classifier's cross-entropy and the mean next-token
    # negative log-likelihood of the real tokens from a causal pass
    task = torch.nn.functional.cross_entropy(clf.logits(b), b["labels"])
    h = clf.backbone(b["input_ids"], attention_mask=b["attention_mask"], causal=True).last_hidden_state
    logp = (h @ clf.backbone.output_embeddings().T).log_softmax(-1)
    nll = [-logp[i, t, b["input_ids"][i, t + 1]] for i in range(3) for t in range(8) if b["attention_mask"][i, t + 1]]
    lm = torch.stack(nll).mean()
    assert len(nll) == 8 + 4 + 1
    # the loss is exactly the weighted sum of the two terms it reports ...
    assert torch.equal(out.loss.detach(), out.metrics["task_loss"] + 0.5 * out.metrics["lm_loss"])
    # ... and each term is the reference (both cross-entropies are computed in float32)
    torch.testing.assert_close(out.metrics["task_loss"].double(), task, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.metrics["lm_loss"].double(), lm, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.loss.double(), task + 0.5 * lm, rtol=1e-6, atol=1e-6)
    clf.aux_lm_weight = 0.0
    plain = clf(b)
    torch.testing.assert_close(plain.loss.double(), task, rtol=1e-6, atol=1e-6)
    assert "lm_loss" not in plain.metrics


def test_lm_loss_trains_the_tied_embeddings() -> None:
    torch.manual_seed(0)
    clf = SequenceClassifier(TransformerEncoder(GPT), 2, causal=True, aux_lm_weight=1.0)
    b = batch()
    clf(b).loss.backward()
    emb = clf.backbone.output_embeddings().grad
    unused = sorted(set(range(V)) - set(b["input_ids"][b["attention_mask"].bool()].tolist()))
    assert emb[unused].abs().sum() > 0  # only the LM's softmax reaches tokens absent from the input


def _pretrained(objective: str) -> SimpleNamespace:
    return SimpleNamespace(config={"model": asdict(GPT), "objective": {"name": objective}},
                           backbone=TransformerEncoder(GPT), causal=objective == "clm", tokenizer=None)


def test_only_causal_lm_models_take_the_auxiliary_loss() -> None:
    cfg = FinetuneConfig(aux_lm_weight=0.5)
    assert build_classifier(_pretrained("clm"), 2, cfg, "pretrained", 0).aux_lm_weight == 0.5
    with pytest.raises(PtmError, match=r"aux_lm_weight=0.5 .*causal LM.*'mlm'.*aux_lm_weight=0"):
        build_classifier(_pretrained("mlm"), 2, cfg, "pretrained", 0)
    with pytest.raises(PtmError, match="causal encoder"):
        SequenceClassifier(TransformerEncoder(GPT), 2, causal=False, aux_lm_weight=0.5)
    with pytest.raises(PtmError, match="aux_lm_weight must be"):
        FinetuneConfig(aux_lm_weight=-1.0)
    with pytest.raises(PtmError, match="mode=finetune"):
        FinetuneConfig(aux_lm_weight=0.5, mode="features")


def test_siatl_schedule_decays_the_lm_weight_per_epoch(tmp_path) -> None:
    """aux_lm_decay: epoch e logs lm weight λ·decay^(e-1); the task+LM loss each step uses it."""
    import numpy as np

    from ptmkit.build import build_model
    from ptmkit.data.tasks import TaskData, TaskSplit
    from ptmkit.encoders import TransformerConfig
    from ptmkit.pretrained import load_pretrained, save_pretrained
    from ptmkit.tasks.callbacks import AuxWeightDecay
    from ptmkit.tasks.finetune import FinetuneConfig, finetune
    from ptmkit.tokenization import Tokenizer
    from ptmkit.train.trainer import TrainerCallback

    texts = [("good " if i % 2 else "bad ") + "film plot" for i in range(32)]
    split = TaskSplit(texts, np.array([i % 2 for i in range(32)]))
    task = TaskData("toy", [0, 1], split, split, split)
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="bpe", vocab_size=60, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position=16, norm="pre", type_vocab_size=0, pooler=False, embedding_norm=False)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "clm"}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    seen: list[float] = []

    class Watch(TrainerCallback):
        def on_step_end(self, trainer, step):
            seen.append(trainer.model.aux_lm_weight)

    ft = FinetuneConfig(epochs=3, batch_size=16, max_seq_len=8, aux_lm_weight=0.5, aux_lm_decay=0.5)
    finetune(load_pretrained(ck, heads=False), task, None, ft, seed=0, progress=False, callbacks=(Watch(),))
    # 2 steps per epoch: steps 1, 3 and 5 open epochs 1, 2 and 3
    assert seen[:1] == [0.5] and seen[2:3] == [0.25] and seen[4:5] == [0.125]
    cb = AuxWeightDecay(0.5, 0.5, steps_per_epoch=2)
    model = SimpleNamespace(aux_lm_weight=0.0)
    cb.apply(model, 3)
    assert model.aux_lm_weight == 0.125
