"""Knowledge distillation: the losses against float64 references, layer maps, students built from a
teacher, and ``ptm distil`` end to end (a student that reloads, an exact resume, bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import fine_tuned_toy, run_cli, task_file_args, tiny_checkpoint, toy_sentiment

from ptmkit.compress.losses import attention_mse, cosine_loss, hidden_mse, layer_map, soft_cross_entropy
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained
from ptmkit.tasks.finetune import FinetuneConfig, finetune
from ptmkit.tasks.saved import load_task_model


def test_soft_cross_entropy_is_hintons_formula_in_float64():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    for temp in (1.0, 2.0, 4.0):
        p_t = np.exp(t.double().numpy() / temp)
        p_t /= p_t.sum(1, keepdims=True)
        log_p_s = s.double().numpy() / temp - np.log(np.exp(s.double().numpy() / temp).sum(1, keepdims=True))
        want = -(p_t * log_p_s).sum(1).mean() * temp**2
        assert float(soft_cross_entropy(s, t, temp)) == pytest.approx(want, rel=1e-5)
    # its minimum over the student is the teacher itself: the gradient vanishes at s = t
    s = t.clone().requires_grad_(True)
    soft_cross_entropy(s, t, 3.0).backward()
    assert s.grad.abs().max() < 1e-6


def test_intermediate_losses_count_only_real_tokens():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 4, generator=g)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    real = mask.bool().numpy()
    want = ((a.double().numpy() - b.double().numpy()) ** 2)[real].mean()
    assert float(hidden_mse(a, b, mask)) == pytest.approx(want, rel=1e-6)
    b2 = b.clone()
    b2[0, 2] += 100  # a padded position changes nothing
    assert float(hidden_mse(a, b2, mask)) == pytest.approx(want, rel=1e-6)
    x, y = a.double().numpy()[real], b.double().numpy()[real]
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    assert float(cosine_loss(a, b, mask)) == pytest.approx((1 - cos).mean(), rel=1e-5)
    att_s = torch.softmax(torch.randn(2, 2, 3, 3, generator=g), -1)
    att_t = torch.softmax(torch.randn(2, 2, 3, 3, generator=g), -1)
    pair = real[:, :, None] & real[:, None, :]
    d = (att_s.double().numpy() - att_t.double().numpy()) ** 2
    assert float(attention_mse(att_s, att_t, mask)) == pytest.approx(d.transpose(1, 0, 2, 3)[:, pair].mean(), rel=1e-6)
    # other head counts: the maps averaged over heads
    one = att_t.mean(1, keepdim=True)
    assert float(attention_mse(att_s, one, mask)) == pytest.approx(float(attention_mse(att_s.mean(1, keepdim=True), one, mask)))


def test_layer_maps():
    assert layer_map("uniform", 3, 6) == {1: 2, 2: 4, 3: 6}
    assert layer_map("last", 2, 6) == {1: 5, 2: 6}
    assert layer_map("1:3,2:6", 2, 6) == {1: 3, 2: 6}
    with pytest.raises(PtmError, match="teacher has layers 1 .. 6"):
        layer_map("1:7", 2, 6)
    with pytest.raises(PtmError, match="student:teacher pairs"):
        layer_map("middle", 2, 6)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    torch.set_num_threads(1)
    task = toy_sentiment()
    root = tmp_path_factory.mktemp("distil")
    fine_tuned_toy(root, task, "teacher", epochs=3, layers=2, heads=4)
    return root, task_file_args(task, root)


def _distil(teacher, capsys, out, *extra):
    """``ptm distil`` of the toy teacher, without the small-data defaults (augmentation, labels-only
    twins) unless ``extra`` turns them on: these tests count the examples and the teacher's calls."""
    root, files = teacher
    return run_cli(["distil", root / "teacher", *files, "-o", out, "--layers", "1", "epochs=2", "lr=3e-3",
                    "batch_size=16", "max_seq_len=32", "--quiet", "--augment", "off", "--labels-only", "off", *extra],
                   capsys)


