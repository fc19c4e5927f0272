"""Why does an ELECTRA discriminator fine-tune below a random encoder?  Measure the encoders.

Reads the pre-trained runs of a ``ptm compare`` output (``OUT/runs/<label>``) and a random
encoder of the first run's architecture, and reports per encoder, on MR sentences:

* ``probe``: test accuracy of a logistic regression on frozen mean-pooled top-layer states
  (the pooling the classification head uses for encoders without a [CLS] pooler), C chosen on
  dev, trained on the same 500 sentences as the fine-tuning protocol and on all 8,032;
* ``cos``: the mean cosine between mean-pooled states of different sentences (1 = every
  sentence maps to the same direction: nothing for a classifier to separate) and between
  token states of different sentences, top layer;
* ``rms``: the RMS of the top-layer states and of the backbone's weight matrices;
* ``drift``: how far pre-training moved the backbone's weight matrices (embeddings excluded) from
  their initial values, ‖W − W₀‖ / ‖W₀‖ over all of them, W₀ rebuilt from the run's seed (the
  pre-training seeds the generator the same way before it builds the model);
* ``adam``: from the final checkpoint's optimizer state, the median of √v̂ (Adam's bias-corrected
  second moment: the typical gradient size) over the backbone's layer matrices, and the share of
  their entries below 10⁻⁵ (where Adam's ε = 10⁻⁶ starts to damp the step);
* ``emb``: the word embeddings (shared by ELECTRA's generator and discriminator): their RMS and
  the mean cosine between the embeddings of different pieces among ids 5–2004 (after the special
  tokens: the alphabet and the first WordPiece merges, the most frequent pieces).

    python benchmarks/electra_transfer_diagnosis.py runs/compare-electra --out runs/electra-transfer

Prints a Markdown table and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

import ptmkit
from ptmkit.build import build_encoder, build_model
from ptmkit.train import checkpoint as ckpt
from ptmkit.train.optim import param_groups
from ptmkit.train.trainer import seed_everything

torch.set_num_threads(2)


@torch.no_grad()
def encode(encoder: torch.nn.Module, tokenizer, texts: list[str], seq_len: int = 64, batch: int = 128):
    """Mean-pooled top states ``[N, H]`` and a sample of token states ``[M, H]``."""
    pooled, tokens = [], []
    for i in range(0, len(texts), batch):
        ids = [[tokenizer.cls_id] + tokenizer.encode(t)[: seq_len - 2] + [tokenizer.sep_id] for t in texts[i:i + batch]]
        T = max(map(len, ids))
        x = torch.full((len(ids), T), tokenizer.pad_id, dtype=torch.long)
        m = torch.zeros(len(ids), T, dtype=torch.long)
        for j, row in enumerate(ids):
            x[j, : len(row)] = torch.tensor(row)
            m[j, : len(row)] = 1
        h = encoder(x, m).last_hidden_state.float()  # [B, T, H]
        w = m.unsqueeze(-1).float()
        pooled.append((h * w).sum(1) / w.sum(1))
        tokens.append(h[:, 1][m[:, 1] > 0])  # the first word piece of each sentence
    return torch.cat(pooled).numpy(), torch.cat(tokens).numpy()


def mean_cosine(x: np.ndarray, rng: np.random.Generator, pairs: int = 20000) -> float:
    a, b = rng.integers(0, len(x), pairs), rng.integers(0, len(x), pairs)
    keep = a != b
    xa, xb = x[a[keep]], x[b[keep]]
    return float(np.mean((xa * xb).sum(1) / (np.linalg.norm(xa, axis=1) * np.linalg.norm(xb, axis=1) + 1e-12)))


def probe(train_x, train_y, dev_x, dev_y, test_x, test_y) -> float:
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    z = lambda v: (v - mu) / sd  # noqa: E731
    best = max((LogisticRegression(C=c, max_iter=2000).fit(z(train_x), train_y) for c in (0.01, 0.1, 1.0)),
               key=lambda clf: clf.score(z(dev_x), dev_y))
    return float(best.score(z(test_x), test_y))


def weight_rms(encoder: torch.nn.Module) -> float:
    ws = [p.detach().float() for n, p in encoder.named_parameters() if p.ndim == 2 and "embeddings" not in n]
    return float(torch.sqrt(sum((w ** 2).sum() for w in ws) / sum(w.numel() for w in ws)))


def drift(encoder: torch.nn.Module, config: dict, tokenizer) -> float:
    """‖W − W₀‖ / ‖W₀‖ over the non-embedding weight matrices, W₀ the run's initial weights."""
    seed_everything(int(config["train"]["seed"]))
    init = dict(build_encoder(config["model"], tokenizer).named_parameters())
    num = den = 0.0
    for name, w in encoder.named_parameters():
        if w.ndim == 2 and "embeddings" not in name:
            w0 = init[name].detach().float()
            num += float(((w.detach().float() - w0) ** 2).sum())
            den += float((w0 ** 2).sum())
    return (num / den) ** 0.5


