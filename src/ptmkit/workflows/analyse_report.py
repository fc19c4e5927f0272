"""What ``ptm analyse`` writes besides ``analysis.json``: ``report.md`` and its PNG figures
(contextuality per layer, probe accuracy and selectivity per layer, the structural probe, attention
statistics and head importance as layer x head heatmaps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.analysis.attention_stats import STATS
from ptmkit.analysis.contextuality_run import slug
from ptmkit.workflows.report import colours, figure, markdown_table, save

# What Ethayarajh (2019) states in words about his models (ELMo original, BERT-base cased, GPT-2 small);
# the per-layer values are in his figures only.
PUBLISHED = {
    "anisotropy": "> 0 in every layer of all three models; highest in the upper layers; GPT-2's last layer: two random "
                  "words have almost perfect cosine similarity",
    "self_similarity": "adjusted self-similarity falls with depth in all three models (more context-specific upper "
                       "layers); stopwords among the least self-similar",
    "intra_sentence": "ELMo: rises with depth; BERT: falls in upper layers but stays above the random baseline; "
                      "GPT-2: about the random baseline",
    "mev": "after adjusting for anisotropy, less than 5 % of a word's variance is explained by its first principal "
           "component, in every layer",
}
PANELS = (("self_similarity", "self-similarity"), ("adjusted.self_similarity", "self-similarity - anisotropy"),
          ("intra_sentence", "intra-sentence similarity"), ("adjusted.intra_sentence", "intra-sentence - anisotropy"),
          ("mev", "maximum explainable variance"), ("anisotropy", "anisotropy (random occurrences)"))


def _get(d: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        d = d[part]
    return d


def contextuality_plot(results: dict[str, Any], path: Path) -> Path | None:
    models = [m for m, r in results.items() if "contextuality" in r]
    if not models:
        return None
    fig = figure(13, 7)
    col = colours(len(models))
    for p, (key, title) in enumerate(PANELS):
        ax = fig.add_subplot(2, 3, p + 1)
        for c, m in zip(col, models):
            ys = _get(results[m]["contextuality"], key)
            ax.plot(range(len(ys)), ys, marker="o", color=c, label=m)
        ax.set_title(title)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    return save(fig, path)


def probe_plot(results: dict[str, Any], path: Path) -> Path | None:
    tasks = [(m, t, r["probe"][t]) for m, r in results.items() for t in ("pos", "relations") if t in r.get("probe", {})]
    if not tasks:
        return None
    fig = figure(13, 4)
    col = colours(len(results))
    colour = {m: c for m, c in zip(results, col)}
    for p, (kind, title) in enumerate((("task", "probe accuracy (solid: task, dotted: control)"),
                                       ("selectivity", "selectivity (task - control)"))):
        ax = fig.add_subplot(1, 2, p + 1)
        for m, t, r in tasks:
            for probe, style in (("linear", "-"), ("mlp", "--")):
                ys = [layer[probe][kind] for layer in r["layers"]]
                ax.plot(range(len(ys)), ys, style, marker="o" if t == "pos" else "s", color=colour[m],
                        label=f"{m} {t} {probe}")
                if kind == "task":
                    ax.plot(range(len(ys)), [layer[probe]["control"] for layer in r["layers"]], ":", color=colour[m])
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=6)
    return save(fig, path)


def structural_plot(results: dict[str, Any], path: Path) -> Path | None:
    models = [m for m, r in results.items() if "structural" in r.get("probe", {})]
    if not models:
        return None
    fig = figure(13, 4)
    col = colours(len(models))
    for p, (key, metric, title) in enumerate((("distance", "uuas", "UUAS (dotted: control trees)"),
                                              ("distance", "dspr", "distance Spearman"),
                                              ("depth", "root_accuracy", "root accuracy (dotted: control)"))):
        ax = fig.add_subplot(1, 3, p + 1)
        for c, m in zip(col, models):
            layers = results[m]["probe"]["structural"]
            ax.plot([layer[key][metric] for layer in layers], marker="o", color=c, label=m)
            if metric != "dspr":
                ax.plot([layer[f"{key}_control"][metric] for layer in layers], ":", color=c)
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    return save(fig, path)


def heatmaps(values: dict[str, Any], path: Path, title: str) -> Path:
    fig = figure(3.2 * len(values), 3.2)
    for p, (name, grid) in enumerate(values.items()):
        ax = fig.add_subplot(1, len(values), p + 1)
        g = np.asarray(grid, dtype=np.float64)
        im = ax.imshow(g, aspect="auto", cmap="viridis")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title)
    return save(fig, path)


def write_figures(results: dict[str, Any], out: Path) -> list[str]:
    """Every figure the results allow; returns the file names."""
    made = [contextuality_plot(results, out / "contextuality.png"), probe_plot(results, out / "probes.png"),
            structural_plot(results, out / "structural.png")]
    for m, r in results.items():
        if "attention" in r:
            made.append(heatmaps(r["attention"]["stats"], out / f"attention-{slug(m)}.png", f"{m}: attention"))
        if "heads" in r:
            made.append(heatmaps({"importance": r["heads"]["importance"]}, out / f"importance-{slug(m)}.png",
                                 f"{m}: head importance"))
    return [p.name for p in made if p is not None]


def _fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.3f}" for x in xs)


def _pipeline(probes: dict[str, Any]) -> list[str]:
    """Tenney et al.'s ordering: each task's center of gravity and expected layer side by side."""
    rows = [[m, task, f"{p[task]['cumulative']['center_of_gravity']:.2f}", f"{p[task]['mix']['expected_layer']:.2f}"]
            for m, p in probes.items() for task in ("pos", "relations") if task in p]
    if not any(r[1] == "relations" for r in rows):
        return []
    return (["## Where each task is solved (Tenney et al. 2019)", "",
             "Center of gravity of the cumulative linear probes and expected layer of the scalar mix; Tenney et al. "
             "find POS below the dependency tasks in BERT.", ""]
            + markdown_table(["model", "task", "center of gravity", "expected layer"], rows) + [""])


def report(doc: dict[str, Any], figures: list[str]) -> str:
    """``report.md``: the tables per analysis, then the figures."""
    results = doc["models"]
    lines = [f"# ptm analyse: {', '.join(results)}", "", f"corpus: `{doc['corpus']}` ({doc.get('sentences', '?')} "
             f"sentences read); analyses: {', '.join(doc['what'])}; pooling: {doc['pooling']}; CPU: {doc['cpu']}, "
             f"{doc['threads']} thread(s); {doc['time_s']:.0f} s", ""]
    ctx = {m: r["contextuality"] for m, r in results.items() if "contextuality" in r}
    if ctx:
        lines += ["## Contextuality (Ethayarajh 2019)", "", "Per layer, 0 = embeddings.", ""]
        head = ["model", "statistic", "per layer", "Ethayarajh (2019)"]
        rows = []
        for m, c in ctx.items():
            rows += [[m, "anisotropy", _fmt(c["anisotropy"]), PUBLISHED["anisotropy"]],
                     [m, "self-similarity (adjusted)", _fmt(c["adjusted"]["self_similarity"]), PUBLISHED["self_similarity"]],
                     [m, "intra-sentence (adjusted)", _fmt(c["adjusted"]["intra_sentence"]), PUBLISHED["intra_sentence"]],
                     [m, "MEV", _fmt(c["mev"]), ""], [m, "MEV (adjusted)", _fmt(c["adjusted"]["mev"]), PUBLISHED["mev"]],
                     [m, "words analysed", str(c["words"]), ""]]
            if c.get("static_vectors"):
                rows.append([m, "first-PC vectors", ", ".join(f"layer {k}: `{v}`" for k, v in c["static_vectors"].items()), ""])
        lines += markdown_table(head, rows) + [""]
    probes = {m: r["probe"] for m, r in results.items() if "probe" in r}
    for task, title in (("pos", "Part of speech"), ("relations", "Dependency relation labels")):
        have = {m: p[task] for m, p in probes.items() if task in p}
        if not have:
            continue
        lines += [f"## Probing: {title} (Hewitt & Liang 2019; Tenney et al. 2019)", ""]
        rows = [[m, kind, _fmt([layer[kind]["task"] for layer in p["layers"]]),
                 _fmt([layer[kind]["selectivity"] for layer in p["layers"]]),
                 f"{p['mix']['expected_layer']:.2f}", f"{p['cumulative']['center_of_gravity']:.2f}",
                 f"{p['majority_baseline']:.3f}"] for m, p in have.items() for kind in ("linear", "mlp")]
        lines += markdown_table(["model", "probe", "accuracy per layer", "selectivity per layer", "expected layer",
                                 "center of gravity", "majority"], rows) + [""]
    lines += _pipeline(probes)
    struct = {m: p["structural"] for m, p in probes.items() if "structural" in p}
    if struct:
        lines += ["## Structural probe (Hewitt & Manning 2019)", ""]
        rows = []
        for m, layers in struct.items():
            uuas = [layer["distance"]["uuas"] for layer in layers]
            best = int(np.nanargmax(uuas))
            rows.append([m, _fmt(uuas), _fmt([layer["distance"]["dspr"] for layer in layers]),
                         _fmt([layer["depth"]["root_accuracy"] for layer in layers]),
                         _fmt([layer["depth"]["nspr"] for layer in layers]),
                         _fmt([layer["uuas_selectivity"] for layer in layers]),
                         _fmt([layer["root_selectivity"] for layer in layers]), str(best)])
        lines += markdown_table(["model", "UUAS per layer", "DSpr. per layer", "root accuracy per layer",
                                 "NSpr. per layer", "UUAS selectivity", "root selectivity", "best layer (UUAS)"],
                                rows) + [""]
    for m, r in results.items():
        if "attention" not in r:
            continue
        st = r["attention"]["stats"]
        lines += [f"## Attention: {m} (Clark et al. 2019)", "", "Means over heads per layer:", ""]
        lines += markdown_table(["layer", *STATS], [[str(k), *[f"{np.mean(st[s][k]):.3f}" for s in STATS]]
                                                    for k in range(len(st["entropy"]))]) + [""]
        rels = r["attention"].get("relations", {})
        if rels:
            lines += ["Per relation (punctuation left out, as Clark et al.): the best head at finding the dependent's head "
                      "word, as the word the dependent attends to most (dep->head) or the word attending most to the "
                      "dependent (head<-dep), beside the best fixed offset.", ""]
            lines += markdown_table(["relation", "count", "best head (layer, head)", "direction", "accuracy",
                                     "best offset", "offset accuracy"],
                                    [[k, str(v["count"]), str(tuple(v["best_head"])), v.get("best_direction", "dep->head"),
                                      f"{v['best_accuracy']:.3f}", f"{v['baseline_offset']:+d}",
                                      f"{v['baseline_accuracy']:.3f}"]
                                     for k, v in [kv for kv in rels.items() if kv[0] != "punct"][:15]]) + [""]
        probe = r["attention"].get("probe")
        if probe:
            lines += [f"Attention-only probe (Clark et al. section 5; {probe['train_sentences']} training, "
                      f"{probe['test_sentences']} test sentences, {probe['updates']} updates): UAS {probe['uas']:.3f} "
                      f"(training {probe['train_uas']:.3f}); "
                      f"right-branching baseline {probe['right_branching_uas']:.3f}.", ""]
    lines += ["## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    return "\n".join(lines)


__all__ = ["PUBLISHED", "report", "write_figures"]
