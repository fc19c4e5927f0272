"""``ptm evaluate --suite xling``: what a multilingual encoder shares across languages, per layer.

For each model, on held-out books only (the recipes split by book, :mod:`ptmkit.data.sources.bible_books`):

Each set is a seeded random sample of its split (``limit`` verses), so every held-out book is in it.

* **verse retrieval** P@1, English -> X and X -> English, for X = Spanish and Chichewa
  (``bible-multilingual``'s test verses) and Koine Greek (``bible-greek-alignments``: its English
  side is the Berean Standard Bible), every layer, with and without per-language mean-centering;
* **bilingual lexicon induction** P@1, English -> Spanish, against FreeDict (``freedict-en-es``):
  the embedding layer (no context) and, per layer, words' contextual vectors averaged over the
  test and dev verses; source words are the dictionary's words found in those verses, candidates
  every Spanish word found there;
* **word alignment**, Greek -> English, against the manual links of ``bible-greek-alignments``'
  test verses: SimAlign's Argmax and IterMax per layer (precision, recall, AER), beside IBM
  Model 1 trained on the training and test verses (:func:`~ptmkit.analysis.word_alignment.dataset_baseline`).

A language the model's tokenizer was not trained on is skipped (noted in the results).  The
zero-shot transfer tasks of the suite (``bible-genre-en-es``, ``bible-genre-en-ny``) and the
in-language ``bible-genre-ny`` run through ``ptm evaluate``'s fine-tuning protocol beside this.

Writes ``OUT/xling.json`` (every figure), ``OUT/xling.md`` (best layer per measure and the
centering gain) and ``OUT/xling.png`` (retrieval P@1 per layer).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit import fileio
from ptmkit.analysis import xling as X
from ptmkit.analysis.models import load_subject
from ptmkit.analysis.word_alignment import alignment_scores, argmax_align, dataset_baseline, itermax_align
from ptmkit.data.sources.base import fetch
from ptmkit.workflows import report

log = logging.getLogger(__name__)

TRANSFER_TASKS = ("bible-genre-en-es", "bible-genre-en-ny", "bible-genre-ny")
RETRIEVAL = (("es", "bible-multilingual", "parallel/en-es.test.jsonl"),
             ("ny", "bible-multilingual", "parallel/en-ny.test.jsonl"),
             ("grc", "bible-greek-alignments", "parallel/en-grc.test.jsonl"))
_WORD = re.compile(r"\w+|[^\w\s]")


def words_of(text: str) -> list[str]:
    """Words and punctuation marks, as the retrieval and lexicon measures cut a verse."""
    return _WORD.findall(text)


def _rows(path: Path, limit: int) -> list[dict[str, Any]]:
    """``limit`` rows of a JSON Lines file drawn at random (seed 0; in file order), or all of them."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) <= limit:
        return rows
    return [rows[int(i)] for i in np.sort(np.random.default_rng(0).choice(len(rows), size=limit, replace=False))]


def _usable(subject: Any, language: str) -> bool:
    languages = tuple(getattr(subject.tokenizer, "languages", ()))
    return not languages or language in languages


def _sentence_vectors(subject: Any, texts: list[str], language: str) -> np.ndarray:
    """``[n, L + 1, d]``: each text's mean token state per layer."""
    return np.stack([s for _, s in X.word_vectors(subject, [words_of(t) or ["."] for t in texts], language)])