def test_distil_a_one_layer_student_that_reloads(teacher, tmp_path, capsys):
    rc, err = _distil(teacher, capsys, tmp_path / "d", "--hidden", "1", "--attention", "1")
    assert rc == 0, err
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["parameter_ratio"] < 0.7
    run = tmp_path / "d" / "student-seed0"
    result = json.loads((run / "results.json").read_text())
    assert result["compression"]["method"] == "distillation" and result["derived_from"]["teacher"]["run"]
    info = json.loads((run / "task_model.json").read_text())
    assert info["config"]["model"]["num_layers"] == 1
    tm = load_task_model(run, load_task_model(teacher[0] / "teacher", _task(teacher)).task_data)
    assert tm.evaluate("test")["accuracy"] == pytest.approx(result["test"]["accuracy"])


def _task(teacher):
    from ptmkit.tasks.base import read_task_files

    files = teacher[1]
    return read_task_files(None, files[1], files[3], files[5])


class Killed(Exception):
    pass


def test_distil_resumes_exactly(teacher, tmp_path, capsys, monkeypatch):
    from ptmkit.compress.distil import DistilSettings
    from ptmkit.compress.students import StudentSpec
    from ptmkit.tasks import callbacks
    from ptmkit.workflows.distil import distil

    cfg = FinetuneConfig(epochs=3, lr=3e-3, batch_size=16, max_seq_len=32)
    task = _task(teacher)
    args = dict(student=StudentSpec("layers", (1,)), settings=DistilSettings(hidden=1.0), cfg=cfg,
                load_data=lambda: task, progress=False, augment="off", labels_only="off")
    full = distil(teacher[0] / "teacher", tmp_path / "full", **args)["runs"][0]
    original = callbacks.DevSelection.on_step_end

    def killed_in_epoch_two(self, trainer, step):
        original(self, trainer, step)
        if step > trainer.cfg.max_steps // 3 + 2:
            raise Killed

    monkeypatch.setattr(callbacks.DevSelection, "on_step_end", killed_in_epoch_two)
    with pytest.raises(Killed):
        distil(teacher[0] / "teacher", tmp_path / "cut", **args)
    monkeypatch.undo()
    assert (tmp_path / "cut" / "student-seed0" / "checkpoints").is_dir()
    resumed = distil(teacher[0] / "teacher", tmp_path / "cut", resume=True, **args)["runs"][0]
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    with pytest.raises(PtmError, match="other settings"):
        distil(teacher[0] / "teacher", tmp_path / "cut", resume=True, **{**args, "settings": DistilSettings(hidden=2.0)})


def test_the_teachers_logits_are_computed_once_and_kept_on_disk(teacher, tmp_path, capsys, monkeypatch):
    """Every seed after the first reads the cached logits back (checked against one batch of the teacher)."""
    from ptmkit.compress import distil as kd

    calls = []
    original = kd.teacher_logits
    monkeypatch.setattr(kd, "teacher_logits", lambda model, collate, n, **kw: calls.append(n) or original(model, collate, n, **kw))
    rc, err = _distil(teacher, capsys, tmp_path / "d", "--seeds", "0", "1")
    assert rc == 0, err
    assert calls == [160, 64] and (tmp_path / "d" / kd.CACHE_FILE).is_file()
    # logits of another teacher are not taken for this one's: the first batch differs, all are recomputed
    cache = tmp_path / "d" / kd.CACHE_FILE
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(cache), "pt") as f:
        key = f.metadata()["key"]  # the teacher's weights and the encoded examples, by content
    stored = load_file(str(cache))
    save_file({"logits": stored["logits"] + 1.0, "lengths": stored["lengths"]}, str(cache), metadata={"key": key})
    calls.clear()
    model = load_task_model(teacher[0] / "teacher", _task(teacher)).model
    rows = kd.cached_teacher_logits(model, _collate(teacher), 160, tmp_path / "d", key)
    assert calls == [64, 160] and torch.allclose(torch.cat(rows), stored["logits"], atol=1e-5)
    # other examples (the same count, the first batch alike) have another key: recomputed whole
    calls.clear()
    kd.cached_teacher_logits(model, _collate(teacher), 160, tmp_path / "d", "another key")
    assert calls == [160]
    tm = load_task_model(teacher[0] / "teacher", _task(teacher))
    train = tm.task.encode("train")
    assert kd.logits_key(model, train) == key  # the key the distillation stored is recomputed exactly


