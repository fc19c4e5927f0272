"""One chosen layer as the task head's input (``mix=layer:k``): the head reads exactly the encoder's
hidden state ``k``; the setting's spellings; an index outside the encoder is refused naming the range."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.layer_mix import ChosenLayer
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.classification import SequenceClassifier
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.tagging import TokenTagger
from ptmkit.tokenization import Tokenizer
from ptmkit.workflows.finetune import parse_overrides

LAYERS = 3  # hidden states 0..3


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return TransformerEncoder(TransformerConfig(vocab_size=40, hidden_size=8, num_layers=LAYERS, num_heads=2,
                                                intermediate_size=16, max_position=16, dropout=0.0,
                                                attention_dropout=0.0)).eval()


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 40, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # one padded row: the head must read the chosen layer under the same mask
    return {"input_ids": ids, "attention_mask": mask}


def _capture_input(module: torch.nn.Module) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    return seen


@pytest.mark.parametrize("k", [0, 1, 2, 3, -1, -4])
def test_classifier_head_reads_hidden_state_k(encoder, batch, k):
    # computed as the heads compute them, without gradients (inference may take another kernel)
    with torch.no_grad():
        states = encoder(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True).hidden_states
    clf = SequenceClassifier(encoder, 2, mix=f"layer:{k}", pooling="mean", dropout=0.0).eval()
    seen = _capture_input(clf.classifier)
    with torch.no_grad():
        clf.logits(batch)
    m = batch["attention_mask"][..., None].float()
    expected = (states[k] * m).sum(1) / m.sum(1)  # the mean pooling of hidden state k, nothing else
    torch.testing.assert_close(seen[0], expected, rtol=0, atol=0)
    # the token states the pooling (or a BiLSTM head) consumes are hidden state k itself
    bilstm = SequenceClassifier(encoder, 2, mix=k, head="bilstm", head_hidden=4).eval()
    with torch.no_grad():
        assert torch.equal(bilstm._states(batch)[1], states[k])


def test_layer_k_differs_from_the_top_layer_and_bypasses_the_pooler(encoder, batch):
    """``layer:1`` is not the top layer; ``cls`` pooling reads ``[CLS]`` of layer k, not the pooler."""
    states = encoder(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True).hidden_states
    assert not torch.allclose(states[1], states[LAYERS])
    clf = SequenceClassifier(encoder, 2, mix="layer:1", pooling="cls", dropout=0.0).eval()
    with torch.no_grad():
        assert torch.equal(clf.pool(batch), states[1][:, 0])


@pytest.mark.parametrize("k", [0, 2])
def test_tagger_head_reads_hidden_state_k(encoder, batch, k):
    with torch.no_grad():
        states = encoder(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True).hidden_states
    tagger = TokenTagger(encoder, 3, dropout=0.0, mix=f"layer:{k}").eval()
    seen = _capture_input(tagger.classifier)
    pos = torch.tensor([[0, 2, 4], [1, 3, 0], [5, 6, 0]])
    with torch.no_grad():
        tagger.emissions({**batch, "word_pos": pos, "word_mask": pos >= 0})
    expected = states[k].gather(1, pos[..., None].expand(-1, -1, states[k].shape[-1]))
    torch.testing.assert_close(seen[0], expected, rtol=0, atol=0)


@pytest.mark.parametrize("k", [LAYERS + 1, 17, -(LAYERS + 2)])
def test_an_index_outside_the_encoder_names_the_valid_range(encoder, k):
    with pytest.raises(PtmError, match=rf"mix=layer:{k} .*0\.\.{LAYERS} .*-{LAYERS + 1}\.\.-1"):
        SequenceClassifier(encoder, 2, mix=f"layer:{k}")
    with pytest.raises(PtmError, match=f"0..{LAYERS}"):
        TokenTagger(encoder, 3, mix=k)


def test_config_spellings():
    assert FinetuneConfig(mix=2).mix == "layer:2"
    assert FinetuneConfig(mix="layer:-1").resolved_mix == "layer:-1"
    assert FinetuneConfig(mix="layer:+3", mode="features").resolved_mix == "layer:3"
    assert FinetuneConfig(mode="features").resolved_mix == "scalar"
    # a command-line override `mix=3` (YAML: an integer) and `mix=layer:3` (a string) agree
    for text in ("mix=3", "mix=layer:3"):
        assert parse_overrides([text]).mix == "layer:3"
    for bad in ("layer:top", "layers:1", "deep", 1.5):
        with pytest.raises(PtmError, match="mix must be one of auto, last, scalar, or layer:K"):
            FinetuneConfig(mix=bad)
    assert ChosenLayer(-1, 4).index == 3


def test_finetune_features_on_one_layer(tmp_path):
    rng = np.random.default_rng(0)

    def split(n):
        y = rng.integers(0, 2, n)
        return TaskSplit([("good " if v else "bad ") + "film plot" for v in y], y)

    data = TaskData("toy", [0, 1], split(32), split(16), split(16))
    (tmp_path / "t.txt").write_text("good film plot\nbad film plot\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="wordpiece", vocab_size=40, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                            max_position=16)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    pre = load_pretrained(ck, heads=False)
    run = FinetuneConfig(epochs=2, lr=1e-2, batch_size=16, max_seq_len=16, mode="features", mix=0, head="linear",
                         num_threads=1)
    result = finetune(pre, data, None, run, progress=False)
    assert result["config"]["mix"] == "layer:0"
    assert result["trainable_parameters"] == 16 * 2 + 2  # only the linear head: a chosen layer has no weights
    with pytest.raises(PtmError, match="0..2"):
        finetune(pre, data, None, FinetuneConfig(mode="features", mix="layer:3", epochs=1, max_seq_len=16), progress=False)
