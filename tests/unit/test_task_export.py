"""``ptm export`` of fine-tuned and compressed task models: HF's task classes load the directory
(``from_pretrained``, eval mode) and give ptmkit's logits, the tokenizer files give ptmkit's
inputs, and the models HF cannot express are refused with the reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import run_cli, task_file_args, tiny_checkpoint, toy_sentiment

transformers = pytest.importorskip("transformers")

from ptmkit import export_hf  # noqa: E402
from ptmkit.build import build_encoder  # noqa: E402
from ptmkit.compress.quantize import quantization_spec, quantize, quantized_state  # noqa: E402
from ptmkit.compress.students import BILSTM  # noqa: E402
from ptmkit.errors import PtmError  # noqa: E402
from ptmkit.interop import export_task_hf  # noqa: E402
from ptmkit.pretrained import load_pretrained  # noqa: E402
from ptmkit.tasks.base import task_type_of  # noqa: E402
from ptmkit.tasks.classification import collate  # noqa: E402
from ptmkit.tasks.finetune import FinetuneConfig, finetune  # noqa: E402
from ptmkit.tasks.regression import RegressionData  # noqa: E402
from ptmkit.tasks.saved import load_task_model, save_task_model, uses_token_types  # noqa: E402
from ptmkit.tasks.span_qa import QAData, QASplit, collate_windows  # noqa: E402
from ptmkit.tasks.tagging import TaggingData, TaggingSplit, collate_words  # noqa: E402

ATOL = 1e-5


# ---------------------------------------------------------------------------------- tiny task models


def _tagging(sizes=(48, 12, 12), seed=0) -> TaggingData:
    """Words of the sentiment task tagged POS ('good'), NEG ('bad') or O."""
    task = toy_sentiment(sizes, seed)
    tag = {"good": "POS", "bad": "NEG"}
    splits = [TaggingSplit([t.split() for t in s.texts], [[tag.get(w, "O") for w in t.split()] for t in s.texts])
              for s in (task.train, task.dev, task.test)]
    return TaggingData("toy-tags", sorted({t for s in splits[0].tags for t in s}), *splits)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny BERT fine-tuned (2 epochs) as a classifier and as a tagger, and their task files."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("task-export")
    task = toy_sentiment((64, 16, 16))
    ck = tiny_checkpoint(root / "model", task.train.texts, layers=2, heads=4, hidden=32)
    cfg = FinetuneConfig(epochs=2, lr=3e-3, batch_size=16, max_seq_len=32)
    finetune(load_pretrained(ck, heads=False), task, root / "cls", cfg, seed=0, progress=False)
    tags = _tagging()
    finetune(load_pretrained(ck, heads=False), tags, root / "tag", cfg, seed=0, progress=False)
    return {"root": root, "ck": ck, "task": task, "tags": tags, "files": task_file_args(task, root)}


def _untrained(out, ck, data, init=None, **settings):
    """A task model of ``data``'s type on checkpoint ``ck`` with its head drawn at random (``init``:
    a function of the module run before saving), saved as fine-tuning saves one."""
    pre = load_pretrained(ck, heads=False)
    cfg = FinetuneConfig(max_seq_len=32, **settings)
    task = task_type_of(data, cfg, pre.tokenizer, pre.causal, uses_token_types(pre.backbone, data))
    model = task.build(pre.backbone)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith(("backbone.", "model.backbone.")):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    if init is not None:
        init(model)
    save_task_model(out, model, task, pre.config, pre.tokenizer, cfg)
    return out


def _sentence_batch(tm, split="test", n=6):
    enc = tm.encoded(split)
    return collate(enc, np.arange(n), tm.tokenizer.pad_id, with_token_types=tm.task.with_types)


def _hf(cls_name, out):
    """``transformers.<cls_name>`` from ``out``: every tensor read from the files, none left over."""
    model, info = getattr(transformers, cls_name).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    return model.eval()


def _inputs(batch):
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}


# ------------------------------------------------------------------------------------- what exports


def test_a_fine_tuned_classifier_exports_with_its_logits_and_labels(runs, tmp_path, capsys):
    run, out = runs["root"] / "cls", tmp_path / "hf"
    rc, err = run_cli(["export", run, "-o", out], capsys)
    assert rc == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "0", "1": "1"} and config["label2id"] == {"0": 0, "1": 1}
    assert config["problem_type"] == "single_label_classification"
    tm = load_task_model(run, runs["task"])
    batch = _sentence_batch(tm)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert type(hf).__name__ == "BertForSequenceClassification" and hf.config.num_labels == 2
    _hf("BertForSequenceClassification", out)  # nothing missing or left over
    with torch.no_grad():
        want, got = tm.model.logits(batch), hf(**_inputs(batch)).logits
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    # the exported tokenizer gives ptmkit's inputs: [CLS] text [SEP], padded to the right
    tok = transformers.AutoTokenizer.from_pretrained(out)
    enc = tok(runs["task"].test.texts[:6], padding=True, return_tensors="pt")
    assert torch.equal(enc["input_ids"], batch["input_ids"]) and torch.equal(enc["attention_mask"], batch["attention_mask"])
    assert (out / "README.md").is_file()


@pytest.mark.parametrize("fmt, cls_name", [("roberta", "RobertaForSequenceClassification"),
                                           ("albert", "AlbertForSequenceClassification")])
def test_the_classifier_exports_through_the_other_families_exactly(runs, tmp_path, fmt, cls_name):
    run, out = runs["root"] / "cls", tmp_path / fmt
    export_task_hf(run, out, format=fmt)
    tm = load_task_model(run, runs["task"])
    batch = _sentence_batch(tm)
    hf = _hf(cls_name, out)
    with torch.no_grad():
        torch.testing.assert_close(hf(**_inputs(batch)).logits, tm.model.logits(batch), atol=ATOL, rtol=0)


def _tag_batch(tm, n=6):
    enc = tm.encoded("test")
    return enc, collate_words(enc, np.arange(n), tm.tokenizer.pad_id)


@pytest.mark.parametrize("fmt, cls_name", [(None, "BertForTokenClassification"),
                                           ("electra", "ElectraForTokenClassification"),
                                           ("roberta", "RobertaForTokenClassification")])
def test_a_fine_tuned_tagger_exports_with_each_words_first_piece_logits(runs, tmp_path, fmt, cls_name):
    run, out = runs["root"] / "tag", tmp_path / "hf"
    export_hf(run, out, format=fmt)  # ptmkit.export_hf takes a task model too
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [cls_name]
    assert config["id2label"] == {str(i): t for i, t in enumerate(runs["tags"].label_names)}
    tm = load_task_model(run, runs["tags"])
    enc, batch = _tag_batch(tm)
    hf = _hf(cls_name, out)
    with torch.no_grad():
        want = tm.model.emissions(batch)  # [B, W, K]: one row per word, from its first piece
        pieces = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # [B, T, K]
    got = pieces.gather(1, batch["word_pos"].unsqueeze(-1).expand(-1, -1, pieces.shape[-1]))
    real = batch["word_mask"]
    torch.testing.assert_close(got[real], want[real], atol=ATOL, rtol=0)
    # what the help says: the words' first pieces are where HF's word_ids() first names each word
    tok = transformers.AutoTokenizer.from_pretrained(out)
    for i, words in enumerate(runs["tags"].test.words[:6]):
        hf_enc = tok(words, is_split_into_words=True)
        assert hf_enc["input_ids"] == enc.ids[i].tolist()
        firsts = [hf_enc.word_ids().index(w) for w in range(len(words))]
        assert firsts == enc.word_pos[i].tolist()


def test_a_layer_cut_model_exports_with_fewer_layers(runs, tmp_path, capsys):
    cut = tmp_path / "cut"
    rc, err = run_cli(["prune", runs["root"] / "cls", *runs["files"], "--method", "layers", "--keep-layers", "0",
                       "--rounds", "1", "--threads", "1", "-o", cut], capsys)
    assert rc == 0, err
    rc, err = run_cli(["export", cut, "-o", tmp_path / "hf"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_hidden_layers"] == 1
    tm = load_task_model(cut, runs["task"])
    batch = _sentence_batch(tm)
    with torch.no_grad():
        got = _hf("BertForSequenceClassification", tmp_path / "hf")(**_inputs(batch)).logits
        torch.testing.assert_close(got, tm.model.logits(batch), atol=ATOL, rtol=0)


def test_regression_exports_its_prediction_in_the_datas_units(runs, tmp_path):
    task = runs["task"]
    scores = RegressionData("toy-score", *(type(s)(s.texts, 3.0 + 2.0 * s.labels.astype(np.float64))
                                           for s in (task.train, task.dev, task.test)))
    run = _untrained(tmp_path / "reg", runs["ck"], scores)
    export_task_hf(run, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "score"}
    tm = load_task_model(run, scores)
    batch = _sentence_batch(tm)
    with torch.no_grad():
        got = _hf("BertForSequenceClassification", tmp_path / "hf")(**_inputs(batch)).logits.squeeze(-1)
        torch.testing.assert_close(got, tm.model.predict(batch), atol=ATOL, rtol=0)


def test_span_qa_exports_its_start_and_end_scores(runs, tmp_path):
    texts = runs["task"].train.texts
    split = QASplit(["good or bad ?"] * 8, texts[:8], [[(t.split()[0], 0)] for t in texts[:8]])
    qa = QAData("toy-qa", split, split, split)
    run = _untrained(tmp_path / "qa", runs["ck"], qa)
    export_task_hf(run, tmp_path / "hf")
    tm = load_task_model(run, qa)
    batch = collate_windows(tm.encoded("test"), np.arange(6), tm.tokenizer.pad_id, tm.task.with_types)
    with torch.no_grad():
        start, end = tm.model.scores(batch)  # -inf outside the context
        out = _hf("BertForQuestionAnswering", tmp_path / "hf")(**_inputs(batch))
    scored = torch.isfinite(start)
    torch.testing.assert_close(out.start_logits[scored], start[scored], atol=ATOL, rtol=0)
    torch.testing.assert_close(out.end_logits[scored], end[scored], atol=ATOL, rtol=0)


def test_a_causal_tagger_exports_as_gpt2(runs, tmp_path):
    tags = runs["tags"]
    ck = tiny_checkpoint(tmp_path / "gpt", [" ".join(w) for w in tags.train.words], causal=True, embedding_norm=False)
    run = _untrained(tmp_path / "tag", ck, tags)
    export_task_hf(run, tmp_path / "hf")
    tm = load_task_model(run, tags)
    _, batch = _tag_batch(tm)
    with torch.no_grad():
        pieces = _hf("GPT2ForTokenClassification", tmp_path / "hf")(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        want = tm.model.emissions(batch)
    got = pieces.gather(1, batch["word_pos"].unsqueeze(-1).expand(-1, -1, pieces.shape[-1]))
    torch.testing.assert_close(got[batch["word_mask"]], want[batch["word_mask"]], atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------ refusals


def test_a_quantized_model_is_refused_naming_the_float_model(runs, tmp_path, capsys):
    tm = load_task_model(runs["root"] / "cls", runs["task"])
    spec = quantization_spec()
    q = quantize(tm.model, spec)
    save_task_model(tmp_path / "int8", q, tm.task, tm.config, tm.tokenizer, tm.cfg,
                    compression={"quantization": spec, "source": str(tm.path)}, weights=quantized_state(q))
    rc, err = run_cli(["export", tmp_path / "int8", "-o", tmp_path / "hf"], capsys)
    assert rc == 2
    assert "quantized" in err and "int8" in err and str(tm.path) in err and "quantize it in your runtime" in err
    assert not (tmp_path / "hf" / "config.json").exists()


@pytest.mark.parametrize("settings, match", [
    ({"head": "mlp"}, "head=mlp puts a task network before the output layer"),
    ({"pooling": "mean"}, "pooling=mean"),
    ({"mix": "scalar"}, "mix=scalar reads other layers"),
    ({"adapter_size": 4}, r"adapters \(adapter_size=4\)"),
])
def test_heads_hf_cannot_express_are_refused_with_the_reason(runs, tmp_path, settings, match):
    run = _untrained(tmp_path / "m", runs["ck"], runs["task"], **settings)
    with pytest.raises(PtmError, match=match) as info:
        export_task_hf(run, tmp_path / "hf")
    assert "What exports: classification and regression with pooling=cls" in str(info.value)


def test_a_crf_tagger_and_pruned_heads_are_refused(runs, tmp_path):
    run = _untrained(tmp_path / "crf", runs["ck"], runs["tags"], task={"crf": True})
    with pytest.raises(PtmError, match="crf=true decodes a sentence's tags jointly"):
        export_task_hf(run, tmp_path / "hf")
    run = _untrained(tmp_path / "pruned", runs["ck"], runs["task"], init=lambda m: m.backbone.prune_heads({0: [1]}))
    with pytest.raises(PtmError, match="pruned attention heads.*export the model before pruning"):
        export_task_hf(run, tmp_path / "hf2")


def test_a_bilstm_student_and_a_classifier_as_gpt2_are_refused(runs, tmp_path):
    pre = load_pretrained(runs["ck"], heads=False)
    lstm = build_encoder({**BILSTM, "vocab_size": pre.tokenizer.vocab_size, "hidden_size": 16}, pre.tokenizer)
    task = runs["task"]
    cfg = FinetuneConfig(max_seq_len=32)
    tt = task_type_of(task, cfg, pre.tokenizer, False, False)
    save_task_model(tmp_path / "lstm", tt.build(lstm), tt, pre.config, pre.tokenizer, cfg)
    with pytest.raises(PtmError, match="its encoder is 'lstm'.*Transformer encoders"):
        export_task_hf(tmp_path / "lstm", tmp_path / "hf")
    with pytest.raises(PtmError, match="--format gpt2: this export writes no sequence classification class of its "
                                       "family; the families that have one: albert, bert, roberta"):
        export_task_hf(runs["root"] / "cls", tmp_path / "hf", format="gpt2")