def _collate(teacher):
    """The collate of the teacher's training batches (as distillation reads them)."""
    tm = load_task_model(teacher[0] / "teacher", _task(teacher))
    return tm.task.batches(tm.task.encode("train"), 0).collate


def test_bad_student_settings_are_refused(teacher, tmp_path, capsys):
    rc, err = _distil(teacher, capsys, tmp_path / "a", "--layer-map", "1:9", "--hidden", "1")
    assert rc == 2 and "the teacher has layers 1 .. 2" in err
    root, files = teacher
    rc, err = run_cli(["distil", root / "teacher", *files, "-o", tmp_path / "b", "--student", "transformer",
                       "student.hidden_size=64", "student.num_heads=4", "student.intermediate_size=64",
                       "--hidden", "1", "--projection", "off", "epochs=1", "--quiet", "--augment", "off"], capsys)
    assert rc == 2 and "projection=auto" in err
    other = tiny_checkpoint(tmp_path / "other", ["some other words entirely", "a different vocabulary here"])
    rc, err = run_cli(["distil", root / "teacher", *files, "-o", tmp_path / "c", "--student", "pretrained",
                       "--student-from", other, "epochs=1", "--quiet", "--augment", "off"], capsys)
    assert rc == 2 and "must share one" in err


def test_theseus_replaces_modules_on_a_curriculum_and_leaves_the_successor(teacher, tmp_path, capsys):
    from ptmkit.compress.theseus import modules_of

    assert modules_of(6, 3) == [[0, 1], [2, 3], [4, 5]] and modules_of(5, 2) == [[0, 1], [2, 3, 4]]
    with pytest.raises(PtmError, match="give 1 .. 6"):
        modules_of(6, 7)
    rc, err = _distil(teacher, capsys, tmp_path / "t", "--theseus", "--replace-rate", "0.5", "--replace-full-at", "0.5")
    assert rc == 0, err
    run = tmp_path / "t" / "student-seed0"
    result = json.loads((run / "results.json").read_text())
    assert result["compression"]["method"] == "theseus"
    assert json.loads((run / "task_model.json").read_text())["config"]["model"]["num_layers"] == 1
    rates = [json.loads(line).get("replacement_rate") for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r for r in rates if r is not None]
    assert rates == sorted(rates) and rates[0] < 1.0 and rates[-1] == 1.0
    # module replacing needs the teacher's own layers and the task's own data: refused before anything is written
    for extra in (["--student", "bilstm"], ["--augment", "2"]):
        rc, err = _distil(teacher, capsys, tmp_path / "refused", "--theseus", *extra)
        assert rc != 0 and "module replacing trains successor layers" in err and not (tmp_path / "refused").exists()


def test_a_bilstm_student_starts_from_the_teachers_embeddings(teacher, tmp_path, capsys):
    from ptmkit.compress.students import StudentSpec, build_student

    tm = load_task_model(teacher[0] / "teacher", _task(teacher))
    student = build_student(tm, StudentSpec("bilstm"), seed=0)
    assert student.backbone.name == "lstm"
    assert torch.equal(student.backbone.input_embeddings().weight, tm.backbone.input_embeddings().weight)
    narrow = build_student(tm, StudentSpec("bilstm", config=(("hidden_size", 16),)), seed=0)
    assert narrow.backbone.input_embeddings().weight.shape[1] == 16
    rc, err = _distil(teacher, capsys, tmp_path / "b", "--student", "bilstm", "student.hidden_size=16", "lr=1e-2")
    assert rc == 0, err
    info = json.loads((tmp_path / "b" / "student-seed0" / "task_model.json").read_text())
    assert info["config"]["model"]["encoder"] == "lstm"


