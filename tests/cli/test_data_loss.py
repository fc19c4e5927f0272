"""The five ways ``ptm`` used to destroy a user's files, run through the CLI: every input (and
every other file of the user's) must survive with its checksum, and the command must either
succeed without touching them or refuse with a clear message and a non-zero exit.

1. training from text inside the run directory (``--data proj/data/corpus.txt -o proj``)
2. ``--overwrite`` on a run whose prepared corpus is the input (``--data proj/data -o proj``)
3. a static model with ``--overwrite`` on the directory holding its corpus
4. ``ptm prepare`` with ``--overwrite`` on the directory holding its input
5. ``ptm pretrain`` into an existing directory that is not ptm's (an HF model directory)
"""

from __future__ import annotations

from conftest import TINY, W2V, checksums, run_cli, write_corpus

from ptmkit.cli import main


def assert_refused_and_intact(rc, err, before, root, fragment):
    assert rc == 2, err
    assert fragment in err, err
    assert "Traceback" not in err
    assert checksums(root) == before  # every input survives, and nothing was added


def test_1_text_inside_the_run_directory(tmp_path, capsys):
    proj = tmp_path / "proj"
    corpus = write_corpus(proj / "data" / "corpus.txt")
    (proj / "data" / "notes.txt").write_text("my notes\n")
    before = checksums(proj)
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", proj, *TINY], capsys)
    assert_refused_and_intact(rc, err, before, proj, "lies inside the output directory")
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", proj, "--overwrite", *TINY], capsys)
    assert_refused_and_intact(rc, err, before, proj, "lies inside the output directory")


def test_2_overwrite_a_run_whose_corpus_is_the_input(tmp_path, tiny_tokenizer, capsys):
    proj = tmp_path / "proj3"
    text = write_corpus(tmp_path / "text.txt")
    assert main(["prepare", str(text), "-t", str(tiny_tokenizer), "-o", str(proj / "data"), "--workers", "1"]) == 0
    before = checksums(proj)
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", proj / "data", "-o", proj, "--overwrite", *TINY], capsys)
    assert_refused_and_intact(rc, err, before, proj, "lies inside the output directory")
    # The same corpus used from outside works, and leaves it untouched.
    run = tmp_path / "run"
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", proj / "data", "-o", run, *TINY], capsys)
    assert rc == 0, err
    rc, err = run_cli(["pretrain", "bert-tiny", "--data", proj / "data", "-o", run, "--overwrite", *TINY], capsys)
    assert rc == 0, err
    assert checksums(proj) == before


def test_3_static_model_overwrites_the_directory_of_its_corpus(tmp_path, capsys):
    sdir = tmp_path / "sdir"
    corpus = write_corpus(sdir / "in.txt")
    before = checksums(sdir)
    rc, err = run_cli(["pretrain", "word2vec", "--data", corpus, "-o", sdir, "--overwrite", *W2V], capsys)
    assert_refused_and_intact(rc, err, before, sdir, "lies inside the output directory")


def test_4_prepare_overwrites_the_directory_of_its_input(tmp_path, tiny_tokenizer, capsys):
    pdir = tmp_path / "pdir"
    corpus = write_corpus(pdir / "in.txt")
    before = checksums(pdir)
    rc, err = run_cli(["prepare", corpus, "-t", tiny_tokenizer, "-o", pdir, "--overwrite", "--workers", "1"], capsys)
    assert_refused_and_intact(rc, err, before, pdir, "lies inside the output directory")


def test_5_pretrain_into_a_directory_that_is_not_ptms(tmp_path, capsys):
    hf = tmp_path / "hf-model"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert", "hidden_size": 768}\n')
    (hf / "model.safetensors").write_bytes(b"\x08" + b"\0" * 15)
    corpus = write_corpus(tmp_path / "corpus.txt")
    before = checksums(tmp_path)
    for extra in ([], ["--overwrite"]):
        rc, err = run_cli(["pretrain", "bert-tiny", "--data", corpus, "-o", hf, *extra, *TINY], capsys)
        assert_refused_and_intact(rc, err, before, tmp_path, "was not written by ptm")
    for cmd in (["pretrain", "word2vec", "--data", corpus, "-o", hf, "--overwrite", *W2V],):
        rc, err = run_cli(cmd, capsys)
        assert_refused_and_intact(rc, err, before, tmp_path, "was not written by ptm")


def test_overwrite_keeps_the_users_files_in_ptms_own_directories(tmp_path, tiny_tokenizer, capsys):
    """Where ptm may write (its own output), --overwrite replaces only what ptm wrote."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    vec, run, prepared = tmp_path / "vec", tmp_path / "run", tmp_path / "prepared"
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(vec), *W2V]) == 0
    assert main(["pretrain", "bert-tiny", "--data", str(corpus), "-o", str(run), *TINY]) == 0
    assert main(["prepare", str(corpus), "-t", str(tiny_tokenizer), "-o", str(prepared), "--workers", "1"]) == 0
    for d in (vec, run, prepared):
        (d / "notes.txt").write_text(f"my notes on {d.name}\n")
    notes = {d: (d / "notes.txt").read_text() for d in (vec, run, prepared)}
    corpus_sum = checksums(tmp_path)["corpus.txt"]
    assert main(["pretrain", "word2vec", "--data", str(corpus), "-o", str(vec), "--overwrite", *W2V, "dim=4"]) == 0
    assert main(["pretrain", "bert-tiny", "--data", str(corpus), "-o", str(run), "--overwrite", *TINY]) == 0
    assert main(["prepare", str(corpus), "-t", str(tiny_tokenizer), "-o", str(prepared), "--overwrite", "--workers", "1"]) == 0
    for d, text in notes.items():
        assert (d / "notes.txt").read_text() == text
    assert checksums(tmp_path)["corpus.txt"] == corpus_sum
    assert (vec / "vectors.bin").read_bytes().split(b"\n", 1)[0].split()[1] == b"4"  # the new vectors
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step-0000002"]
