"""LoRA and BitFit fine-tuning end to end: only their weights (and the head) train, only those are
saved, the saved model reloads on its base with the fine-tuned predictions and is refused on
another, and merging the updates changes no prediction."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_checkpoint, toy_sentiment
from safetensors.torch import load_file, save_file

import ptmkit.tasks.finetune as ft
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.efficient import merge
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.saved import encoder_of, load_task_model

SMALL = dict(epochs=2, lr=3e-3, batch_size=16, max_seq_len=32)
TASK_TYPE_OF = ft.task_type_of


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("efficient")
    task = toy_sentiment((96, 32, 32))
    return root, task, tiny_checkpoint(root / "model", task.train.texts)


def _run(monkeypatch, pre, task, out, **cfg):
    """Fine-tune, returning the result and the task model the run built (as trained)."""
    built = {}

    def spy(*args, **kwargs):
        t = TASK_TYPE_OF(*args, **kwargs)
        original = t.build
        t.build = lambda backbone: built.setdefault("m", original(backbone))
        return t

    monkeypatch.setattr(ft, "task_type_of", spy)
    r = finetune(pre, task, out, FinetuneConfig(**{**SMALL, **cfg}), seed=0, progress=False)
    return r, built["m"]


def _probs(path):
    return torch.tensor([list(json.loads(line)["probabilities"].values()) for line in path.read_text().splitlines()],
                        dtype=torch.float64)


def test_lora_trains_only_its_updates_and_the_head_and_saves_only_those(base, monkeypatch, tmp_path):
    root, task, ck = base
    pre = load_pretrained(ck, heads=False)
    r, model = _run(monkeypatch, ck, task, tmp_path / "lora", lora_rank=4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("lora.") or not n.startswith("backbone.") for n in trainable)
    assert {n for n in trainable if n.startswith("lora.")} == {f"lora.updates.layers/{i}/attn/{x}.{m}"
                                                              for i in (0, 1) for x in "qv" for m in "AB"}
    ref = pre.backbone.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in model.backbone.state_dict().items())  # the base, bit for bit
    assert any(torch.count_nonzero(u.B) for u in model.lora.updates.values())  # the updates learned
    assert r["trainable_parameters"] == sum(p.numel() for n, p in model.named_parameters() if n in trainable)

    saved = load_file(str(tmp_path / "lora" / "best.safetensors"))
    assert not any(k.startswith("backbone.") for k in saved) and any(k.startswith("lora.") for k in saved)
    info = json.loads((tmp_path / "lora" / "task_model.json").read_text())
    record = info["parameter_efficient"]
    assert record["method"] == "lora" and not record["merged"] and record["base"]["path"] == str(ck.resolve())

    # reloaded on its base: the fine-tuned predictions
    tm = load_task_model(tmp_path / "lora", task)
    written = _probs(tmp_path / "lora" / "predictions.jsonl")
    torch.testing.assert_close(torch.as_tensor(tm.predict("test")), written, rtol=0, atol=1e-6)  # 6 digits written
    assert tm.evaluate("test") == r["test"]

    # merged by hand: the same predictions from plain weights
    before = torch.as_tensor(tm.predict("dev"))
    merge(tm.model, encoder_of(tm.model))
    assert not hasattr(tm.model, "lora")
    torch.testing.assert_close(torch.as_tensor(tm.predict("dev")), before, rtol=1e-5, atol=1e-6)
    folded = load_task_model(tmp_path / "lora", task, merged=True)  # merged as it loads
    assert not hasattr(folded.model, "lora") and not any(m._forward_hooks for m in folded.model.modules())
    torch.testing.assert_close(torch.as_tensor(folded.predict("dev")), before, rtol=1e-5, atol=1e-6)


def test_a_small_save_is_refused_on_another_base_naming_both(base, monkeypatch, tmp_path):
    root, task, ck = base
    _run(monkeypatch, ck, task, tmp_path / "run", bitfit=True, epochs=1)
    other = tmp_path / "other"
    other.mkdir()
    for f in ck.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    weights = load_file(str(other / "model.safetensors"))
    key = next(k for k in weights if k.endswith("ffn.fc1.weight"))
    weights[key] = weights[key] + 1e-3
    save_file(weights, str(other / "model.safetensors"))
    with pytest.raises(PtmError, match=f"on the base {ck.resolve()}.*{other}.* holds other weights"):
        load_task_model(tmp_path / "run", task, base=other)
    with pytest.raises(PtmError, match="not there"):
        load_task_model(tmp_path / "run", task, base=tmp_path / "nowhere")
    assert load_task_model(tmp_path / "run", task, base=ck).evaluate("test")  # the recorded base, given again


def test_bitfit_changes_only_the_encoder_biases(base, monkeypatch, tmp_path):
    root, task, ck = base
    pre = load_pretrained(ck, heads=False)
    r, model = _run(monkeypatch, ck, task, tmp_path / "bitfit", bitfit=True, epochs=1)
    ref = dict(pre.backbone.named_parameters())
    changed = {n for n, p in model.backbone.named_parameters() if not torch.equal(p, ref[n])}
    assert changed and all(n.endswith(".bias") for n in changed)  # every non-bias weight bit-identical
    assert {"layers.0.attn.qkv.bias", "layers.1.ffn.fc1.bias"} <= changed
    saved = load_file(str(tmp_path / "bitfit" / "best.safetensors"))
    inside = {k for k in saved if k.startswith("backbone.")}
    assert inside and all(k.endswith(".bias") for k in inside)
    assert inside == {f"backbone.{n}" for n in ref if n.endswith(".bias")}
    tm = load_task_model(tmp_path / "bitfit", task)
    assert tm.evaluate("test") == r["test"]
    assert r["trainable_parameters"] < 0.1 * r["num_parameters"]


def test_lora_merge_saves_a_plain_model_with_the_unmerged_predictions(base, monkeypatch, tmp_path):
    root, task, ck = base
    _run(monkeypatch, ck, task, tmp_path / "lora", lora_rank=2, lora_alpha=4, lora_targets="q,k,v,o", epochs=1)
    r, _ = _run(monkeypatch, ck, task, tmp_path / "merged", lora_rank=2, lora_alpha=4, lora_targets="q,k,v,o", epochs=1,
                lora_merge=True)
    lora = 2 * 4 * 2 * (32 + 32)  # layers x (q, k, v, o) x (A [2, 32] + B [32, 2])
    assert r["trainable_parameters"] == lora + 32 * 2 + 2  # what trained: the updates and the head
    saved = load_file(str(tmp_path / "merged" / "best.safetensors"))
    assert not any(k.startswith("lora.") for k in saved) and "backbone.layers.0.attn.qkv.weight" in saved
    torch.testing.assert_close(_probs(tmp_path / "merged" / "predictions.jsonl"),
                               _probs(tmp_path / "lora" / "predictions.jsonl"), rtol=1e-4, atol=1e-5)
    tm = load_task_model(tmp_path / "merged", task, base=tmp_path / "nowhere")  # needs no base
    assert not hasattr(tm.model, "lora")
    assert json.loads((tmp_path / "merged" / "task_model.json").read_text())["parameter_efficient"]["merged"]


def test_bad_combinations_are_refused():
    for kw, msg in ((dict(lora_rank=-1), "lora_rank must be an integer >= 0"),
                    (dict(lora_rank=4, mode="features"), "mode=features"),
                    (dict(lora_rank=4, adapter_size=8), "adapter_size"),
                    (dict(lora_rank=4, bitfit=True), "use one of them"),
                    (dict(bitfit=True, mode="features"), "mode=features"),
                    (dict(lora_alpha=16), "set lora_rank"),
                    (dict(lora_rank=4, lora_alpha=0), "lora_alpha must be a positive"),
                    (dict(lora_rank=4, lora_dropout=1.0), r"lora_dropout must be in \[0, 1\)"),
                    (dict(lora_rank=4, gradual_unfreeze=True), "gradual_unfreeze"),
                    (dict(lora_rank=4, layer_decay=0.8), "set layer_decay=1"),
                    (dict(bitfit=True, gpt_transform=True), "gpt_transform=false"),
                    (dict(lora_rank=2, lora_targets="q,,v"), "comma-separated")):
        with pytest.raises(PtmError, match=msg):
            FinetuneConfig(**kw)
    assert FinetuneConfig(lora_rank=2, lora_targets=["q", " k"]).lora_targets == "q,k"


def test_bitfit_frees_exactly_the_bias_terms():
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.encoders.encoder_decoder import EncoderDecoder
    from ptmkit.encoders.encoder_decoder_config import EncoderDecoderConfig
    from ptmkit.encoders.lstm import LSTMConfig, LSTMEncoder
    from ptmkit.nn.bitfit import freeze_for_bitfit

    enc = TransformerEncoder(TransformerConfig(vocab_size=30, hidden_size=8, num_layers=1, num_heads=2,
                                               intermediate_size=16, max_position=8))
    assert freeze_for_bitfit(enc) == ["embeddings.norm.bias", "layers.0.attn.out.bias", "layers.0.attn.qkv.bias",
                                      "layers.0.attn_norm.bias", "layers.0.ffn.fc1.bias", "layers.0.ffn.fc2.bias",
                                      "layers.0.ffn_norm.bias", "pooler.dense.bias"]
    assert {n for n, p in enc.named_parameters() if p.requires_grad} == set(freeze_for_bitfit(enc))
    lstm = LSTMEncoder(LSTMConfig(vocab_size=20, hidden_size=8, num_layers=1, projection_size=None, char_cnn=False))
    assert freeze_for_bitfit(lstm) and all("bias_" in n for n in freeze_for_bitfit(lstm))
    t5 = EncoderDecoder(EncoderDecoderConfig(vocab_size=30, hidden_size=8, encoder_layers=1, decoder_layers=1,
                                             num_heads=2, intermediate_size=16, max_position=8, bias=False,
                                             norm="pre", norm_type="rms", positions="relative"))
    with pytest.raises(PtmError, match="has none"):
        freeze_for_bitfit(t5)


class Killed(Exception):
    pass


def test_an_interrupted_lora_run_resumes_exactly(base, monkeypatch, tmp_path):
    from ptmkit.tasks import callbacks

    root, task, ck = base
    cfg = FinetuneConfig(**{**SMALL, "epochs": 3}, lora_rank=2, lora_dropout=0.1)
    full = finetune(ck, task, tmp_path / "full", cfg, seed=0, progress=False)
    original = callbacks.DevSelection.on_step_end

    def killed_in_epoch_two(self, trainer, step):
        original(self, trainer, step)
        if step > trainer.cfg.max_steps // 3 + 2:
            raise Killed

    monkeypatch.setattr(callbacks.DevSelection, "on_step_end", killed_in_epoch_two)
    with pytest.raises(Killed):
        finetune(ck, task, tmp_path / "cut", cfg, seed=0, progress=False)
    monkeypatch.undo()
    resumed = finetune(ck, task, tmp_path / "cut", cfg, seed=0, progress=False, resume=True)
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    assert load_file(str(tmp_path / "cut" / "best.safetensors")).keys() == \
        load_file(str(tmp_path / "full" / "best.safetensors")).keys()