def test_general_distillation_starts_from_teacher_layers_and_trains(tmp_path, capsys):
    from conftest import write_corpus

    from ptmkit.objectives.distil_mlm import start_from_teacher

    text = write_corpus(tmp_path / "text.txt", docs=30)
    teacher = tiny_checkpoint(tmp_path / "teacher", text.read_text().splitlines(), layers=4, heads=2)
    rc, err = run_cli(["distil", teacher, "--general", "--data", text, "-o", tmp_path / "student", "--layers", "1,3",
                       "--hidden", "1", "--attention", "1", "train.max_steps=6", "train.batch_size=4", "train.seq_len=32",
                       "train.warmup_steps=1", "train.eval_batches=1", "train.num_threads=1", "train.log_every=1"], capsys)
    assert rc == 0, err
    config = json.loads((tmp_path / "student" / "config.json").read_text())
    assert config["model"]["num_layers"] == 2 and config["objective"]["name"] == "distil_mlm"
    records = [json.loads(line) for line in (tmp_path / "student" / "metrics.jsonl").read_text().splitlines()]
    assert any("hidden_loss" in r and "attention_loss" in r and "cosine_loss" in r for r in records)
    # ppl is the student's MLM perplexity, not the exponential of the summed distillation losses
    evals = [r for r in records if r.get("split") == "eval"]
    assert evals and all(r["ppl"] == pytest.approx(np.exp(r["mlm_loss"])) for r in evals)
    assert not any(k.endswith("_ppl") for r in evals for k in r)
    # the student starts as the teacher's layers 1 and 3: the same outputs as running them by hand
    t = load_pretrained(teacher, heads=False).backbone
    from ptmkit.build import build_encoder

    s = build_encoder({**config["model"]}, load_pretrained(teacher, heads=False).tokenizer)
    start_from_teacher(s, t, [1, 3])
    t.keep_layers([1, 3])
    ids = torch.randint(5, 50, (2, 7))
    assert torch.allclose(s.eval()(ids).last_hidden_state, t.eval()(ids).last_hidden_state)
    with pytest.raises(PtmError, match="teacher has layers 0 .. 1"):
        start_from_teacher(s, t, [0, 5])
    # the trained student is an MLM of its own: loading it with its heads needs no teacher
    teacher.rename(tmp_path / "moved")
    student = load_pretrained(tmp_path / "student")
    assert student.config["objective"]["name"] == "mlm" and student.objective.mlm_head is not None
    assert not hasattr(student.objective, "teacher")


def test_general_distillation_names_its_teacher_by_absolute_path(tmp_path, monkeypatch):
    """A resumed run compares configs: the teacher given relative to another directory is the same teacher."""
    from conftest import write_corpus

    from ptmkit.workflows.distil_general import general_config

    text = write_corpus(tmp_path / "text.txt", docs=10)
    ck = Path(tiny_checkpoint(tmp_path / "teacher", text.read_text().splitlines(), layers=2, heads=2)).resolve()
    monkeypatch.chdir(tmp_path)
    weights = {"soft": 0.0, "mlm": 1.0, "cosine": 0.0, "hidden": 0.0, "attention": 0.0, "temperature": 2.0,
               "layer_map": "uniform"}
    config = general_config(ck.relative_to(tmp_path.resolve()), [1], weights)
    assert config["objective"]["teacher"] == str(ck)
    assert config["tokenizer"]["file"] == str(ck / "tokenizer.json")


def test_a_tagger_distils_word_by_word(tmp_path):
    """Tagging: the soft loss runs over each sentence's words (teacher logits cached per sentence)."""
    from ptmkit.compress.distil import DistilSettings
    from ptmkit.compress.students import StudentSpec
    from ptmkit.tasks.tagging import TaggingData, TaggingSplit
    from ptmkit.workflows.distil import distil

    rng = np.random.default_rng(0)

    def split(n):
        words, tags = [], []
        for _ in range(n):
            w = [str(x) for x in rng.choice(["the", "a", "cat", "dog", "ran", "sat"], size=int(rng.integers(2, 7)))]
            words.append(w)
            tags.append(["DET" if x in ("the", "a") else "NOUN" if x in ("cat", "dog") else "VERB" for x in w])
        return TaggingSplit(words, tags)

    data = TaggingData("toy-pos", ["DET", "NOUN", "VERB"], split(80), split(20), split(20))
    ck = tiny_checkpoint(tmp_path / "model", [" ".join(w) for w in data.train.words], layers=2, heads=2)
    cfg = FinetuneConfig(epochs=2, lr=3e-3, batch_size=16, max_seq_len=32)
    # the teacher sees a fixed 60-sentence subset (--train-size): the student is distilled on that subset
    finetune(load_pretrained(ck, heads=False), data.with_train_size(60), tmp_path / "teacher", cfg, seed=0,
             progress=False)
    info = json.loads((tmp_path / "teacher" / "task_model.json").read_text())
    assert info["train_subset"] == {"size": 60, "seed": 0}
    summary = distil(tmp_path / "teacher", tmp_path / "d", StudentSpec("layers", (1,)), DistilSettings(), cfg,
                     load_data=lambda: data, progress=False, labels_only="off")
    run = summary["runs"][0]
    assert run["task_type"] == "tagging" and run["test"]["accuracy"] > 0.5
    assert run["sizes"]["train"] == 60 and run["sizes"]["test"] == 20
    records = [json.loads(line) for line in (tmp_path / "d" / "student-seed0" / "metrics.jsonl").read_text().splitlines()]
    assert any("soft_loss" in r for r in records)


