"""LoRA and BitFit on an encoder-decoder fine-tuned text to text: the updates reach the decoder's
self- and cross-attention, only they train, and the small save reloads on its base with the same
decoded outputs."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file
from test_seq2seq import tiny_model, toy  # noqa: F401 (a fixture: pair files and a word tokenizer)

from ptmkit.pretrained import save_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.saved import load_task_model
from ptmkit.tasks.seq2seq import load_pair_files


@pytest.mark.parametrize("settings", [{"lora_rank": 2}, {"bitfit": True}])
def test_a_small_save_reloads_on_its_base_with_the_same_decodes(toy, tmp_path, settings):  # noqa: F811
    _, files, tok = toy
    data = load_pair_files(*files)
    pre = tiny_model(tok)
    ck = save_pretrained(tmp_path / "ck", pre.config, pre.model, tok)
    cfg = FinetuneConfig(epochs=1, lr=3e-3, batch_size=32, max_seq_len=16, select="loss", task={"max_target_len": 16},
                         **settings)
    result = finetune(ck, data, tmp_path / "run", cfg, progress=False)
    saved = load_file(str(tmp_path / "run" / "best.safetensors"))
    if "lora_rank" in settings:
        assert saved and all(k.startswith("lora.") for k in saved)
        assert "lora.updates.decoder/layers/0/cross_attn/v.B" in saved
        assert result["trainable_parameters"] == sum(v.numel() for v in saved.values())
    else:
        assert saved and all(k.endswith(".bias") for k in saved)
    tm = load_task_model(tmp_path / "run", data)
    assert tm.evaluate("test") == result["test"]  # the same weights: the same decodes, the same scores