def adam_second_moment(run: Path, config: dict, tokenizer) -> tuple[float, float]:
    """(median √v̂, share of entries with √v̂ < 1e-5) over the backbone's layer weight matrices."""
    state = ckpt.load_trainer_state(ckpt.latest_checkpoint(run))["optimizer"]
    train = config["train"]
    model = build_model(config, tokenizer)
    # the optimizer's parameter order: its groups' order, as the trainer built them
    groups = param_groups(model, float(train["weight_decay"]), float(train["lr"]), float(train.get("layer_decay", 1.0)))
    names = [n for g in groups for n in g["names"]]
    beta2 = float(train["betas"][1])
    sizes = []
    for i, name in enumerate(names):
        if name.startswith("backbone.layers.") and name.endswith(".weight") and "norm" not in name:
            st = state["state"][i]
            sizes.append((st["exp_avg_sq"] / (1 - beta2 ** float(st["step"]))).sqrt().flatten())
    v = torch.cat(sizes)
    return float(v.median()), float((v < 1e-5).float().mean())


def embedding_stats(encoder: torch.nn.Module, rng: np.random.Generator) -> tuple[float, float]:
    """(RMS, mean cosine between different pieces) of the word embeddings of ids 5..2004."""
    w = encoder.embeddings.word_embeddings.weight.detach().float().numpy()[5:2005]
    return float(np.sqrt((w ** 2).mean())), mean_cosine(w, rng)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("compare_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--eval-size", type=int, default=1000)
    args = ap.parse_args()

    task = ptmkit.load_task("mr")
    small = task.with_train_size(500, seed=0).train
    dev, test = task.dev.subset(np.arange(args.eval_size)), task.test.subset(np.arange(args.eval_size))
    runs = sorted(p for p in (args.compare_dir / "runs").iterdir() if p.is_dir())
    first = ptmkit.load_pretrained(runs[0], heads=False)
    torch.manual_seed(0)
    encoders = {"random init": (build_encoder(first.config["model"], first.tokenizer).eval(), first.tokenizer)}
    drifts = {"random init": 0.0}
    adam = {"random init": (float("nan"), float("nan"))}
    for run in runs:
        p = ptmkit.load_pretrained(run, heads=False)
        encoders[run.name] = (p.backbone, p.tokenizer)
        drifts[run.name] = drift(p.backbone, p.config, p.tokenizer)
        adam[run.name] = adam_second_moment(run, p.config, p.tokenizer)

    rng = np.random.default_rng(0)
    rows = {}
    for name, (enc, tok) in encoders.items():
        full_x, _ = encode(enc, tok, task.train.texts)
        small_x, _ = encode(enc, tok, small.texts)
        dev_x, _ = encode(enc, tok, dev.texts)
        test_x, test_tok = encode(enc, tok, test.texts)
        rows[name] = {
            "probe_500": probe(small_x, small.labels, dev_x, dev.labels, test_x, test.labels),
            "probe_all": probe(full_x, task.train.labels, dev_x, dev.labels, test_x, test.labels),
            "cos_sentences": mean_cosine(test_x, rng),
            "cos_tokens": mean_cosine(test_tok, rng),
            "state_rms": float(np.sqrt((test_x ** 2).mean())),
            "weight_rms": weight_rms(enc),
            "drift": drifts[name],
            "adam_sqrt_v_median": adam[name][0],
            "adam_share_below_1e-5": adam[name][1],
        }
        rows[name]["emb_rms"], rows[name]["cos_embeddings"] = embedding_stats(enc, rng)
        print(name, rows[name], flush=True)

    lines = ["| encoder | probe acc. (500) | probe acc. (all) | cos(sentences) | cos(tokens) | state RMS | "
             "weight RMS | drift from init | Adam √v̂ median | share < 1e-5 | embedding RMS | cos(embeddings) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['probe_500']:.3f} | {r['probe_all']:.3f} | {r['cos_sentences']:.3f} | "
                     f"{r['cos_tokens']:.3f} | {r['state_rms']:.3f} | {r['weight_rms']:.4f} | {r['drift']:.3f} | "
                     f"{r['adam_sqrt_v_median']:.2e} | {r['adam_share_below_1e-5']:.2f} | "
                     f"{r['emb_rms']:.4f} | {r['cos_embeddings']:.3f} |")
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