def test_unlabelled_text_is_labelled_by_the_teacher(teacher, tmp_path, capsys):
    extra = toy_sentiment(sizes=(40, 1, 1), seed=5).train.texts
    (tmp_path / "more.txt").write_text("\n".join(extra) + "\n\n")
    rc, err = _distil(teacher, capsys, tmp_path / "u", "--unlabelled", tmp_path / "more.txt")
    assert rc == 0, err
    result = json.loads((tmp_path / "u" / "student-seed0" / "results.json").read_text())
    assert result["sizes"]["train"] == 160 + 40 and result["training"]["labelled"] == 160
    (tmp_path / "empty.txt").write_text("\n")
    rc, err = _distil(teacher, capsys, tmp_path / "e", "--unlabelled", tmp_path / "empty.txt")
    assert rc == 2 and "holds no text" in err


def test_a_causal_lm_distils_into_a_smaller_causal_lm(tmp_path, capsys):
    from conftest import write_corpus

    from ptmkit.build import build_model
    from ptmkit.tokenization import Tokenizer

    text = write_corpus(tmp_path / "text.txt", docs=30)
    teacher = tiny_checkpoint(tmp_path / "gpt", text.read_text().splitlines(), layers=4, heads=2, causal=True)
    args = ["--general", "--data", text, "--layers", "1,3", "train.max_steps=4", "train.batch_size=4",
            "train.seq_len=32", "train.warmup_steps=1", "train.eval_batches=1", "train.num_threads=1", "train.log_every=1",
            "--quiet"]
    rc, err = run_cli(["distil", teacher, "-o", tmp_path / "small", "--soft", "1", "--mlm", "1", "--cosine", "0",
                       *args, "objective.chunk=7"], capsys)
    assert rc == 0, err
    config = json.loads((tmp_path / "small" / "config.json").read_text())
    assert config["objective"]["name"] == "distil_clm" and config["model"]["num_layers"] == 2
    records = [json.loads(line) for line in (tmp_path / "small" / "metrics.jsonl").read_text().splitlines()]
    assert any("soft_loss" in r and "clm_loss" in r for r in records)
    assert all(r["ppl"] == pytest.approx(np.exp(r["clm_loss"])) for r in records if r.get("split") == "eval")
    # the chunked soft loss is the whole-matrix one, gradient included
    model = build_model(config, Tokenizer.load(tmp_path / "small" / "checkpoints" / "step-0000004" / "tokenizer.json"))
    obj, enc = model.objective, model.backbone
    ids = torch.randint(5, 40, (2, 9))
    batch = {"input_ids": ids, "labels": torch.roll(ids, -1, 1)}
    out = obj(enc, batch)
    h = enc(ids, causal=True).last_hidden_state.flatten(0, 1)
    with torch.no_grad():
        z_t = obj.teacher(ids, causal=True).last_hidden_state.flatten(0, 1) @ obj.teacher.output_embeddings().t()
    want = soft_cross_entropy(h @ enc.output_embeddings().t(), z_t, 2.0)
    assert float(out.metrics["soft_loss"]) == pytest.approx(float(want.detach()), rel=1e-5)
