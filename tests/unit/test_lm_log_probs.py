"""The left-to-right scoring contract ``lm_log_probs(backbone, input_ids [B, T]) -> [B, T - 1]`` of
the ``clm`` (GPT-2) and ``bilm`` (ELMo, forward LM) objectives: a float64 softmax computed
directly, agreement with the objective's own loss, and no dependence on later tokens."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
from ptmkit.nn.log_probs import next_token_log_probs
from ptmkit.objectives.base import PretrainModel
from ptmkit.objectives.bilm import BidirectionalLM, BiLMConfig
from ptmkit.objectives.clm import CausalLM, CLMConfig

V = 40
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
TOK = SimpleNamespace(vocab_size=V, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4, id_to_token=lambda i: VOCAB[i])


def gpt() -> PretrainModel:
    torch.manual_seed(0)
    enc = TransformerEncoder(TransformerConfig(
        vocab_size=V, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position=32, type_vocab_size=0,
        norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5, embedding_norm=False, pooler=False))
    return PretrainModel(enc, CausalLM(CLMConfig(), enc, TOK)).eval()


def elmo() -> PretrainModel:
    torch.manual_seed(0)
    enc = LSTMEncoder(LSTMConfig(vocab_size=V, num_layers=2, hidden_size=12, projection_size=6,
                                 filters=[[1, 4], [2, 4], [3, 8]], max_chars=8))
    enc.bind_tokenizer(TOK)
    model = PretrainModel(enc, BidirectionalLM(BiLMConfig(), enc, TOK)).eval()
    with torch.no_grad():
        model.objective.softmax.bias.normal_()  # a bias that matters
    return model


def check_causal(model, ids):
    lp = model.objective.lm_log_probs(model.backbone, ids)
    changed = ids.clone()
    changed[:, 5:] = 7
    torch.testing.assert_close(model.objective.lm_log_probs(model.backbone, changed)[:, :4], lp[:, :4])
    assert not torch.allclose(model.objective.lm_log_probs(model.backbone, changed)[:, 4:], lp[:, 4:])
    return lp


def test_clm_scores_equal_the_softmax_and_the_loss():
    model = gpt()
    ids = torch.randint(5, V, (3, 10))
    lp = check_causal(model, ids)
    assert lp.shape == (3, 9)
    h = model.backbone(ids, causal=True).last_hidden_state.double()
    direct = torch.log_softmax(h @ model.backbone.output_embeddings().double().t(), dim=-1)[:, :-1]
    torch.testing.assert_close(lp.double(), direct.gather(2, ids[:, 1:, None]).squeeze(2), atol=1e-5, rtol=1e-5)
    step = model({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    torch.testing.assert_close(-lp.mean(), step.metrics["clm_loss"], atol=1e-5, rtol=1e-5)


def test_bilm_scores_its_forward_lm():
    model = elmo()
    ids = torch.randint(5, V, (2, 9))
    lp = check_causal(model, ids)
    assert lp.shape == (2, 8)
    labels_f = torch.full_like(ids, -100)
    labels_f[:, :-1] = ids[:, 1:]
    step = model({"input_ids": ids, "labels_forward": labels_f, "labels_backward": torch.full_like(ids, -100)})
    torch.testing.assert_close(-lp.mean(), step.metrics["forward_loss"], atol=1e-5, rtol=1e-5)


def test_next_token_log_probs_in_chunks():
    torch.manual_seed(1)
    h, w, b = torch.randn(2, 7, 5), torch.randn(11, 5), torch.randn(11)
    t = torch.randint(0, 11, (2, 7))
    direct = torch.log_softmax(h.double() @ w.double().t() + b.double(), dim=-1).gather(2, t[:, :, None]).squeeze(2)
    torch.testing.assert_close(next_token_log_probs(h, w, b, t, chunk=3).double(), direct, atol=1e-5, rtol=1e-5)
