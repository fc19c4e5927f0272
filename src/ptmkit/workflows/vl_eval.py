"""``ptm evaluate --suite vl``: image–text retrieval and zero-shot classification on unseen concepts.

For each vision–language run, on the emoji set's *test concepts* (never seen in training):

* **retrieval** image -> text and text -> image, R@1 / R@5 / R@10 and MRR (and in ``vl.json`` image ->
  text with each text's mean score over the images subtracted, ``i2t_centered``: for the generative
  objectives, whose score ``log p(t | i)`` also holds the text's prior), the text being each
  concept's name in the locale, in every drawing style (the style trained on, and the one held out)
  and every locale asked for (English, and e.g. Spanish and Chinese names, for a model trained on
  English captions: zero-shot cross-lingual), with a random ranking's recall beside each;
* **zero-shot classification** of the test images into the emoji categories and subcategories by
  prompts ("an emoji of food & drink"), per style, with chance and the majority class beside it.

Every measure reads only the objective's ``score`` matrix (:mod:`ptmkit.vision.retrieval`).  Writes
``OUT/vl.json`` (every figure), ``OUT/vl.md`` (the tables) and ``OUT/vl.png`` (R@1 / R@10 per run and
condition, chance marked).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ptmkit import fileio
from ptmkit.errors import PtmError
from ptmkit.vision.augment import AugmentConfig, to_pixels
from ptmkit.vision.batches import tokenize
from ptmkit.vision.build import ImageTextDataConfig
from ptmkit.vision.data import ImageTextSet, available_styles, load_image_text, resize_images
from ptmkit.vision.load import VLRun, load_vl
from ptmkit.vision.retrieval import chance_recall, recall_at_k, zero_shot_accuracy
from ptmkit.workflows import report

log = logging.getLogger(__name__)
PROMPT = "an emoji of {}"
FILES = ("vl.json", "vl.md", "vl.png")


def _scores(run: VLRun, data: ImageTextSet, rows: np.ndarray, texts: list[str], max_len: int) -> np.ndarray:
    """``[len(rows), len(texts)]`` scores of the rows' images against ``texts``."""
    images = resize_images(np.asarray(data.images[rows]), run.model.image.image_size)
    pixels = to_pixels(images, AugmentConfig(), None)
    ids, mask = tokenize(run.tokenizer, texts, max_len)
    with torch.no_grad():
        return run.model.score(pixels, ids, mask).float().numpy()


def retrieval(run: VLRun, data: ImageTextSet, split: str, style: str, max_len: int) -> dict[str, Any]:
    """Both directions on ``split``'s named concepts in ``style``: one image and one name per concept."""
    rows = data.rows(split, style)
    if not len(rows):
        raise PtmError(f"no {split} concepts with a name in locale {data.locale!r} and style {style!r}")
    names = [data.text(int(c)) for c in data.concept[rows]]
    distinct = list(dict.fromkeys(names))
    label = {n: i for i, n in enumerate(distinct)}
    image_labels = np.array([label[n] for n in names])
    text_labels = np.arange(len(distinct))
    s = _scores(run, data, rows, distinct, max_len)
    return {"images": len(rows), "texts": len(distinct),
            "i2t": recall_at_k(s, image_labels, text_labels), "t2i": recall_at_k(s.T, text_labels, image_labels),
            # each text's mean score over the images removed: a generative score's text prior (log p(t))
            "i2t_centered": recall_at_k(s - s.mean(axis=0, keepdims=True), image_labels, text_labels),
            "chance_i2t": chance_recall(image_labels, text_labels), "chance_t2i": chance_recall(text_labels, image_labels)}


def zero_shot(run: VLRun, data: ImageTextSet, split: str, style: str, field: str, max_len: int) -> dict[str, Any]:
    """Classify ``split``'s images of ``style`` into ``field`` (categories or subcategories) by prompts."""
    values = getattr(data, field)
    rows = np.array([r for r in data.rows(split, style, named=False) if values[data.concept[r]]])
    truth = [values[data.concept[r]] for r in rows]
    classes = sorted({v for v in values if v})
    index = {c: i for i, c in enumerate(classes)}
    labels = np.array([index[t] for t in truth])
    s = _scores(run, data, rows, [PROMPT.format(c.replace("-", " ").lower()) for c in classes], max_len)
    return {"images": len(rows), "classes": len(classes), "accuracy": zero_shot_accuracy(s, labels),
            "chance": 1.0 / len(classes), "majority": float(np.bincount(labels).max() / len(labels))}


