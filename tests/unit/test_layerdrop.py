"""LayerDrop (Fan et al. 2020) in the Transformer encoder: p = 0 changes nothing (not even the random
stream), p = 1 in training skips every layer, eval mode runs every layer, the skip rate is p, the
draw is reproducible from PyTorch's generator, and the settings are checked."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from conftest import special_ids
from torch.testing import assert_close

from ptmkit.build import build_encoder
from ptmkit.config import apply_overrides
from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.errors import PtmError
from ptmkit.nn.packing import Packing
from ptmkit.presets import load_preset
from ptmkit.tasks.finetune_config import FinetuneConfig

V = 40
CFG = TransformerConfig(vocab_size=V, hidden_size=16, num_layers=4, num_heads=2, intermediate_size=32, max_position=16,
                        dropout=0.1, attention_dropout=0.1)


def encoder(cfg: TransformerConfig = CFG, seed: int = 0) -> TransformerEncoder:
    torch.manual_seed(seed)
    return TransformerEncoder(cfg)


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, V, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[2, 5:] = 0
    return ids, mask


def by_hand(enc: TransformerEncoder, ids: torch.Tensor, mask: torch.Tensor, layers) -> torch.Tensor:
    """The stack run layer by layer, only ``layers``: embeddings, those layers, pooler-free top
    (on the packed real tokens, as the encoder runs a padded batch)."""
    x = enc.embeddings(ids)
    m, is_causal = enc._mask(mask, None, False, ids.shape[1], x.dtype, x.device)
    packing = Packing.of(mask)
    assert packing is not None
    x = packing.pack(x)
    for i in layers:
        x = enc.layers[i](x, m, is_causal, packing=packing)
    return packing.pad(x)


def test_p0_changes_nothing_in_training_not_even_the_random_stream() -> None:
    enc = encoder().train()  # dropout on: the output depends on the random stream
    ids, mask = inputs()
    torch.manual_seed(7)
    out = enc(ids, mask).last_hidden_state
    after = torch.get_rng_state()
    torch.manual_seed(7)
    ref = by_hand(enc, ids, mask, range(4))
    assert_close(out, ref, rtol=0, atol=0)
    assert torch.equal(after, torch.get_rng_state())  # nothing extra was drawn


def test_p1_in_training_skips_every_layer() -> None:
    enc = encoder(replace(CFG, dropout=0.0, attention_dropout=0.0, layerdrop=1.0)).train()
    ids, mask = inputs()
    out = enc(ids, mask, output_hidden_states=True, output_attentions=True)
    emb = enc.embeddings(ids) * mask[..., None]  # a padded batch runs packed: zeros at the padding
    assert_close(out.last_hidden_state, emb, rtol=0, atol=0)
    assert len(out.hidden_states) == 5 and all(torch.equal(h, emb) for h in out.hidden_states)  # repeated
    assert out.attentions == (None, None, None, None)
    # the gradient reaches only the embeddings (and the pooler): the layers did not run
    out.pooled.sum().backward()
    assert all(p.grad is None for p in enc.layers.parameters())


def test_eval_mode_runs_every_layer_whatever_p() -> None:
    plain = encoder().eval()
    dropping = encoder(replace(CFG, layerdrop=0.9)).eval()  # the same weights (same seed)
    ids, mask = inputs()
    with torch.no_grad():
        state = torch.get_rng_state()
        out = dropping(ids, mask).last_hidden_state
        assert torch.equal(state, torch.get_rng_state())
        assert_close(out, plain(ids, mask).last_hidden_state, rtol=0, atol=0)


def test_the_attribute_set_on_a_built_encoder_counts() -> None:
    """Fine-tuning sets ``backbone.layerdrop`` on an encoder loaded with ``layerdrop`` 0 in its config."""
    enc = encoder(replace(CFG, dropout=0.0, attention_dropout=0.0))
    assert enc.layerdrop == 0.0
    enc.layerdrop = 1.0
    ids, mask = inputs()
    assert_close(enc.train()(ids, mask).last_hidden_state, enc.embeddings(ids) * mask[..., None], rtol=0, atol=0)


def test_skip_rate_is_p_and_skipped_layers_pass_the_state_on() -> None:
    p, L, passes = 0.3, 4, 400
    enc = encoder(replace(CFG, num_layers=L, dropout=0.0, attention_dropout=0.0, layerdrop=p)).train()
    ids, mask = inputs()
    torch.manual_seed(3)
    skipped = 0
    with torch.no_grad():
        for _ in range(passes):
            torch.manual_seed(int(torch.randint(0, 2**31, ())))  # a fresh stream per pass, reproducible
            state = torch.get_rng_state()
            hs = enc(ids, mask, output_hidden_states=True).hidden_states
            torch.set_rng_state(state)
            drawn = enc.dropped_layers()  # the same draw again
            for i in range(L):
                same = torch.equal(hs[i + 1], hs[i])
                assert same == drawn[i]  # a layer changes the state iff it was not skipped
                skipped += same
    rate = skipped / (passes * L)
    sd = math.sqrt(p * (1 - p) / (passes * L))
    assert abs(rate - p) < 4 * sd, (rate, p)


def test_the_draw_is_reproducible_from_torch_generator() -> None:
    enc = encoder(replace(CFG, layerdrop=0.5)).train()
    ids, mask = inputs()
    torch.manual_seed(11)
    a = enc(ids, mask).last_hidden_state
    torch.manual_seed(11)
    b = enc(ids, mask).last_hidden_state
    assert_close(a, b, rtol=0, atol=0)
    torch.manual_seed(11)
    draws = {tuple(enc.dropped_layers()) for _ in range(30)}
    assert len(draws) > 1  # the decisions do change from pass to pass


@pytest.mark.parametrize("bad", [-0.1, 1.5, "x", True])
def test_bad_layerdrop_is_refused(bad) -> None:
    with pytest.raises(PtmError, match="layerdrop"):
        replace(CFG, layerdrop=bad)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2, True])
def test_finetune_layerdrop_is_checked(bad) -> None:
    assert FinetuneConfig().layerdrop == 0.0 and FinetuneConfig(layerdrop=0.2).layerdrop == 0.2
    with pytest.raises(PtmError, match="layerdrop"):
        FinetuneConfig(layerdrop=bad)


def test_pretraining_override_reaches_the_encoder() -> None:
    raw = apply_overrides(load_preset("bert-tiny"), ["model.layerdrop=0.2", "model.num_layers=2"])
    enc = build_encoder(raw["model"], special_ids(raw["model"].get("vocab_size", 30522)))
    assert enc.layerdrop == 0.2 and enc.config.layerdrop == 0.2


def test_fine_tuning_with_layerdrop_skips_layers_and_evaluates_whole(tmp_path):
    from conftest import tiny_checkpoint, toy_sentiment

    from ptmkit.pretrained import load_pretrained
    from ptmkit.tasks.finetune import FinetuneConfig, finetune
    from ptmkit.tasks.saved import load_task_model

    task = toy_sentiment(sizes=(64, 20, 20))
    ck = tiny_checkpoint(tmp_path / "m", task.train.texts, layers=4, heads=2)
    seen = []
    pre = load_pretrained(ck, heads=False)
    cfg = FinetuneConfig(epochs=1, lr=1e-3, batch_size=16, max_seq_len=32, layerdrop=0.5)
    original = type(pre.backbone).dropped_layers

    def spy(self):
        skip = original(self)
        seen.append((self.training, skip))
        return skip

    type(pre.backbone).dropped_layers = spy
    try:
        finetune(pre, task, tmp_path / "run", cfg, seed=0, progress=False)
    finally:
        type(pre.backbone).dropped_layers = original
    trained = [s for t, s in seen if t]
    assert trained and any(any(s) for s in trained)  # layers were skipped in training ...
    assert all(s is None for t, s in seen if not t)  # ... and never when scoring dev
    assert load_task_model(tmp_path / "run", task).backbone.layerdrop == 0.0  # a loaded model runs every layer
