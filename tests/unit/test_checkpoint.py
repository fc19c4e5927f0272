"""Atomic checkpoints: round trips (tied weights), pruning, kills mid-write, truncated files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from ptmkit.build import build_model
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained, save_pretrained
from ptmkit.train import checkpoint as ckpt


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(12, 4)
        self.norm = nn.LayerNorm(4)
        self.out = nn.Linear(4, 12)
        self.out.weight = self.emb.weight


def _save(run: Path, step: int, model: nn.Module, keep: int = 2) -> Path:
    return ckpt.save_checkpoint(run, step, model, {"step": step}, {"config": {"step": step}}, keep=keep)


def test_round_trip_tied_latest_and_prune(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    for step in (10, 20, 30):
        with torch.no_grad():
            model.emb.weight.add_(1.0)
        path = _save(tmp_path, step, model)
    assert path.name == "step-0000030"
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step-0000030"
    assert [s for s, _ in ckpt.checkpoint_steps(tmp_path)] == [20, 30]  # keep=2
    header = ckpt.check_safetensors(path / ckpt.MODEL_FILE)
    assert len([k for k in header if k != "__metadata__"]) == 4  # the tied decoder weight is stored once
    other = TiedLM()
    ckpt.load_model_weights(other, ckpt.resolve_checkpoint(tmp_path))
    for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), n
    assert other.out.weight is other.emb.weight  # still tied after loading
    assert ckpt.load_trainer_state(path)["step"] == 30
    assert ckpt.read_config(path) == {"step": 30}


def test_exception_mid_write_keeps_previous(tmp_path, monkeypatch):
    model = TiedLM()
    _save(tmp_path, 1, model)

    def broken(directory, m):
        (Path(directory) / ckpt.MODEL_FILE).write_bytes(b"\x00" * 10)
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "write_model", broken)
    with pytest.raises(OSError):
        _save(tmp_path, 2, model)
    assert ckpt.latest_checkpoint(tmp_path).name == "step-0000001"
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")] == []
    ckpt.validate_checkpoint(ckpt.latest_checkpoint(tmp_path), need_state=True)


def test_kill_mid_write_leaves_previous_valid(tmp_path):
    # A real SIGKILL while the second checkpoint's weights are half written.
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        import torch
        from torch import nn
        from ptmkit.train import checkpoint as ckpt

        class TiedLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(12, 4); self.norm = nn.LayerNorm(4); self.out = nn.Linear(4, 12)
                self.out.weight = self.emb.weight

        run = Path({str(tmp_path)!r})
        m = TiedLM()
        ckpt.save_checkpoint(run, 1, m, {{"step": 1}}, {{"config": {{"a": 1}}}})
        real = ckpt.write_model
        def dying(directory, model):
            real(directory, model)
            f = Path(directory) / ckpt.MODEL_FILE
            os.truncate(f, f.stat().st_size // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        ckpt.write_model = dying
        ckpt.save_checkpoint(run, 2, m, {{"step": 2}}, {{"config": {{"a": 2}}}})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    ckdir = tmp_path / "checkpoints"
    stale = [p for p in ckdir.iterdir() if p.name.startswith(".tmp-")]
    assert stale, "the killed write should have left its temporary directory"
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest.name == "step-0000001"
    ckpt.validate_checkpoint(latest, need_state=True)
    ckpt.load_model_weights(TiedLM(), latest)
    # The next save removes the leftovers.
    _save(tmp_path, 3, TiedLM())
    assert not [p for p in ckdir.iterdir() if p.name.startswith(".tmp-")]


def test_truncated_or_missing_files_raise(tmp_path):
    path = _save(tmp_path, 5, TiedLM())
    f = path / ckpt.MODEL_FILE
    data = f.read_bytes()
    f.write_bytes(data[:-7])
    with pytest.raises(PtmError, match="truncated"):
        ckpt.validate_checkpoint(path)
    with pytest.raises(PtmError, match="truncated"):
        ckpt.load_model_weights(TiedLM(), path)
    f.write_bytes(data[:5])
    with pytest.raises(PtmError):
        ckpt.check_safetensors(f)
    f.write_bytes(data)
    state = path / ckpt.STATE_FILE
    state.write_bytes(state.read_bytes()[:20])
    with pytest.raises(PtmError, match="corrupt or truncated"):
        ckpt.load_trainer_state(path)
    (path / ckpt.CONFIG_FILE).write_text("{not json")
    with pytest.raises(PtmError, match="not valid JSON"):
        ckpt.validate_checkpoint(path)
    os.unlink(f)
    with pytest.raises(PtmError, match="missing"):
        ckpt.validate_checkpoint(path)
    with pytest.raises(PtmError, match="does not exist"):
        ckpt.resolve_checkpoint(tmp_path / "nope")
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(PtmError, match="no checkpoint"):
        ckpt.resolve_checkpoint(tmp_path / "empty")


def test_weights_that_do_not_fit_raise(tmp_path):
    path = _save(tmp_path, 1, TiedLM())
    wrong = nn.Linear(3, 3)
    with pytest.raises(PtmError, match="do not fit"):
        ckpt.load_model_weights(wrong, path)


def _tiny_pretrained(tmp_path):
    from ptmkit.tokenization import Tokenizer

    text = tmp_path / "t.txt"
    text.write_text("\n".join(f"the cat {w} sat on the mat number {i}" for i, w in enumerate(["a", "b", "c", "d"] * 20)))
    tok = Tokenizer.train([text], kind="wordpiece", vocab_size=60, min_frequency=1)
    config = {
        "model": {"vocab_size": tok.vocab_size, "hidden_size": 16, "num_layers": 2, "num_heads": 2,
                  "intermediate_size": 32, "max_position": 32},
        "objective": {"name": "mlm", "nsp": True},
        "tokenizer": {"kind": "wordpiece", "vocab_size": 60},
        "train": {},
    }
    return config, tok, build_model(config, tok)


def test_save_and_load_pretrained(tmp_path):
    pytest.importorskip("ptmkit.objectives.mlm")
    torch.manual_seed(0)
    config, tok, model = _tiny_pretrained(tmp_path)
    out = save_pretrained(tmp_path / "model", config, model, tok)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    loaded = load_pretrained(out)
    assert loaded.config == json.loads(json.dumps(config))
    assert loaded.tokenizer.vocab_size == tok.vocab_size
    ids = torch.tensor([tok.encode("the cat sat on the mat", add_special_tokens=True)])
    model.eval()
    ref = model.backbone(ids).last_hidden_state
    got = loaded.backbone(ids).last_hidden_state
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    dec = loaded.backbone.output_embeddings()
    assert torch.equal(dec, model.backbone.output_embeddings())
    for (n, a), (_, b) in zip(model.state_dict().items(), loaded.model.state_dict().items()):
        assert torch.equal(a, b), n
    # A run directory resolves to its latest checkpoint.
    run = tmp_path / "run"
    ckpt.save_checkpoint(run, 7, model, {"step": 7}, {"config": config, "tokenizer": tok})
    assert load_pretrained(run).path.name == "step-0000007"