def evaluate_run(run: VLRun, data_root: str, locales: Sequence[str], styles: Sequence[str] | None,
                 split: str = "test") -> dict[str, Any]:
    """Every measure for one run (see the module docstring)."""
    cfg = ImageTextDataConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in run.config["data"].items()})
    trained = list(cfg.styles)
    available = available_styles(data_root)
    styles = list(styles or [s for s in dict.fromkeys([*trained, *available]) if s in available])
    out: dict[str, Any] = {"trained_styles": trained, "objective": run.config["objective"]["name"],
                           "image_encoder": run.config["vision"]["encoder"], "retrieval": [], "zero_shot": []}
    english = load_image_text(data_root, styles, "en", image_size=run.model.image.image_size)
    for style in styles:
        out["retrieval"].append({"style": style, "locale": "en", **retrieval(run, english, split, style, cfg.max_len)})
        for field in ("categories", "subcategories") if any(english.categories) else ():
            out["zero_shot"].append({"style": style, "field": field,
                                     **zero_shot(run, english, split, style, field, cfg.max_len)})
    for locale in locales if available_styles(data_root) != ["user"] else ():  # a folder has one caption language
        if locale != "en":
            other = load_image_text(data_root, trained[:1], locale)
            out["retrieval"].append({"style": trained[0], "locale": locale,
                                     **retrieval(run, other, split, trained[0], cfg.max_len)})
    return out


def evaluate_vl(models: Sequence[tuple[str, Path]], out: str | Path, data: str = "emoji",
                locales: Sequence[str] = ("en", "es", "zh"), styles: Sequence[str] | None = None) -> dict[str, Any]:
    """Evaluate each ``(label, run)`` and write ``vl.json`` / ``vl.md`` / ``vl.png`` into ``out``."""
    out = Path(out)
    results = {}
    for label, path in models:
        log.info("vision-language evaluation of %s", label)
        results[label] = evaluate_run(load_vl(path), data, locales, styles)
    out.mkdir(parents=True, exist_ok=True)
    fileio.atomic_write_text(out / "vl.json", json.dumps(results, indent=1) + "\n")
    fileio.atomic_write_text(out / "vl.md", markdown(results))
    figure(results, out / "vl.png")
    return results


def markdown(results: dict[str, Any]) -> str:
    """The retrieval and zero-shot tables, chance beside each figure."""
    lines = ["## Retrieval on unseen concepts (R@1 / R@5 / R@10; chance in brackets)", ""]
    rows = []
    for label, r in results.items():
        for cond in r["retrieval"]:
            seen = "held out" if cond["style"] not in r["trained_styles"] and cond["style"] != "user" else "trained"
            cells = [f"{cond[d][f'R@{k}']:.3f}" for d in ("i2t", "t2i") for k in (1, 5, 10)]
            chance = f"({cond['chance_i2t']['R@1']:.3f} / {cond['chance_i2t']['R@10']:.3f})"
            rows.append([label, r["objective"], f"{cond['style']} ({seen})", cond["locale"], str(cond["texts"]),
                         *cells, chance])
    lines += report.markdown_table(["run", "objective", "style", "locale", "concepts", "i→t R@1", "R@5", "R@10",
                                    "t→i R@1", "R@5", "R@10", "chance R@1 / R@10"], rows)
    lines += ["", "## Zero-shot classification of unseen concepts' images", ""]
    rows = [[label, r["objective"], z["style"], z["field"], str(z["classes"]), f"{z['accuracy']:.3f}",
             f"{z['chance']:.3f}", f"{z['majority']:.3f}"] for label, r in results.items() for z in r["zero_shot"]]
    lines += report.markdown_table(["run", "objective", "style", "classes", "n", "accuracy", "chance", "majority"], rows)
    return "\n".join(lines) + "\n"


def figure(results: dict[str, Any], path: Path) -> None:
    """Image -> text R@1 and R@10 per run and condition, a random ranking's R@1 / R@10 as ticks."""
    conditions = list(dict.fromkeys(f"{c['style']}/{c['locale']}" for r in results.values() for c in r["retrieval"]))
    fig = report.figure(min(12.0, 3.0 + 2.0 * len(conditions)), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(results))
    for j, ((label, r), colour) in enumerate(zip(results.items(), report.colours(len(results)))):
        by = {f"{c['style']}/{c['locale']}": c for c in r["retrieval"]}
        for i, cond in enumerate(conditions):
            if cond not in by:
                continue
            x = i + (j - (len(results) - 1) / 2) * width
            ax.bar(x, by[cond]["i2t"]["R@10"], width, color=colour, alpha=0.35)
            ax.bar(x, by[cond]["i2t"]["R@1"], width, color=colour, label=label if i == 0 else None)
            for k in ("R@1", "R@10"):
                ax.plot([x - width / 2, x + width / 2], [by[cond]["chance_i2t"][k]] * 2, color="black", lw=1)
    ax.set_xticks(range(len(conditions)), conditions)
    ax.set_ylabel("image → text recall")
    ax.set_title("unseen concepts: R@1 (dark), R@10 (light); black lines: chance", fontsize=10)
    ax.legend(fontsize=7)
    report.save(fig, path)
