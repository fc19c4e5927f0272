"""``ptm budget``: budgets as typed, the steps they buy, WSD branches that match standalone runs
(LR step by step, weights at the branch point, the final weights of a standalone run, an
interrupted branch resumed exactly), the power-law fit, and the study's table / JSON / plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file

from ptmkit.data.corpus import Corpus
from ptmkit.data.tasks import TaskData, TaskSplit
from ptmkit.errors import PtmError
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.optim import Schedule
from ptmkit.workflows.budget import (
    Plan,
    branch_point,
    budget,
    budget_name,
    main_overrides,
    make_branch,
    parse_budgets,
    plan,
)
from ptmkit.workflows.budget_report import crossovers, fit_power_law, markdown
from ptmkit.workflows.compare import parse_contender, probe, shared_corpus
from ptmkit.workflows.evaluate import Protocol
from ptmkit.workflows.pretrain import pretrain

TINY = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=32",
        "model.max_position=32", "tokenizer.vocab_size=120", "train.seq_len=16", "train.batch_size=4",
        "train.log_every=1", "train.eval_batches=2", "train.eval_fraction=0.1", "objective.nsp=false"]


def test_budgets_as_typed():
    assert parse_budgets("1e13,3e13,1e14") == (1e13, 3e13, 1e14)
    assert parse_budgets(["10T", "30T"]) == (1e13, 3e13)
    with pytest.raises(PtmError, match="must increase: 10.0 TFLOP follows"):
        parse_budgets("3e13,1e13")
    with pytest.raises(PtmError, match="must increase"):
        parse_budgets("1e13,1e13")
    for bad in ("", "15min", "ten"):
        with pytest.raises(PtmError, match="budget"):
            parse_budgets(bad)
    assert budget_name(3e13) == "budget-3e13" and budget_name(2.5e7) == "budget-2.5e7" and budget_name(5e5) == "budget-500000"


def test_steps_per_budget_and_refusals():
    p = plan("m", (1e9, 3e9, 1e10), 1e8, 0.1, 1)
    assert p.steps == (10, 30, 100) and p.points == (9, 27, 90)
    with pytest.raises(PtmError, match=r"m: the budget 900.0 MFLOP buys 9 steps .*fewer than 10"):
        plan("m", (9e8, 3e9), 1e8, 0.1, 1)
    with pytest.raises(PtmError, match="same 10 steps"):
        plan("m", (1e9, 1.05e9), 1e8, 0.1, 1)
    with pytest.raises(PtmError, match="warmup_steps=20 outlasts"):
        plan("m", (2e9, 3e9), 1e8, 0.1, 20)
    with pytest.raises(PtmError, match="decay-fraction"):
        plan("m", (2e9, 3e9), 1e8, 1.0, 1)
    cost = {"flops_per_step": 1e8, "warmup_steps": 1000}
    overrides, p = main_overrides(parse_contender("bert-tiny"), [], cost, (2e9, 1e10), 0.1)
    values = dict(o.split("=", 1) for o in overrides)
    assert values["train.max_steps"] == "100" and values["train.schedule"] == "wsd"
    assert values["train.warmup_steps"] == "2"  # a tenth of the smallest budget's 20 steps
    with pytest.raises(PtmError, match="sets train.schedule itself"):
        main_overrides(parse_contender("m=bert-tiny:train.schedule=cosine"), [], cost, (2e9, 1e10), 0.1)


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.15])
@pytest.mark.parametrize("steps", [10, 14, 15, 37, 100])
def test_branch_schedule_is_a_standalone_wsd_run(steps, fraction):
    """The branch trains with the main run's LR up to its branch point, then exactly as a
    standalone WSD run of its steps: the decay starts at the branch point and ends at the floor."""
    total, warmup = 400, 1
    main = Schedule("wsd", warmup, total, 0.05, decay_fraction=fraction)
    branch = Schedule("wsd", warmup, steps, 0.05, decay_fraction=fraction)
    p = branch_point(steps, fraction)
    assert all(branch(s) == main(s) for s in range(p))
    assert branch(p - 1) == 1.0 and branch(p) == 1.0 and branch(p + 1) < 1.0
    assert branch(steps) == pytest.approx(0.05)


def test_power_law_fit_recovers_its_parameters():
    rng = np.random.default_rng(0)
    c = np.geomspace(1e12, 1e16, 6)
    assert fit_power_law(list(zip(c, 7.3 * c ** -0.076))) == pytest.approx({"a": 7.3, "alpha": 0.076})
    noisy = fit_power_law(list(zip(c, 7.3 * c ** -0.076 * np.exp(rng.normal(0, 0.003, 6)))))
    assert noisy["alpha"] == pytest.approx(0.076, abs=0.005)
    assert fit_power_law([(1e12, 3.0)]) is None and fit_power_law([(1e12, 3.0), (1e12, 2.0)]) is None


def test_crossover_is_the_first_budget_beyond_the_baseline_band():
    scores = [{"model": "random init", "budget": 0.0, "task": "t", "mean": 0.6, "sd": 0.05},
              *({"model": "m", "budget": b, "task": "t", "mean": v, "sd": 0.0} for b, v in ((1.0, 0.62), (2.0, 0.66), (3.0, 0.7)))]
    assert crossovers(scores, ["m"], ["t"]) == {"m": {"t": 2.0}}
    assert crossovers(scores[:2], ["m"], ["t"]) == {"m": {"t": None}}


@pytest.fixture()
def corpus_dir(tmp_path):
    rng = np.random.default_rng(0)
    words = "the a film plot good bad actor scene story long short fun dull music".split()
    text = "\n".join(" ".join(rng.choice(words, rng.integers(5, 12))) for _ in range(300)) + "\n"
    (tmp_path / "text.txt").write_text(text)
    return tmp_path


def toy_task() -> TaskData:
    """A two-label task: "good fun film plot" / "bad dull film plot"."""
    rng = np.random.default_rng(1)

    def split(n):
        y = rng.integers(0, 2, n)
        return TaskSplit([("good fun " if v else "bad dull ") + "film plot" for v in y], y)

    return TaskData("toy", [0, 1], split(24), split(12), split(12))


def _lrs(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in lines if r.get("split") == "train"}


def _weights(ck):
    return load_file(str(ck / ckpt.MODEL_FILE))


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_one_run_gives_a_model_at_every_budget(corpus_dir, monkeypatch):
    monkeypatch.setattr("ptmkit.workflows.budget.load_task", lambda name: toy_task())
    c = parse_contender("bert-tiny")
    common = [*TINY, "train.keep_checkpoints=50", "train.min_lr_ratio=0.1"]
    text = [corpus_dir / "text.txt"]
    out = corpus_dir / "study"
    fps = probe(c, Corpus.open(shared_corpus([c], text, corpus_dir / "probe", common)), common)["flops_per_step"]
    budgets = (12.5 * fps, 20.5 * fps, 40.5 * fps)  # 12, 20 and 40 steps
    protocol = Protocol(train_size=16, eval_size=12, seeds=(1, 2), lrs=(1e-3,), epochs=1, modes=("finetune",))
    result = budget([c], text, out, budgets, ("toy",), protocol, common=common, progress=False)

    runs = out / "runs" / "bert-tiny"
    main, small, middle = (runs / budget_name(b) for b in (budgets[2], budgets[0], budgets[1]))
    entries = result["presets"]["bert-tiny"]["budgets"]
    assert [e["steps"] for e in entries] == [12, 20, 40] and [e["branch_point"] for e in entries] == [11, 18, None]
    assert all(e["loss"] is not None for e in entries)
    config = json.loads((main / "config.json").read_text())["train"]
    lr, warmup, floor = config["lr"], config["warmup_steps"], config["min_lr_ratio"]
    assert config["schedule"] == "wsd" and config["max_steps"] == 40 and warmup == 1
    main_lr = _lrs(main)
    for run_dir, steps, point in ((small, 12, 11), (middle, 20, 18)):
        # the LR of every step is that of a standalone WSD run to the branch's steps ...
        standalone = Schedule("wsd", warmup, steps, floor, decay_fraction=0.1)
        branch_lr = _lrs(run_dir)
        assert sorted(branch_lr) == list(range(1, steps + 1))
        assert all(branch_lr[s] == pytest.approx(lr * standalone(s - 1), rel=1e-6) for s in branch_lr)
        # ... the main run's up to the branch point, whose weights are the main run's there
        assert all(branch_lr[s] == main_lr[s] for s in range(1, point + 1))
        assert _same(_weights(run_dir / "checkpoints" / ckpt.step_name(point)),
                     _weights(main / "checkpoints" / ckpt.step_name(point)))
        assert ckpt.latest_checkpoint(run_dir).name == ckpt.step_name(steps)

    # the branch is, bit for bit, a standalone WSD run of its own config from step 0
    standalone = pretrain(json.loads((middle / "config.json").read_text()), out / "data", corpus_dir / "standalone", [],
                          verbose=False)
    assert _same(_weights(ckpt.latest_checkpoint(standalone)), _weights(ckpt.latest_checkpoint(middle)))

    # a branch interrupted halfway through its decay resumes to the same weights
    again = corpus_dir / "again"
    make_branch(main, main / "checkpoints" / ckpt.step_name(18), again, 20, 0.1, [out / "data"])

    class Stop(Exception):
        pass

    def stop(trainer, step):
        if step == 19:
            raise Stop

    with pytest.raises(Stop):
        pretrain(None, out / "data", again, [], resume=True, verbose=False, callbacks=[stop])
    assert ckpt.latest_checkpoint(again).name == ckpt.step_name(19)
    pretrain(None, out / "data", again, [], resume=True, verbose=False)  # a plain resume, as ptm pretrain --resume
    assert _same(_weights(ckpt.latest_checkpoint(again)), _weights(ckpt.latest_checkpoint(middle)))

    # the report
    assert {(s["model"], s["budget"]) for s in result["scores"]} == {("random init", 0.0), *(("bert-tiny", b) for b in budgets)}
    assert all(s["n"] == 2 for s in result["scores"]) and len(result["runs"]) == 8
    table = (out / "table.md").read_text()
    assert "| random init |" in table and "| bert-tiny | " in table and "Kaplan et al. 2020: alpha = 0.050" in table
    assert "Crossover" in table and (out / "budget.png").stat().st_size > 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["budgets"] == list(budgets) and saved["presets"]["bert-tiny"]["fit"] is not None
    assert set(saved["crossover"]["bert-tiny"]) == {"toy"}


def test_bad_budgets_fail_before_training(corpus_dir):
    text = [corpus_dir / "text.txt"]
    with pytest.raises(PtmError, match="buys 0 steps"):
        budget([parse_contender("bert-tiny")], text, corpus_dir / "o1", (10.0, 1e3), common=TINY, progress=False)
    assert not (corpus_dir / "o1" / "runs").exists()
    with pytest.raises(PtmError, match="must increase"):
        budget([parse_contender("bert-tiny")], text, corpus_dir / "o2", (1e9, 1e8), common=TINY, progress=False)
    with pytest.raises(PtmError, match="labels must differ"):
        budget([parse_contender("a=bert-tiny"), parse_contender("a=gpt2-tiny")], text, corpus_dir / "o3", (1e9, 2e9))


def test_plan_points_follow_the_steps():
    assert Plan((1.0, 2.0), (14, 15), 0.1, 1).points == (13, 13)  # two budgets may branch at one step


def test_table_names_the_crossover_or_its_absence():
    entries = [{"budget": b, "steps": s, "flops": s * 1e9, "loss": v} for b, s, v in ((1e10, 10, 4.0), (3e10, 30, 3.5))]
    scores = [{"model": "m", "budget": b, "task": "t", "metric": "accuracy", "mean": v, "sd": 0.01}
              for b, v in ((1e10, 0.55), (3e10, 0.7))]
    base = {"model": "random init", "budget": 0.0, "task": "t", "metric": "accuracy", "mean": 0.6, "sd": 0.02}
    result = {"tasks": ["t"], "kaplan_alpha": 0.05, "scores": [base, *scores],
              "presets": {"m": {"preset": "bert-tiny", "budgets": entries,
                                "fit": fit_power_law([(e["flops"], e["loss"]) for e in entries])}},
              "crossover": crossovers([base, *scores], ["m"], ["t"])}
    table = markdown(result)
    assert "| random init | – | 0 | 0 | – | 0.600 ± 0.020 |" in table and "| m | 30.0 GFLOP | 30.0 GFLOP | 30 | 3.500 |" in table
    assert "- m: t: 30.0 GFLOP" in table and "alpha = 0.122" in table  # log(4 / 3.5) / log(3)
    result["scores"], result["crossover"] = scores, crossovers(scores, ["m"], ["t"])
    assert "no random-init baseline" in markdown(result)
