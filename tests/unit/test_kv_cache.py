"""The key/value cache's stores: new positions are written in place while they fit, the storage
grows when full and stops at the model's positions, and a cache extended twice (two branches from
one prefix) keeps each branch's keys and values its own.  References: one causal pass over the
whole sequence (float64), and ``torch.cat`` of the same tensors."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch.testing import assert_close

from ptmkit.encoders import TransformerConfig, TransformerEncoder
from ptmkit.nn.kv_cache import MIN_ROOM, KVCache, KVSlot, KVStore, extend

V = 40
GPT = TransformerConfig(
    vocab_size=V, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position=160,
    type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5, embedding_norm=False,
    pooler=False, dropout=0.0, attention_dropout=0.0,
)


def gpt(cfg: TransformerConfig = GPT) -> TransformerEncoder:
    torch.manual_seed(0)
    return TransformerEncoder(cfg).to(torch.float64).eval()


def kv(B: int, T: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, 2, T, 4, generator=g), torch.randn(B, 2, T, 4, generator=g)


def test_a_store_appends_what_concatenation_gives_and_grows_when_full():
    first = kv(3, 5, 0)
    store = KVStore(first)
    storage = store.k.data_ptr()
    expect, got = first, None
    for step in range(MIN_ROOM + 10):  # past the first storage's room
        new = kv(3, 1, step + 1)
        expect = tuple(torch.cat([e, n], dim=2) for e, n in zip(expect, new))
        got = store.append(store.filled, new)
        if step + 1 == MIN_ROOM:  # exactly full: still the first storage, written in place
            assert store.k.data_ptr() == storage
    assert store.k.data_ptr() != storage  # grown once full
    assert torch.equal(got[0], expect[0]) and torch.equal(got[1], expect[1])
    assert store.append(3, kv(3, 1, 99)) is None  # positions after 3 are written: refused, not overwritten
    assert torch.equal(store.k[:, :, : store.filled], expect[0])


def test_extend_concatenates_plain_tensors_and_writes_through_slots():
    past, new = kv(2, 4, 0), kv(2, 2, 1)
    cat = extend(past, new)
    slot = KVSlot(past, None)
    through = extend(slot, new)
    assert torch.equal(cat[0], through[0]) and torch.equal(cat[1], through[1])
    assert slot.store is not None and slot.store.filled == 6
    assert extend(None, new) is new


def test_decoding_writes_in_place_and_equals_one_causal_pass():
    model = gpt()
    ids = torch.randint(5, V, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids, causal=True).last_hidden_state
        out = model(ids[:, :8], causal=True, cache=model.start_cache())
        cache, parts = out.extras["cache"], [out.last_hidden_state]
        storage = cache.stores[0].k.data_ptr()
        for t in range(8, 40):
            out = model(ids[:, t : t + 1], causal=True, cache=cache)
            cache = out.extras["cache"]
            parts.append(out.last_hidden_state)
    assert cache.stores[0].k.data_ptr() == storage  # 32 steps fit the room made at the prompt
    assert cache.kv[0][0].shape == (2, 2, 40, 8)
    assert_close(torch.cat(parts, dim=1), full, rtol=1e-10, atol=1e-10)


def test_two_branches_from_one_prefix_keep_their_own_keys():
    model = gpt()
    ids = torch.randint(5, V, (2, 12), generator=torch.Generator().manual_seed(2))
    a, b = ids[:, 10:11], (ids[:, 10:11] + 1) % V
    with torch.no_grad():
        prefix = model(ids[:, :10], causal=True, cache=model.start_cache()).extras["cache"]
        out_a = model(a, causal=True, cache=prefix)
        out_b = model(b, causal=True, cache=prefix)  # the prefix extended a second time
        next_a = model(ids[:, 11:12], causal=True, cache=out_a.extras["cache"])  # branch a goes on
        ref_a = model(torch.cat([ids[:, :10], a, ids[:, 11:12]], dim=1), causal=True).last_hidden_state
        ref_b = model(torch.cat([ids[:, :10], b], dim=1), causal=True).last_hidden_state
    assert_close(out_a.last_hidden_state[:, 0], ref_a[:, 10], rtol=1e-10, atol=1e-10)
    assert_close(next_a.last_hidden_state[:, 0], ref_a[:, 11], rtol=1e-10, atol=1e-10)
    assert_close(out_b.last_hidden_state[:, 0], ref_b[:, 10], rtol=1e-10, atol=1e-10)


def test_selected_rows_and_the_position_limit():
    model = gpt(replace(GPT, max_position=20))
    ids = torch.randint(5, V, (3, 20), generator=torch.Generator().manual_seed(3))
    rows = torch.tensor([2, 0, 0])
    with torch.no_grad():
        cache = model(ids[:, :12], causal=True, cache=model.start_cache()).extras["cache"]
        assert cache.stores[0].k.shape[2] == 20  # room up to the model's 20 positions, not MIN_ROOM beyond
        cache = cache.select(rows)  # beam search's reorder: fresh tensors, a store made at the next step
        for t in range(12, 20):
            out = model(ids[rows, t : t + 1], causal=True, cache=cache)
            cache = out.extras["cache"]
        ref = model(ids[rows], causal=True).last_hidden_state
    assert_close(out.last_hidden_state[:, 0], ref[:, -1], rtol=1e-10, atol=1e-10)
    assert isinstance(cache, KVCache) and cache.length == 20
