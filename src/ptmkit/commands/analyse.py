"""``ptm analyse``: what pre-trained models have learned (contextuality, probes with controls,
attention and head statistics), written as report.md, figures and analysis.json."""

from __future__ import annotations

import argparse

HELP = "analyse pre-trained models: contextuality, probes with control tasks, attention heads, head importance"

DESCRIPTION = """\
Analyse one or more pre-trained models on a corpus (one sentence per line) and write OUT/report.md,
OUT/figures/*.png and OUT/analysis.json.  RUN is a pre-training run or checkpoint of any encoder
(Transformer, GPT, ELMo/LSTM, an encoder-decoder's encoder), an HF transformers directory, or a
fine-tuned model (OUT/pretrained-seed0 of ptm finetune: its encoder after fine-tuning, such as a
SimCSE sentence encoder's).

--what (comma-separated; default all four):
  contextuality  Ethayarajh (2019): per layer, self-similarity of the words with at least 5
                 occurrences, intra-sentence similarity, maximum explainable variance, the
                 anisotropy baseline (mean cosine of random word occurrences) and the values
                 adjusted for it.  --static-layers K,...: each word's first principal component at
                 layer K written to OUT/vectors/ as a word2vec text file (ptm vectors evaluate).
  probe          linear and one-hidden-layer probes on every frozen layer for part of speech
                 (--pos-task, default brown-pos) and, with --trees, dependency relation labels and
                 Hewitt & Manning's distance and depth probes (UUAS, distance Spearman, root
                 accuracy); each beside its control task (Hewitt & Liang's selectivity), with
                 Tenney's expected layer and cumulative center of gravity.
  attention      per head: entropy and the share of attention on [CLS], [SEP], punctuation, the
                 token itself, the previous and the next token (Clark et al. 2019); with --trees,
                 how often each head's most-attended word is the syntactic head, per relation and
                 in both directions, beside the best fixed-offset baseline, and the attention-only
                 probe (a linear combination of all heads' maps trained to find each word's head;
                 UAS beside the right-branching baseline).  Refused for LSTM encoders.
  heads          head importance (Michel et al. 2019) under the model's own pre-training loss on
                 the corpus, as a layer x head heatmap (needs the model's pre-training heads).

--trees takes a JSONL file (tokens, heads: 1-based with 0 for the root, relations) or a data set:
  en-spacy-trees    Brown parsed by spaCy en_core_web_sm (silver; ptm data get en-spacy-trees
                    needs pip install 'ptmkit[analysis]')
  turkish-treebank  the Turkish Web Treebank (gold)

--random-twins adds, for every RUN, a randomly initialised model of the same architecture.
Everything is seeded (--seed) and runs on --threads threads: the same command gives the same
numbers.  The corpus is streamed; --max-sentences bounds how much of it is read.
"""

EPILOG = """\
examples:
  ptm analyse runs/bert-mini --corpus text.txt -o out/analysis
  ptm analyse runs/bert-mini runs/gpt2 runs/elmo --corpus text.txt --what contextuality,probe --random-twins -o out/a
  ptm analyse ckpt/minilm --corpus text.txt --trees en-spacy-trees --static-layers 1,3 -o out/minilm
  ptm analyse ckpt/minilm --corpus text.txt --what probe,attention --trees turkish-treebank --random-twins -o out/tr
"""


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer numbers separated by commas, e.g. 1,3; got {text!r}") from None


def _pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TRAIN,TEST sentence counts, e.g. 1000,300; got {text!r}") from None
    return a, b


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyse", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN", help="pre-training runs, checkpoints or HF directories")
    p.add_argument("--corpus", required=True, metavar="TEXT", help="text file, one sentence per line")
    p.add_argument("--what", default="contextuality,probe,attention,heads",
                   help="analyses, comma-separated (default: contextuality,probe,attention,heads)")
    p.add_argument("--label", dest="labels", action="append", metavar="NAME",
                   help="a name for each RUN in the report (repeat once per RUN; default: the directory name)")
    p.add_argument("--random-twins", action="store_true", help="add a random-init model of each RUN's architecture")
    p.add_argument("--static-layers", type=_ints, default=[1], metavar="K,...",
                   help="layers whose first-PC word vectors are written (default: 1)")
    p.add_argument("--max-sentences", type=int, default=5000, metavar="N",
                   help="corpus sentences read for contextuality (default: 5000; 0: all)")
    p.add_argument("--max-words", type=int, default=2000, metavar="N",
                   help="most frequent words analysed for self-similarity and MEV (default: 2000)")
    p.add_argument("--pooling", choices=("first", "mean"), default="first",
                   help="a word's vector: its first piece's (default) or the mean of its pieces")
    p.add_argument("--pos-task", default="brown-pos", help="tagging task for the POS probe (default: brown-pos)")
    p.add_argument("--trees", default=None, metavar="NAME|FILE",
                   help="dependency trees: en-spacy-trees, turkish-treebank, or a JSONL file of tokens/heads/relations")
    p.add_argument("--probe-sentences", type=_pair, default=(1000, 300), metavar="TRAIN,TEST",
                   help="sentences the probes train and test on (default: 1000,300)")
    p.add_argument("--probe-epochs", type=int, default=10, metavar="N", help="probe training epochs (default: 10)")
    p.add_argument("--attention-sentences", type=int, default=500, metavar="N",
                   help="corpus sentences for the attention statistics (default: 500)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default: 0)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="PyTorch threads (default: 1)")
    p.add_argument("--out", "-o", required=True, metavar="OUT", help="output directory: new, empty, or an earlier analysis")
    p.add_argument("--overwrite", action="store_true", help="replace the analysis ptm wrote in OUT")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmkit.workflows.analyse import analyse  # the heavy imports, when the command runs

    analyse(args.runs, args.corpus, args.out, what=args.what, random_twins=args.random_twins, labels=args.labels,
            static_layers=args.static_layers, max_sentences=args.max_sentences or None, max_words=args.max_words,
            pooling=args.pooling, pos_task=args.pos_task, trees=args.trees, probe_sentences=args.probe_sentences,
            probe_epochs=args.probe_epochs, attention_sentences=args.attention_sentences, seed=args.seed,
            threads=args.threads, overwrite=args.overwrite)
    return 0