def retrieval(subject: Any, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lang, source, rel in RETRIEVAL:
        if not _usable(subject, lang) or not _usable(subject, "en"):
            out[f"en-{lang}"] = {"skipped": f"the tokenizer was not trained on {lang}"}
            continue
        rows = _rows(fetch(source) / rel, limit)
        en = _sentence_vectors(subject, [r["en"] for r in rows], "en")
        other = _sentence_vectors(subject, [r[lang] for r in rows], lang)
        layers = range(en.shape[1])
        out[f"en-{lang}"] = {
            "pairs": len(rows),
            **{f"{a}->{b}{'/centered' if c else ''}": [X.retrieval_p1(s[:, k], t[:, k], c) for k in layers]
               for a, b, s, t in (("en", lang, en, other), (lang, "en", other, en)) for c in (False, True)},
        }
    return out


def lexicon(subject: Any, limit: int) -> dict[str, Any]:
    if not (_usable(subject, "en") and _usable(subject, "es")):
        return {"skipped": "the tokenizer was not trained on en and es"}
    gold: dict[str, set[str]] = {}
    with open(fetch("freedict-en-es") / "en-es.tsv", encoding="utf-8") as f:
        for line in f:
            src, _, tgt = line.rstrip("\n").partition("\t")
            if src and tgt:
                gold.setdefault(src, set()).add(tgt)
    root = fetch("bible-multilingual")
    rows = _rows(root / "parallel/en-es.test.jsonl", limit) + _rows(root / "parallel/en-es.dev.jsonl", limit)
    en_text = [[w.lower() for w in words_of(r["en"])] for r in rows]
    es_text = [[w.lower() for w in words_of(r["es"])] for r in rows]
    es_vocab = sorted({w for s in es_text for w in s if w.isalpha()})
    en_vocab = sorted({w for s in en_text for w in s if w in gold})
    en_words, en_ctx = X.contextual_averages(subject, en_text, "en", en_vocab)
    es_words, es_ctx = X.contextual_averages(subject, es_text, "es", es_vocab)
    out: dict[str, Any] = {"verses": len(rows)}
    for center in (False, True):
        key = "/centered" if center else ""
        p1, n = X.bli_p1(en_words, X.embedding_vectors(subject, en_words), es_words,
                         X.embedding_vectors(subject, es_words), gold, center)
        out[f"embedding{key}"], out["words"] = p1, n
        out[f"contextual{key}"] = [X.bli_p1(en_words, en_ctx[:, k], es_words, es_ctx[:, k], gold, center)[0]
                                   for k in range(en_ctx.shape[1])]
    return out


def alignment(subject: Any, limit: int) -> dict[str, Any]:
    if not (_usable(subject, "en") and _usable(subject, "grc")):
        return {"skipped": "the tokenizer was not trained on en and grc"}
    rows = [r for r in _rows(fetch("bible-greek-alignments") / "test.jsonl", limit) if r["grc"] and r["en"]]
    grc = list(X.word_vectors(subject, [r["grc"] for r in rows], "grc"))
    en = list(X.word_vectors(subject, [r["en"] for r in rows], "en"))
    gold = [{tuple(link) for link in r["links"]} for r in rows]
    out: dict[str, Any] = {"verses": len(rows)}
    for name, method in (("argmax", argmax_align), ("itermax", itermax_align)):
        per_layer = []
        for k in range(grc[0][0].shape[0]):
            predicted = []
            for (gv, _), (ev, _) in zip(grc, en):
                a, b = X._unit(gv[k]), X._unit(ev[k])  # words cut off by the model's length stay unaligned
                predicted.append(method(a @ b.T))
            per_layer.append(alignment_scores(predicted, gold))
        out[name] = per_layer
    return out


def xling(models: dict[str, str], out: str | Path, limit: int = 1000, alignment_verses: int = 500) -> dict[str, Any]:
    """The measures above for each model (``{label: path}``); ``limit`` verses per retrieval set
    (and per split for the lexicon's contexts), ``alignment_verses`` aligned verses."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"limit": limit, "alignment_verses": alignment_verses, "models": {}}
    for label, path in models.items():
        subject = load_subject(path, label)
        log.info("xling: %s", label)
        results["models"][label] = {"path": str(path), "retrieval": retrieval(subject, limit),
                                    "lexicon": lexicon(subject, limit), "alignment": alignment(subject, alignment_verses)}
    ibm = dataset_baseline(fetch("bible-greek-alignments"), "test")
    results["ibm_model1"] = ibm
    fileio.atomic_write_text(out / "xling.json", json.dumps(results, indent=1) + "\n")
    fileio.atomic_write_text(out / "xling.md", render(results))
    plot(results, out / "xling.png")
    return results


def _best(values: list[float]) -> tuple[float, int]:
    k = int(np.nanargmax(values))
    return float(values[k]), k


def render(results: dict[str, Any]) -> str:
    """The Markdown table: best layer per measure (value @ layer; layer 0 = embeddings)."""
    head = ["model"]
    rows = []
    for label, r in results["models"].items():
        cells: dict[str, str] = {}
        for pair, d in r["retrieval"].items():
            if "skipped" in d:
                continue
            for direction in (f"en->{pair[3:]}", f"{pair[3:]}->en"):
                best, k = _best(d[f"{direction}/centered"])
                cells[f"retrieval {direction} (centered)"] = f"{best:.3f} @{k} ({best - d[direction][k]:+.3f})"
        lex = r["lexicon"]
        if "skipped" not in lex:
            cells["BLI en->es embeddings"] = f"{lex['embedding/centered']:.3f}"
            best, k = _best(lex["contextual/centered"])
            cells["BLI en->es contextual"] = f"{best:.3f} @{k}"
        al = r["alignment"]
        if "skipped" not in al:
            aers = [s["aer"] for s in al["argmax"]]
            k = int(np.argmin(aers))
            cells["AER grc-en argmax"] = f"{aers[k]:.3f} @{k}"
        head += [c for c in cells if c not in head]
        rows.append((label, cells))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([label] + [cells.get(c, "–") for c in head[1:]]) + " |" for label, cells in rows]
    ibm = results.get("ibm_model1", {})
    note = ", ".join(f"{k} {v['aer']:.3f}" for k, v in ibm.items() if isinstance(v, dict) and "aer" in v)
    return "\n".join(lines) + (f"\n\nIBM Model 1 AER (Greek-English test): {note}\n" if note else "\n") + \
        "\nBest layer per measure (value @ layer, 0 = embeddings); retrieval in brackets: the gain of centering " \
        "at that layer.\n"


def plot(results: dict[str, Any], path: Path) -> None:
    """Retrieval P@1 (en -> X, centered solid, raw dashed) per layer, one panel per language pair."""
    pairs = [p for p, _, _ in RETRIEVAL]
    fig = report.figure(4 * len(pairs), 3.4)
    for ax, lang in zip(fig.subplots(1, len(pairs), squeeze=False)[0], pairs):
        for label, r in results["models"].items():
            d = r["retrieval"].get(f"en-{lang}", {})
            if "skipped" in d or not d:
                continue
            line, = ax.plot(d[f"en->{lang}/centered"], marker="o", label=f"{label} (centered)")
            ax.plot(d[f"en->{lang}"], linestyle="--", color=line.get_color())
        ax.set_title(f"en -> {lang} verse retrieval (dashed: raw)", fontsize=9)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel("P@1")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    report.save(fig, path)


__all__ = ["TRANSFER_TASKS", "alignment", "lexicon", "retrieval", "xling"]
