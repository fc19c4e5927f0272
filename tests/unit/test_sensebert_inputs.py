"""SenseBERT's supersense-aware input embeddings ``(W + S M) x``: the encoder reads them in
pre-training, ``S`` is trained through the input too, ``[MASK]`` carries no sense, and the
encoder loaded for use (fine-tuning, export, another objective continuing the run) has them
folded in, so it computes exactly what it computed in pre-training."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, run_cli, write_corpus

from ptmkit.objectives.lexicon import read_supersenses
from ptmkit.objectives.sensebert import allowed_table
from ptmkit.pretrained import encoder_for_use, load_pretrained
from ptmkit.train.trainer import TrainerCallback
from ptmkit.workflows.pretrain import pretrain

LEXICON = "the\tnoun.artifact\ncat\tnoun.animal\ndog\tnoun.animal\ndog\tnoun.person\nran\tverb.motion\n" \
          "sat\tverb.contact\nhouse\tnoun.artifact\nhouse\tverb.contact\nred\tadj.all\n"
SMALL = [a for a in TINY if not a.startswith("train.max_steps")] + ["train.log_every=1", "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A SenseBERT run of 3 steps (input senses on, the default)."""
    root = tmp_path_factory.mktemp("sense-in")
    corpus = write_corpus(root / "corpus.txt", docs=20)
    (root / "lexicon.tsv").write_text(LEXICON)
    out = pretrain("sensebert-tiny", corpus, root / "run", [a for a in SMALL if a != "--quiet"] + [
        f"objective.lexicon={root}/lexicon.tsv", "train.max_steps=3"], verbose=False)
    return root, corpus, out


def batch_of(tokenizer, texts=("the dog ran to the red house", "a cat sat")):
    enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def test_the_encoder_reads_w_plus_s_m(run):
    root, _, out = run
    pre = load_pretrained(out, heads=True)
    objective, backbone = pre.objective, pre.backbone
    senses, names = read_supersenses(root / "lexicon.tsv")
    allowed = torch.from_numpy(allowed_table(pre.tokenizer, objective.vocab_size, senses, names)).double()
    S = objective.sense_head.supersenses.detach().double()
    offsets = objective.input_embedding_offsets().detach().double()
    assert torch.allclose(offsets, allowed @ S, atol=1e-6)  # each entry: the sum of its allowed senses' S rows
    dog = pre.tokenizer.token_to_id("dog")
    want = S[names.index("noun.animal")] + S[names.index("noun.person")]
    assert torch.allclose(offsets[dog], want, atol=1e-6)
    for special in ("[MASK]", "[CLS]", "[PAD]"):  # a masked word's senses never reach the input
        assert not offsets[pre.tokenizer.token_to_id(special)].any()

    batch = batch_of(pre.tokenizer)
    with torch.no_grad():
        h = objective.encode(backbone, batch)
        plain = backbone(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        table = backbone.input_embeddings().weight
        saved = table.detach().clone()
        table[: offsets.shape[0]] += offsets.float()
        by_hand = backbone(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        table.copy_(saved)
    assert torch.allclose(h, by_hand, atol=1e-5)
    assert not torch.allclose(h, plain, atol=1e-3)  # the offsets change what the encoder computes
    # the MLM head still predicts with W: the tied output layer is the encoder's own table
    assert torch.equal(backbone.output_embeddings(), saved)


def test_s_learns_through_the_input(run):
    """With the supersense loss weighted 0, S still gets a gradient: it is in the input."""
    _, _, out = run
    pre = load_pretrained(out, heads=True)
    objective = pre.objective
    object.__setattr__(objective.cfg, "sense_weight", 0.0)
    h = objective.encode(pre.backbone, batch_of(pre.tokenizer))
    h.sum().backward()
    grad = objective.sense_head.supersenses.grad
    assert grad is not None and grad.abs().sum() > 0


def test_the_encoder_for_use_computes_what_pretraining_computed(run, tmp_path, capsys):
    root, corpus, out = run
    with_heads = load_pretrained(out, heads=True)
    alone = load_pretrained(out, heads=False)
    batch = batch_of(with_heads.tokenizer)
    with torch.no_grad():
        want = with_heads.objective.encode(with_heads.backbone, batch)
        got = alone.backbone(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        exported = encoder_for_use(with_heads).backbone(batch["input_ids"],
                                                         attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(exported, want, atol=1e-5)
    # encoder_for_use leaves the model with heads as it was (no offsets added twice)
    again = with_heads.objective.encode(with_heads.backbone, batch)
    assert torch.allclose(again, want, atol=1e-6)

    # another objective continuing the run starts from the encoder as the run uses it
    class Start(TrainerCallback):
        def on_fit_start(self, trainer) -> None:
            self.state = {k: v.detach().clone() for k, v in trainer.model.backbone.state_dict().items()}

    start = Start()
    mlm = pretrain("bert-tiny", corpus, tmp_path / "mlm", ["objective.nsp=false", "train.max_steps=1"],
                   init_from=out, callbacks=[start], verbose=False)
    cont = load_pretrained(mlm, heads=False)
    cont.backbone.load_state_dict(start.state)  # the encoder at step 0
    with torch.no_grad():
        cont_h = cont.backbone(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.allclose(cont_h, want, atol=1e-5)


def test_input_senses_off_is_the_loss_only_variant(run, tmp_path):
    root, corpus, _ = run
    off = pretrain("sensebert-tiny", corpus, tmp_path / "off", [a for a in SMALL if a != "--quiet"] + [
        f"objective.lexicon={root}/lexicon.tsv", "objective.input_senses=false", "train.max_steps=2"], verbose=False)
    with_heads = load_pretrained(off, heads=True)
    alone = load_pretrained(off, heads=False)
    assert with_heads.objective.input_embedding_offsets() is None
    assert torch.equal(alone.backbone.input_embeddings().weight, with_heads.backbone.input_embeddings().weight)
    assert with_heads.objective.exported_heads() == ("mlm",)


def test_an_hf_export_is_the_folded_encoder(run, tmp_path, capsys):
    """HF BERT ties its input and output word embeddings, so the export is the folded encoder
    without the MLM head, and computes what pre-training computed."""
    transformers = pytest.importorskip("transformers")
    _, _, out = run
    rc, err = run_cli(["export", out, "-o", tmp_path / "hf"], capsys)
    assert rc == 0, err
    with_heads = load_pretrained(out, heads=True)
    batch = batch_of(with_heads.tokenizer)
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        want = with_heads.objective.encode(with_heads.backbone, batch)
        got = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    mask = batch["attention_mask"].bool()
    assert torch.allclose(got[mask], want[mask], atol=1e-4)
