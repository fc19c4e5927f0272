"""GPT's input transformations: sequence layouts, the head reading the extract token, symmetric pairs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.build import build_model
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.tasks.classification import SequenceClassifier, collate, encode_split
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.gpt_inputs import GptTokens, encode_gpt, encode_symmetric
from ptmkit.tasks.multiple_choice import ChoiceSplit, encode_choices
from ptmkit.tokenization import Tokenizer

TOK = GptTokens(start=2, delim=3, extract=4)  # [CLS] [SEP] [MASK] of every ptmkit tokenizer
V = 40
GPT = TransformerConfig(vocab_size=V, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position=32,
                        type_vocab_size=0, norm="pre", embedding_norm=False, pooler=False, dropout=0.0,
                        attention_dropout=0.0)


def test_layouts_of_single_pair_and_choice():
    single = encode_gpt([[10, 11, 12]], None, 8, TOK)
    assert single.ids[0].tolist() == [2, 10, 11, 12, 4]
    pair = encode_gpt([[10, 11]], [[20, 21, 22]], 16, TOK)
    assert pair.ids[0].tolist() == [2, 10, 11, 3, 20, 21, 22, 4]
    assert pair.types[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # truncation keeps the frame: the extract token stays last
    cut = encode_gpt([list(range(10, 20))], [list(range(20, 30))], 9, TOK)
    assert len(cut.ids[0]) == 9 and cut.ids[0][0] == 2 and cut.ids[0][-1] == 4 and (cut.ids[0] == 3).sum() == 1
    with pytest.raises(PtmError, match="no room"):
        encode_gpt([[10]], [[20]], 4, TOK)


def test_choices_and_the_tokenizers_reserved_tokens(tmp_path):
    (tmp_path / "t.txt").write_text("a cat sat on the mat\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="bpe", vocab_size=40, min_frequency=1)
    tokens = GptTokens.of(tok)
    assert (tokens.start, tokens.delim, tokens.extract) == (tok.cls_id, tok.sep_id, tok.mask_id)
    assert len({tokens.start, tokens.delim, tokens.extract, tok.pad_id}) == 4
    split = ChoiceSplit(texts=["a cat"], choices=[["sat", "the mat"]], labels=np.array([1]))
    enc = encode_choices(split, tok, 16, causal=True, gpt_transform=True)
    ctx = list(tok.encode_batch(["a cat"])[0])
    for seq, answer in zip(enc.ids[0], ("sat", "the mat")):
        assert seq.tolist() == [tok.cls_id, *ctx, tok.sep_id, *tok.encode_batch([answer])[0], tok.mask_id]


def _batch(inputs, labels=None):
    return collate(inputs, np.arange(len(inputs)), 0, labels, with_token_types=False)


def test_the_head_reads_the_extract_token():
    torch.manual_seed(0)
    clf = SequenceClassifier(TransformerEncoder(GPT), 2, causal=True).eval()
    enc = encode_gpt([[10, 11, 12, 13, 14], [10]], [[20], [21, 22]], 16, TOK)  # lengths 8 and 6: right padding
    batch = _batch(enc)
    last = batch["attention_mask"].sum(1) - 1
    assert batch["input_ids"][torch.arange(2), last].tolist() == [TOK.extract, TOK.extract]
    with torch.no_grad():
        hidden = clf.backbone(batch["input_ids"], attention_mask=batch["attention_mask"], causal=True).last_hidden_state
        assert torch.allclose(clf.pool(batch), hidden[torch.arange(2), last])
        # the extract state moves with the extract token's embedding; the padding does not reach it
        padded = {**batch, "input_ids": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, 7)}
        assert torch.allclose(clf.pool(padded), clf.pool(batch), atol=1e-6)


def test_symmetric_pair_scoring_adds_both_orders():
    torch.manual_seed(1)
    clf = SequenceClassifier(TransformerEncoder(GPT), 3, causal=True).eval()
    a, b = [[10, 11, 12], [13]], [[20], [21, 22, 23, 24]]
    both = encode_symmetric(a, b, 16, TOK)
    batch = _batch(both, np.array([0, 2]))
    assert "swap_input_ids" in batch
    assert batch["swap_input_ids"][0, :6].tolist() == [2, 20, 3, 10, 11, 12] and int(batch["swap_input_ids"][0, 6]) == 4
    with torch.no_grad():
        ab = clf.pool(_batch(encode_gpt(a, b, 16, TOK)))
        ba = clf.pool(_batch(encode_gpt(b, a, 16, TOK)))
        assert torch.allclose(clf.pool(batch), ab + ba, atol=1e-6)
        assert torch.allclose(clf.logits(batch), clf.classifier(ab + ba), atol=1e-6)
        assert not torch.allclose(ab, ba)  # a causal model does read the orders differently
    clf.train()
    loss = clf(batch).loss
    loss.backward()  # the training step goes through both orders too
    assert torch.isfinite(loss)


@pytest.fixture(scope="module")
def clm_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("clm")
    texts = [("good " if i % 2 else "bad ") + "film plot" for i in range(16)]
    (d / "t.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer.train([d / "t.txt"], kind="bpe", vocab_size=60, min_frequency=1)
    cfg = TransformerConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            max_position=16, norm="pre", type_vocab_size=0, pooler=False, embedding_norm=False)
    config = {"model": cfg.__dict__.copy(), "objective": {"name": "clm"}, "tokenizer": {}, "train": {}}
    torch.manual_seed(0)
    save_pretrained(d / "ck", config, build_model(config, tok), tok)
    return d / "ck", texts


def test_finetune_with_gpt_transform_and_its_refusals(clm_checkpoint):
    ck, texts = clm_checkpoint
    pre = load_pretrained(ck, heads=False)
    split = TaskSplit(texts, np.array([i % 2 for i in range(16)]), text_pairs=["plot"] * 16)
    task = TaskData("toy", [0, 1], split, split, split)
    cfg = FinetuneConfig(epochs=2, batch_size=8, max_seq_len=12, lr=3e-3, gpt_transform=True, symmetric_pairs=True)
    enc = encode_split(split, pre.tokenizer, 12, True, gpt_transform=True, symmetric=True)
    assert enc.swapped is not None and enc.ids[0][-1] == pre.tokenizer.mask_id
    result = finetune(pre, task, None, cfg, seed=0, progress=False)
    assert 0.0 <= result["test"]["accuracy"] <= 1.0 and result["config"]["gpt_transform"] is True
    with pytest.raises(PtmError, match="gpt_transform=true as well"):
        FinetuneConfig(symmetric_pairs=True)
    single = TaskData("one", [0, 1], TaskSplit(texts, split.labels), TaskSplit(texts, split.labels), TaskSplit(texts, split.labels))
    with pytest.raises(PtmError, match="symmetric_pairs=false"):
        finetune(pre, single, None, cfg, seed=0, progress=False)


def test_gpt_transform_is_refused_for_a_bidirectional_model(tmp_path):
    (tmp_path / "t.txt").write_text("good film\nbad plot\n")
    tok = Tokenizer.train([tmp_path / "t.txt"], kind="wordpiece", vocab_size=40, min_frequency=1)
    config = {"model": {"encoder": "transformer", "vocab_size": tok.vocab_size, "hidden_size": 16, "num_layers": 1,
                        "num_heads": 2, "intermediate_size": 32, "max_position": 16},
              "objective": {"name": "mlm", "nsp": False}, "tokenizer": {}, "train": {}}
    ck = save_pretrained(tmp_path / "ck", config, build_model(config, tok), tok)
    split = TaskSplit(["good film", "bad plot"], np.array([1, 0]))
    with pytest.raises(PtmError, match="bidirectional"):
        finetune(ck, TaskData("t", [0, 1], split, split, split), None, FinetuneConfig(gpt_transform=True, max_seq_len=8),
                 progress=False)


def test_start_and_extract_rows_are_redrawn_and_nothing_else():
    from ptmkit.tasks.gpt_inputs import init_new_rows

    torch.manual_seed(0)
    enc = TransformerEncoder(GPT)
    before = enc.input_embeddings().weight.detach().clone()
    torch.manual_seed(5)
    init_new_rows(enc, TOK)
    after = enc.input_embeddings().weight.detach()
    changed = (after != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [TOK.start, TOK.extract]
    assert float(after[TOK.start].std()) == pytest.approx(GPT.init_std, rel=0.6)
    with pytest.raises(PtmError, match="beyond the model's"):
        init_new_rows(enc, GptTokens(start=2, delim=3, extract=V))
