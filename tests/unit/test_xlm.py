"""Multilingual pre-training: tokenizer languages and XLM's balanced counts, per-language and
parallel corpora, language sampling, and the XLM objective's TLM examples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli

from ptmkit.build import build_model, resolve_config
from ptmkit.config import apply_overrides
from ptmkit.data.blend import BlendedBatches, join_corpora, member_spans, parse_weights
from ptmkit.data.parallel import prepare_parallel, read_pairs
from ptmkit.data.prepare import prepare
from ptmkit.errors import PtmError
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.presets import load_preset
from ptmkit.tokenization import Tokenizer
from ptmkit.tokenization.languages import balanced_shares
from ptmkit.tokenization.training import balanced_counts, count_words
from ptmkit.workflows.rundir import INPUTS_FILE

EN = ["the house is big and old", "the book is red", "a dog runs home quickly", "the cat sleeps all day",
      "my friend reads a long book", "the river runs to the sea"]
ES = ["la casa es grande y vieja", "el libro es rojo", "un perro corre a casa", "el gato duerme todo el dia",
      "mi amigo lee un libro largo", "el rio corre al mar"]
NY = ["nyumba ndi yaikulu", "buku ndi lofiira", "galu akuthamanga kunyumba"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("xlm")
    rng = np.random.default_rng(0)
    for code, lines, n in (("en", EN, 600), ("es", ES, 150), ("ny", NY, 30)):
        picked = [lines[i] for i in rng.integers(len(lines), size=n)]
        (root / f"{code}.txt").write_text("\n".join(picked) + "\n", encoding="utf-8")
    with open(root / "en-es.jsonl", "w", encoding="utf-8") as f:
        for k in range(60):
            f.write(json.dumps({"ref": f"v{k}", "en": EN[k % 6], "es": ES[k % 6]}) + "\n")
    tok = Tokenizer.train([root / "en.txt", root / "es.txt", root / "ny.txt"], "wordpiece", 200,
                          languages=["en", "es", "ny"], alpha=0.5)
    tok.save(root / "tok.json")
    for code in ("en", "es", "ny"):
        prepare([root / f"{code}.txt"], root / "tok.json", root / f"c-{code}", workers=1, progress=False, language=code)
    prepare_parallel([root / "en-es.jsonl"], ["en", "es"], root / "tok.json", root / "par", workers=1, progress=False)
    return root


def test_tokenizer_records_its_languages_in_order(data):
    tok = Tokenizer.load(data / "tok.json")
    assert tok.languages == ("en", "es", "ny")
    assert [tok.id_to_token(i) for i in tok.language_ids] == ["<lang_en>", "<lang_es>", "<lang_ny>"]
    assert set(tok.language_ids) <= tok.special_ids
    assert "languages='en,es,ny'" in repr(tok)


def test_balanced_shares_follow_xlm_formula():
    sizes = [900.0, 90.0, 10.0]
    for alpha in (0.0, 0.3, 0.5, 1.0):
        p = np.array(sizes) / sum(sizes)
        want = p ** alpha / (p ** alpha).sum()
        np.testing.assert_allclose(balanced_shares(sizes, alpha), want, rtol=1e-12)
    np.testing.assert_allclose(balanced_shares(sizes, 0.0), [1 / 3] * 3)
    with pytest.raises(PtmError, match=r"\[0, 1\]"):
        balanced_shares(sizes, 1.5)


def test_balanced_counts_scale_each_language_by_q_over_p(data):
    tok = Tokenizer.load(data / "tok.json")
    codes = ("en", "es", "ny")
    files = [str(data / f"{c}.txt") for c in codes]
    own = {c: dict(zip(*count_words(tok.backend, [f]))) for c, f in zip(codes, files)}
    totals = np.array([sum(own[c].values()) for c in codes], dtype=float)
    p = totals / totals.sum()
    for alpha in (0.0, 0.5, 1.0):
        words, counts, q = balanced_counts(tok.backend, files, list(codes), alpha)
        np.testing.assert_allclose([q[c] for c in codes], balanced_shares(totals, alpha))
        got = dict(zip(words, counts.tolist()))
        for w in got:  # a word's weighted count sums its languages' scaled counts
            want = sum(max(round(own[c][w] * q[c] / p[i]), 1) for i, c in enumerate(codes) if w in own[c])
            assert got[w] == want, (alpha, w)
        mass = {c: sum(got[w] for w in own[c] if all(w not in own[o] for o in codes if o != c)) for c in codes}
        if alpha == 0.0:  # equal shares: the languages' own words weigh alike (up to words they share)
            assert max(mass.values()) / min(mass.values()) < 1.1, mass


def test_language_sampling_frequencies_match_q(data):
    corpus = join_corpora([data / "c-en", data / "c-es", data / "c-ny"])
    tok = Tokenizer.load(data / "tok.json")
    cfg = resolve_config(apply_overrides(load_preset("mbert-tiny"), ["train.seq_len=16"]), tok)
    model = build_model(cfg, tok)
    parts = member_spans(model.objective, corpus, 16)
    spans = np.concatenate(parts)
    sizes = [m.n_tokens for m in corpus.members]
    weights = parse_weights("alpha=0.5", 3, sizes)
    np.testing.assert_allclose(weights, balanced_shares(sizes, 0.5))
    batches = BlendedBatches(corpus, model.objective, spans, [len(p) for p in parts], weights, seq_len=16,
                             batch_size=8, seed=3)
    got = sum(batches.epoch_shares(e) for e in range(3)).astype(float)
    np.testing.assert_allclose(got / got.sum(), weights, atol=0.01)


def _xlm(data: Path, *overrides: str):
    tok = Tokenizer.load(data / "tok.json")
    overrides = ("train.seq_len=32", "model.max_position=64", *overrides)
    cfg = resolve_config(apply_overrides(load_preset("xlm-tiny"), list(overrides)), tok)
    return build_model(cfg, tok), tok


def test_tlm_masks_both_halves_and_restarts_positions(data):
    model, tok = _xlm(data, "objective.max_predictions=null")
    corpus = join_corpora([data / "c-en", data / "c-es", data / "par"])
    parts = member_spans(model.objective, corpus, 32)
    pairs = parts[2]
    assert len(pairs) == 60
    rng = np.random.default_rng(0)
    first = second = masked_first = masked_second = 0
    for _ in range(40):
        batch = model.objective.collate(corpus, pairs, rng)
        assert bool(batch["tlm"].all())
        types, pos = batch["token_type_ids"], batch["position_ids"]
        for i in range(len(pairs)):
            length = int(batch["attention_mask"][i].sum())
            seps = (batch["input_ids"][i, :length] == tok.sep_id).nonzero().flatten().tolist()
            cut = seps[0] + 1  # [CLS] A [SEP] | B [SEP]
            assert types[i, :cut].tolist() == [0] * cut and types[i, cut:length].tolist() == [1] * (length - cut)
            assert pos[i, :cut].tolist() == list(range(cut))
            assert pos[i, cut:length].tolist() == list(range(1, length - cut + 1))
            chosen = batch["mlm_positions"][i][batch["mlm_labels"][i] != IGNORE_INDEX]
            masked_first += int(((chosen >= 1) & (chosen < cut - 1)).sum())
            masked_second += int(((chosen >= cut) & (chosen < length - 1)).sum())
            first += cut - 2
            second += length - cut - 1
    assert abs(masked_first / first - 0.15) < 0.03 and abs(masked_second / second - 0.15) < 0.03


def test_pairs_keep_their_references_together(data):
    model, tok = _xlm(data)
    corpus = join_corpora([data / "c-en", data / "par"])
    pairs = member_spans(model.objective, corpus, 32)[1]
    batch = model.objective.collate(corpus, pairs[:6], np.random.default_rng(1))
    original = batch["input_ids"].clone()
    rows, slots = (batch["mlm_labels"] != IGNORE_INDEX).nonzero(as_tuple=True)
    original[rows, batch["mlm_positions"][rows, slots]] = batch["mlm_labels"][rows, slots]  # undo the masking
    for i in range(6):  # pair k holds EN[k % 6] and its own translation ES[k % 6], never another verse's
        ids = [int(t) for t in original[i] if int(t) not in tok.special_ids and int(t) != tok.pad_id]
        assert tok.decode(ids) == f"{EN[i]} {ES[i]}"


def test_mixed_batch_types_follow_each_examples_language(data):
    model, tok = _xlm(data)
    corpus = join_corpora([data / "c-en", data / "c-es", data / "c-ny", data / "par"])
    parts = member_spans(model.objective, corpus, 32)
    spans = np.concatenate([parts[0][:2], parts[1][:2], parts[2][:2], parts[3][:2]])
    batch = model.objective.collate(corpus, spans, np.random.default_rng(2))
    assert batch["tlm"].tolist() == [False] * 6 + [True] * 2
    for i, lang in enumerate([0, 0, 1, 1, 2, 2]):
        length = int(batch["attention_mask"][i].sum())
        assert set(batch["token_type_ids"][i, :length].tolist()) == {lang}
    out = model(batch)
    assert torch.isfinite(out.loss)


def test_language_embeddings_off_leaves_types_zero(data):
    model, _ = _xlm(data, "objective.language_embeddings=false")
    corpus = join_corpora([data / "c-es", data / "par"])
    parts = member_spans(model.objective, corpus, 32)
    batch = model.objective.collate(corpus, np.concatenate([parts[0][:2], parts[1][:2]]), np.random.default_rng(0))
    assert int(batch["token_type_ids"].abs().sum()) == 0


def test_tlm_without_parallel_data_is_refused(data):
    model, _ = _xlm(data)
    corpus = join_corpora([data / "c-en", data / "c-es"])
    spans = np.concatenate(member_spans(model.objective, corpus, 32))
    with pytest.raises(PtmError, match="--parallel en,es"):
        model.objective.collate(corpus, spans[:4], np.random.default_rng(0))


def test_corpus_without_language_is_refused(data, tmp_path):
    prepare([data / "en.txt"], data / "tok.json", tmp_path / "plain", workers=1, progress=False)
    model, _ = _xlm(data, "objective.tlm=false")
    corpus = join_corpora([tmp_path / "plain", data / "c-es"])
    spans = np.concatenate(member_spans(model.objective, corpus, 32))
    with pytest.raises(PtmError, match="--language CODE"):
        model.objective.collate(corpus, spans[:4], np.random.default_rng(0))


def test_language_missing_from_tokenizer_is_refused(data, tmp_path):
    with pytest.raises(PtmError, match="not among the tokenizer's training languages"):
        prepare([data / "en.txt"], data / "tok.json", tmp_path / "fr", workers=1, progress=False, language="fr")
    mono = Tokenizer.train([data / "en.txt"], "wordpiece", 100)
    with pytest.raises(PtmError, match="several languages"):  # language embeddings need the tokenizer's languages
        build_model(resolve_config(load_preset("xlm-tiny"), mono, []), mono)


def test_a_tokenizer_without_languages_takes_tlm_without_language_embeddings(data, tmp_path):
    """Continued pre-training of an English model: its tokenizer records no languages, the codes are labels."""
    mono = Tokenizer.train([data / "en.txt", data / "es.txt"], "wordpiece", 120)
    corpus = prepare([data / "es.txt"], mono, tmp_path / "es", workers=1, progress=False, language="es")
    assert corpus.meta["language"] == "es"
    prepare([data / "en.txt"], mono, tmp_path / "en", workers=1, progress=False)  # no language at all
    prepare_parallel([data / "en-es.jsonl"], ["en", "es"], mono, tmp_path / "par", workers=1, progress=False)
    raw = apply_overrides(load_preset("mbert-tiny"), ["objective.tlm=true", "train.seq_len=32", "model.max_position=64"])
    model = build_model(resolve_config(raw, mono), mono)
    joined = join_corpora([tmp_path / "en", tmp_path / "es", tmp_path / "par"])
    parts = member_spans(model.objective, joined, 32)
    batch = model.objective.collate(joined, np.concatenate([parts[0][:2], parts[1][:2], parts[2][:2]]),
                                    np.random.default_rng(0))
    assert batch["tlm"].tolist() == [False] * 4 + [True] * 2 and "token_type_ids" in batch
    assert torch.isfinite(model(batch).loss)


def test_unequal_pair_files_name_both_counts(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("uno\ndos\n", encoding="utf-8")
    with pytest.raises(PtmError, match=r"a.txt has 3 lines but .*b.txt 2"):
        list(read_pairs([tmp_path / "a.txt", tmp_path / "b.txt"], ["en", "es"]))


def test_unaligned_references_name_the_line(tmp_path):
    rows_a = [{"ref": "Gen.1.1", "text": "in the beginning"}, {"ref": "Gen.1.2", "text": "and the earth"}]
    rows_b = [{"ref": "Gen.1.1", "text": "en el principio"}, {"ref": "Gen.1.3", "text": "y dijo dios"}]
    for name, rows in (("a.jsonl", rows_a), ("b.jsonl", rows_b)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(PtmError, match=r"line 2 of .*a.jsonl is 'Gen.1.2' but line 2 of .*b.jsonl is 'Gen.1.3'"):
        list(read_pairs([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], ["en", "es"]))


def test_an_empty_side_is_refused_with_its_line(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"en": "hello", "es": "hola"}) + "\n"
                                      + json.dumps({"en": "bye", "es": "  "}) + "\n", encoding="utf-8")
    with pytest.raises(PtmError, match=r"line 2 \(es\): the text is empty"):
        list(read_pairs([tmp_path / "p.jsonl"], ["en", "es"]))


def test_parallel_corpus_records_pairs(data):
    meta = json.loads((data / "par" / "meta.json").read_text())
    assert meta["parallel"] == ["en", "es"] and meta["pairs"] == 60 and meta["n_documents"] == 60
    assert meta["sources"][0]["path"].endswith("en-es.jsonl")


def test_cli_trains_languages_and_pretrains_xlm(data, tmp_path, capsys):
    code, err = run_cli(["tokenizer", "train", str(data / "en.txt"), str(data / "es.txt"), "--languages", "en",
                         "-o", str(tmp_path / "t.json")], capsys)
    assert code == 2 and "names 1 language(s) for 2 file(s)" in err
    code, _ = run_cli(["pretrain", "xlm-tiny", "--data", str(data / "c-en"), str(data / "c-es"), str(data / "par"),
                       "--data-weights", "alpha=0.5", "-o", str(tmp_path / "run"), "train.max_steps=4",
                       "train.batch_size=8", "train.seq_len=32", "model.max_position=64", "train.warmup_steps=1",
                       "-q"], capsys)
    assert code == 0
    record = json.loads((tmp_path / "run" / INPUTS_FILE).read_text())
    sizes = [json.loads((data / c / "meta.json").read_text())["n_tokens"] for c in ("c-en", "c-es", "par")]
    np.testing.assert_allclose(record["data_weights"], balanced_shares(sizes, 0.5))  # resolved once, resumable
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_relative_bias_reads_the_restarted_positions():
    from ptmkit.nn.positions import RelativePositionBias

    torch.manual_seed(0)
    rel = RelativePositionBias(num_heads=2, num_buckets=8, max_distance=16)
    T = 7
    plain = rel(T, T, bidirectional=True)
    np.testing.assert_allclose(rel.at(torch.arange(T)[None], bidirectional=True).detach(), plain.detach())
    restarted = torch.tensor([[0, 1, 2, 3, 1, 2, 3]])  # [CLS] a a [SEP] | b b [SEP]
    bias = rel.at(restarted, bidirectional=True)[0]
    np.testing.assert_allclose(bias[:, 1, 4].detach(), plain[0, :, 0, 0].detach())  # offset 0: aligned tokens
    np.testing.assert_allclose(bias[:, 6, 0].detach(), plain[0, :, 3, 0].detach())  # offset -3


def test_xlm_with_relative_positions_feeds_the_restarted_offsets(data):
    model, _ = _xlm(data, "model.positions=relative")
    corpus = join_corpora([data / "c-en", data / "par"])
    parts = member_spans(model.objective, corpus, 32)
    batch = model.objective.collate(corpus, parts[1][:4], np.random.default_rng(0))
    out = model(batch)
    assert torch.isfinite(out.loss)
    backbone = model.backbone.eval()
    a = backbone(batch["input_ids"], batch["attention_mask"], position_ids=batch["position_ids"]).last_hidden_state
    b = backbone(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    assert not torch.allclose(a, b)  # the restarted positions change what the bias adds
