"""The five tokenizer kinds, each built from HF ``tokenizers`` components.

=========  ==================================================================================
kind       pipeline
=========  ==================================================================================
wordpiece  BERT normaliser (clean text, CJK characters split, optional lowercase + accent
           stripping) -> BertPreTokenizer -> WordPiece (``##`` continuation) -> WordPiece decoder
bpe        optional lowercase -> byte-level pre-tokenizer (GPT-2 regex, no prefix space) ->
           byte-level BPE (all 256 bytes in the alphabet, so nothing is ever unknown)
unigram    NFKC (+ lowercase) -> Metaspace (``▁`` marks a word start) -> Unigram LM (Kudo 2018)
char       NFC (+ lowercase), whitespace runs collapsed to one ``▁`` token -> one token per
           character (CJK included) -> Metaspace decoder restores the spaces
word       optional lowercase -> whitespace split -> one token per word (static models, NNLM)
=========  ==================================================================================

Training is deterministic (the same files give the same ``tokenizer.json`` in every process): the
subword kinds are learnt by :mod:`ptmkit.tokenization.training`, ``char`` and ``word`` by HF's
``WordLevelTrainer``.

Every kind reserves the same special tokens, first in the vocabulary; ids are always looked up by
token, because a loaded BERT ``vocab.txt`` puts them elsewhere.  The kind is recovered from the
``tokenizer.json`` structure itself (:func:`detect_kind`), so files stay loadable by HF tools.
"""

from __future__ import annotations

from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD, UNK, CLS, SEP, MASK]
KINDS = ("wordpiece", "bpe", "unigram", "char", "word")

# The character-level "space" token (the same symbol SentencePiece uses).
SPACE = "\u2581"


def _lower(lowercase: bool) -> list[Any]:
    return [normalizers.Lowercase()] if lowercase else []


def build(kind: str, lowercase: bool) -> Tokenizer:
    """An untrained tokenizer of ``kind`` (model with an empty vocabulary)."""
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
    elif kind == "bpe":
        tok = Tokenizer(models.BPE())
        seq = _lower(lowercase)
        if seq:
            tok.normalizer = normalizers.Sequence(seq)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), *_lower(lowercase)])
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="always")
    elif kind == "char":
        tok = Tokenizer(models.WordLevel(unk_token=UNK))
        # Collapse whitespace runs (tabs, newlines) to one space, which Metaspace turns into the
        # SPACE symbol; the split then isolates every character, so a space is a token of its own.
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), *_lower(lowercase)]
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never"),
                pre_tokenizers.Split(Regex("."), behavior="isolated"),
            ]
        )
        tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="never")
    elif kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token=UNK))
        seq = _lower(lowercase)
        if seq:
            tok.normalizer = normalizers.Sequence(seq)
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    else:  # callers validate first; this guards direct use
        raise ValueError(kind)
    return tok


def trainer(kind: str, vocab_size: int, min_frequency: int, show_progress: bool) -> Any:
    """HF's ``WordLevelTrainer`` for ``char`` and ``word`` (deterministic: it sorts by count, then
    token).  The subword kinds are trained by :mod:`ptmkit.tokenization.training` instead."""
    if kind not in ("char", "word"):
        raise ValueError(f"{kind} is trained by ptmkit.tokenization.training")
    return trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
        special_tokens=list(SPECIAL_TOKENS),
    )


def add_post_processor(tok: Tokenizer) -> None:
    """``[CLS] A [SEP]`` for single texts and ``[CLS] A [SEP] B [SEP]`` (type ids 0/1) for pairs."""
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    if cls_id is None or sep_id is None:
        return
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )


def detect_kind(data: dict[str, Any]) -> tuple[str | None, bool]:
    """(kind, lowercase) read off a parsed ``tokenizer.json``; kind is None if not recognised."""
    model = (data.get("model") or {}).get("type")
    norm = data.get("normalizer") or {}
    pre = data.get("pre_tokenizer") or {}

    def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
        subs = node.get("normalizers") or node.get("pretokenizers") or []
        return [node] + [x for s in subs for x in walk(s)]

    norms = walk(norm) if norm else []
    lowercase = any(n.get("type") == "Lowercase" or (n.get("type") == "BertNormalizer" and n.get("lowercase")) for n in norms)
    pre_types = {p.get("type") for p in walk(pre)} if pre else set()
    if model == "WordPiece":
        return "wordpiece", lowercase
    if model == "BPE":
        return "bpe", lowercase
    if model == "Unigram":
        return "unigram", lowercase
    if model == "WordLevel":
        return ("char" if "Split" in pre_types else "word"), lowercase
    return None, lowercase
