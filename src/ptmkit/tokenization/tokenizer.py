"""``Tokenizer``: a thin layer over HF ``tokenizers`` shared by every model in ptmkit.

All kinds (see :mod:`ptmkit.tokenization.kinds`) expose the same special tokens
``[PAD] [UNK] [CLS] [SEP] [MASK]``, so masked and causal LM objectives work over any of them.
The file format is plain ``tokenizer.json``; ptmkit's kind is recovered from its structure.
Optionally (``extra_ids``) the vocabulary ends in T5's sentinel tokens ``<extra_id_0>`` ...
``<extra_id_{N-1}>``, which span-corruption objectives put in place of the spans they remove.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, models
from tokenizers import Tokenizer as HFTokenizer

from ptmkit.data.textfiles import TEXT, TextFormat, detect, has_text
from ptmkit.errors import PtmError, require_file, suggest
from ptmkit.fileio import atomic_write_text
from ptmkit.tokenization import kinds as K
from ptmkit.tokenization.languages import check_codes, language_tokens, languages_of
from ptmkit.tokenization.training import SUBWORD_KINDS, balanced_counts, text_lines, train_subword

SENTINEL = "<extra_id_{}>"  # T5's sentinel tokens, numbered from 0


def _is_cjk(ch: str) -> bool:
    """CJK ideographs (the ranges BERT's tokenizer isolates)."""
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class Tokenizer:
    """A trained tokenizer of one ``kind``: ``wordpiece``, ``bpe``, ``unigram``, ``char`` or ``word``."""

    def __init__(self, hf: HFTokenizer, kind: str, lowercase: bool) -> None:
        self._tok = hf
        # Files written by other tools may carry padding/truncation settings; ptmkit pads and
        # truncates itself, so both are switched off.
        self._tok.no_padding()
        self._tok.no_truncation()
        self.kind = kind
        self.lowercase = lowercase
        missing = [t for t in K.SPECIAL_TOKENS if self._tok.token_to_id(t) is None]
        if missing:
            raise PtmError(
                f"tokenizer lacks the special tokens {', '.join(missing)}; "
                "train it with `ptm tokenizer train` (which reserves them) or add them to the vocabulary"
            )
        if self._tok.post_processor is None:
            K.add_post_processor(self._tok)
        self.pad_id: int = self._tok.token_to_id(K.PAD)
        self.unk_id: int = self._tok.token_to_id(K.UNK)
        self.cls_id: int = self._tok.token_to_id(K.CLS)
        self.sep_id: int = self._tok.token_to_id(K.SEP)
        self.mask_id: int = self._tok.token_to_id(K.MASK)
        # <extra_id_0>, <extra_id_1>, ... while they exist (none unless trained with extra_ids)
        self.sentinel_ids: tuple[int, ...] = tuple(
            itertools.takewhile(lambda i: i is not None, (self._tok.token_to_id(SENTINEL.format(n)) for n in itertools.count()))
        )
        # <lang_en>, <lang_es>, ...: the languages it was trained on (none for a monolingual one)
        self.languages: tuple[str, ...] = languages_of({t.content: i for i, t in self._tok.get_added_tokens_decoder().items()})
        self.language_ids: tuple[int, ...] = tuple(self._tok.token_to_id(t) for t in language_tokens(self.languages))
        self.special_ids: frozenset[int] = frozenset(
            {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id, *self.sentinel_ids, *self.language_ids}
        )
        self._char_tables: tuple[np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_words(cls, words: Sequence[str], lowercase: bool = False) -> "Tokenizer":
        """A ``word`` tokenizer whose vocabulary is the special tokens (ids 0-4) then ``words`` in
        order (ids 5, 6, ...): the vocabulary of a word-vectors file."""
        vocab = {t: i for i, t in enumerate(K.SPECIAL_TOKENS)}
        for w in words:
            vocab.setdefault(w, len(vocab))
        if len(vocab) != len(K.SPECIAL_TOKENS) + len(words):
            raise PtmError("the word list repeats a word or holds a special token name ([PAD], [UNK], ...)")
        tok = K.build("word", lowercase)
        tok.model = models.WordLevel(vocab, unk_token=K.UNK)
        tok.add_special_tokens([AddedToken(t, special=True) for t in K.SPECIAL_TOKENS])
        return cls(tok, "word", lowercase)

    @classmethod
    def train(
        cls,
        files: Sequence[str | os.PathLike[str]],
        kind: str,
        vocab_size: int,
        min_frequency: int = 2,
        lowercase: bool = True,
        show_progress: bool = False,
        extra_ids: int = 0,
        fmt: TextFormat | None = None,
        languages: Sequence[str] | None = None,
        alpha: float = 0.5,
    ) -> "Tokenizer":
        """Train a tokenizer of ``kind`` on text ``files`` (streamed, line by line).

        ``files`` may also be JSON Lines, CSV/TSV or Parquet, compressed or not, read as the plain
        text they stand for (:mod:`ptmkit.data.textfiles`; ``fmt``: where their text is).

        Deterministic: the same files and arguments give the same ``tokenizer.json`` in every
        process (the subword kinds use ptmkit's trainers, see :mod:`ptmkit.tokenization.training`).
        ``min_frequency`` is the least count of a merged pair (``wordpiece``, ``bpe``) or of a kept
        token (``char``, ``word``); ``unigram`` ignores it.  ``show_progress`` draws HF's progress
        bar (``char``, ``word``).  ``extra_ids`` appends that many sentinel tokens as special tokens
        after the learnt vocabulary, ``<extra_id_{N-1}>`` first so that ``<extra_id_0>`` has the
        largest id, as in T5's vocabulary (the size grows to ``vocab_size + extra_ids``).

        ``languages``: the language of each file (``["en", "es", "es"]``; a language may have
        several files).  The subword vocabulary is then learnt from counts balanced by XLM's
        ``q_i ∝ p_i^alpha`` (:func:`~ptmkit.tokenization.training.balanced_counts`), and one special
        token ``<lang_XX>`` per language follows the vocabulary, in order of first appearance: the
        tokenizer's record of its languages (:attr:`languages`, :mod:`ptmkit.tokenization.languages`).
        """
        if not isinstance(extra_ids, int) or isinstance(extra_ids, bool) or extra_ids < 0:
            raise PtmError(f"tokenizer.extra_ids must be a non-negative integer (sentinel tokens), got {extra_ids!r}")
        check_kind(kind)
        if vocab_size < len(K.SPECIAL_TOKENS) + 1:
            raise PtmError(f"vocab_size must exceed the {len(K.SPECIAL_TOKENS)} special tokens, got {vocab_size}")
        paths = [str(f) for f in files]
        if not paths:
            raise PtmError("no training files given")
        fmt = fmt or TextFormat()
        for p in paths:
            require_file(p, "training file")
            detect(p)  # an archive or an unknown compression fails before any work
        if not any(has_text(p, fmt) for p in paths):
            # The trainer would return the special tokens alone (or bytes only, for bpe): a
            # tokenizer that turns every text into [UNK].
            raise PtmError(f"no text to train a tokenizer on: {', '.join(paths)} hold only blank lines or nothing")
        codes: tuple[str, ...] = ()
        if languages is not None:
            codes = check_codes(languages)
            if len(codes) != len(paths):
                raise PtmError(f"--languages names {len(codes)} language(s) for {len(paths)} file(s); give one code per "
                               f"file, in order (repeat a code for a language with several files)")
            if kind not in SUBWORD_KINDS:
                raise PtmError(f"--languages balances the subword vocabulary; use --kind wordpiece, bpe or unigram, not {kind}")
        tok = K.build(kind, lowercase)
        try:
            if kind in SUBWORD_KINDS:
                counted = balanced_counts(tok, paths, codes, alpha, fmt)[:2] if codes else None
                train_subword(tok, kind, paths, vocab_size, min_frequency, fmt, counted)
            elif all(detect(p) == (TEXT, None) for p in paths):
                tok.train(paths, K.trainer(kind, vocab_size, min_frequency, show_progress))
            else:  # decompressed or parsed here, the lines handed to HF's trainer
                tok.train_from_iterator(text_lines(paths, fmt), K.trainer(kind, vocab_size, min_frequency, show_progress))
        except PtmError:
            raise
        except Exception as exc:  # the Rust trainer reports bad bytes as a generic exception
            raise PtmError(f"cannot train a {kind} tokenizer on {', '.join(paths)}: {exc}") from exc
        if extra_ids:
            tok.add_special_tokens([SENTINEL.format(n) for n in reversed(range(extra_ids))])
        if codes:
            tok.add_special_tokens(language_tokens(dict.fromkeys(codes)))
        K.add_post_processor(tok)
        return cls(tok, kind, lowercase)

    @classmethod
    def from_wordpiece_vocab(cls, vocab_txt: str | os.PathLike[str], lowercase: bool = True) -> "Tokenizer":
        """A BERT tokenizer from a ``vocab.txt`` (one token per line, id = line number)."""
        path = Path(vocab_txt)
        if not path.is_file():
            raise PtmError(f"vocabulary file not found: {path}")
        vocab: dict[str, int] = {}
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                token = line.rstrip("\n").rstrip("\r")
                vocab.setdefault(token, i)
        missing = [t for t in K.SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise PtmError(f"{path} lacks the special tokens {', '.join(missing)}; it is not a BERT vocabulary")
        tok = K.build("wordpiece", lowercase)
        tok.model = models.WordPiece(vocab, unk_token=K.UNK, continuing_subword_prefix="##", max_input_chars_per_word=100)
        tok.add_special_tokens(list(K.SPECIAL_TOKENS))
        K.add_post_processor(tok)
        return cls(tok, "wordpiece", lowercase)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Tokenizer":
        """Load a ``tokenizer.json`` (or a directory holding ``tokenizer.json`` or a BERT ``vocab.txt``)."""
        p = Path(path)
        if p.is_dir():
            if (p / "tokenizer.json").is_file():
                p = p / "tokenizer.json"
            elif (p / "vocab.txt").is_file():
                return cls.from_wordpiece_vocab(p / "vocab.txt", lowercase=_hf_lowercase(p))
            else:
                raise PtmError(f"{p} holds neither tokenizer.json nor vocab.txt")
        if not p.is_file():
            raise PtmError(f"tokenizer file not found: {p}")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise PtmError(
                f"{p} is not a tokenizer.json: it is not UTF-8 text (a binary file?); give the tokenizer.json "
                f"written by `ptm tokenizer train`, or a model directory with tokenizer.json or vocab.txt"
            ) from None
        try:
            data = json.loads(text)
            hf = HFTokenizer.from_str(text)
        except Exception as exc:
            raise PtmError(f"{p} is not a valid tokenizer.json ({exc}); was it truncated?") from exc
        kind, lowercase = K.detect_kind(data)
        if kind is None:
            raise PtmError(f"{p}: unsupported tokenizer model {data.get('model', {}).get('type')!r}")
        return cls(hf, kind, lowercase)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``tokenizer.json`` (``path`` may be a directory); written to a temp file, then renamed."""
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        return atomic_write_text(p, self._tok.to_str(pretty=True))

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` (``[CLS] text [SEP]`` with ``add_special_tokens``)."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
        """Token ids of many texts, encoded in parallel by the Rust batch encoder."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def encode_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray]]:
        """Token ids of many texts and each token's character span ``int64 [n, 2]`` (start, end)
        in its text (extractive QA maps predicted tokens back to the text through these)."""
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [(e.ids, np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)) for e in encs]

    def encode_pair(self, a: str, b: str) -> tuple[list[int], list[int]]:
        """``[CLS] a [SEP] b [SEP]`` ids and token type ids (0 for a's part, 1 for b's)."""
        enc = self._tok.encode(a, b, add_special_tokens=True)
        return enc.ids, enc.type_ids

    def __call__(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None,
                 padding: bool | str = True, truncation: bool = False, max_length: int | None = None,
                 return_tensors: str | None = None, add_special_tokens: bool = True) -> dict[str, Any]:
        """Encode a text or a batch the way HF tokenizers do: ``tok(["a film", "a plot"],
        return_tensors="pt")`` gives ``input_ids``, ``attention_mask`` and ``token_type_ids``
        ``[B, T]`` (``[CLS] a [SEP] (b [SEP])`` with ``add_special_tokens``; ``text_pair`` makes
        sentence pairs, segment 1 for the second text).

        padding: ``True``/``"longest"`` (to the batch's longest), ``"max_length"`` (to
        ``max_length``) or ``False``; truncation: cut to ``max_length`` tokens, specials kept (the
        longer text of a pair first); return_tensors: ``"pt"`` (torch), ``"np"`` (int64 numpy) or
        ``None`` (lists; a single text then gives one list per key, not a batch of one)."""
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        pairs = None if text_pair is None else ([text_pair] if isinstance(text_pair, str) else list(text_pair))
        if pairs is not None and len(pairs) != len(texts):
            raise PtmError(f"{len(texts)} texts but {len(pairs)} text pairs: give one pair per text")
        if padding not in (True, False, "longest", "max_length", "do_not_pad"):
            raise PtmError(f"padding={padding!r}: give True or 'longest', 'max_length', or False")
        if (truncation or padding == "max_length") and max_length is None:
            raise PtmError("truncation and padding='max_length' need max_length=N (the model's limit, e.g. 512)")
        if return_tensors not in (None, "pt", "np"):
            raise PtmError(f"return_tensors={return_tensors!r}: give 'pt' (torch), 'np' (numpy) or None (lists)")
        backend = self._truncating(max_length) if truncation else self._tok
        inputs = list(zip(texts, pairs)) if pairs is not None else texts
        encs = backend.encode_batch(inputs, add_special_tokens=add_special_tokens)
        rows = {"input_ids": [e.ids for e in encs], "attention_mask": [e.attention_mask for e in encs],
                "token_type_ids": [e.type_ids for e in encs]}
        if padding in (True, "longest", "max_length"):
            width = max_length if padding == "max_length" else max((len(r) for r in rows["input_ids"]), default=0)
            fill = {"input_ids": self.pad_id, "attention_mask": 0, "token_type_ids": 0}
            rows = {k: [r + [fill[k]] * (width - len(r)) for r in v] for k, v in rows.items()}
        if return_tensors is None:
            return {k: v[0] for k, v in rows.items()} if single else rows
        if len({len(r) for r in rows["input_ids"]}) > 1:
            raise PtmError("texts of different lengths make no tensor without padding: pass padding=True")
        arrays = {k: np.asarray(v, dtype=np.int64).reshape(len(v), -1) for k, v in rows.items()}
        if return_tensors == "np":
            return arrays
        import torch  # only when tensors are asked for: tokenizing and preparing text need no torch

        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    def _truncating(self, max_length: int) -> HFTokenizer:
        """A copy of the backend that truncates to ``max_length`` tokens (cached per length)."""
        cache = self.__dict__.setdefault("_truncating_cache", {})
        if max_length not in cache:
            tok = HFTokenizer.from_str(self._tok.to_str())
            tok.enable_truncation(max_length, strategy="longest_first")
            cache[max_length] = tok
        return cache[max_length]

    def tokenize(self, text: str) -> list[str]:
        """Token strings of ``text`` (no special tokens)."""
        return self._tok.encode(text, add_special_tokens=False).tokens

    def word_ids(self, text: str) -> list[int | None]:
        """For each token of ``encode(text)``, the index of the word it belongs to.

        Words are the pre-tokenizer's units (for ``char``: whitespace-separated runs, each CJK
        character and each space a word of its own).  Used for whole-word masking.
        """
        enc = self._tok.encode(text, add_special_tokens=False)
        if self.kind != "char":
            return list(enc.word_ids)
        ids = np.asarray(enc.ids, dtype=np.int64)
        if ids.size == 0:
            return []
        return (np.cumsum(self._char_word_starts(ids)) - 1).tolist()

    def _char_word_starts(self, ids: np.ndarray) -> np.ndarray:
        """``char`` kind: a token starts a word at a space or CJK token, or right after one."""
        is_space, is_cjk = self._char_tables_()
        edge = is_space[ids] | is_cjk[ids]
        start = np.ones(ids.size, dtype=bool)
        start[1:] = edge[1:] | edge[:-1]
        return start

    def encode_batch_with_word_starts(
        self, texts: Sequence[str], segmenter: Callable[[str], np.ndarray] | None = None
    ) -> tuple[list[list[int]], np.ndarray]:
        """Token ids of many texts and, over all their tokens in order, whether each token begins
        a word: ``(ids per text, bool [total tokens])``.

        A word is what :meth:`word_ids` groups (the pre-tokenizer's words: for WordPiece a token
        starts one unless it is a ``##`` continuation; for byte-level BPE and unigram a word runs
        from its leading space; ``word``: every token).  The first token of each text starts a
        word.  ``segmenter`` (see :mod:`ptmkit.tokenization.segmenters`), given, maps a text to the
        character offsets where its words begin; a token then starts a word only if it also
        begins at one of those offsets (its character offset, from the encoding).  Where they
        disagree (a segmenter word begins strictly inside a token) the words fall back to single
        tokens: that token and the next each start a word, so no unit straddles the crossing.
        """
        texts = list(texts)
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        ids = [e.ids for e in encs]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        n = int(lengths.sum())
        first = np.cumsum(lengths) - lengths  # index of each text's first token
        if self.kind == "char":
            starts = self._char_word_starts(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=n))
        elif self.kind == "word":
            starts = np.ones(n, dtype=bool)
        else:
            # None (no word) becomes NaN, which differs from everything: a word of its own.
            words = np.array(list(itertools.chain.from_iterable(e.word_ids for e in encs)), dtype=np.float64)
            starts = np.ones(n, dtype=bool)
            starts[1:] = words[1:] != words[:-1]
        if segmenter is not None:
            for text, enc, f, m in zip(texts, encs, first.tolist(), lengths.tolist()):
                if m == 0:
                    continue
                begins = np.zeros(len(text) + 1, dtype=bool)
                begins[np.asarray(segmenter(text), dtype=np.int64)] = True
                span = np.clip(np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2), 0, len(text))
                own = starts[f : f + m] & begins[span[:, 0]]
                # A segmenter word beginning strictly inside a token: the two disagree there, so
                # fall back to single tokens: that token and the one after it each start a unit.
                before = np.cumsum(begins)  # segmenter starts at offsets <= c
                crossing = before[np.maximum(span[:, 1] - 1, span[:, 0])] - before[span[:, 0]] > 0
                own |= crossing
                own[1:] |= crossing[:-1]
                starts[f : f + m] = own
        starts[first[lengths > 0]] = True
        return ids, starts

    def _char_tables_(self) -> tuple[np.ndarray, np.ndarray]:
        if self._char_tables is None:
            n = self.vocab_size
            is_space = np.zeros(n, dtype=bool)
            is_cjk = np.zeros(n, dtype=bool)
            for token, i in self._tok.get_vocab(with_added_tokens=True).items():
                is_space[i] = token == K.SPACE
                is_cjk[i] = len(token) == 1 and _is_cjk(token)
            self._char_tables = (is_space, is_cjk)
        return self._char_tables

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (the kind's decoder restores spaces / joins subwords)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        """Number of ids (largest id + 1), added tokens included."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def get_vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    @property
    def backend(self) -> HFTokenizer:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tok

    def to_json(self) -> str:
        return self._tok.to_str()

    def sha256(self) -> str:
        """Digest of the serialised tokenizer (what a corpus records to detect a mismatch)."""
        return hashlib.sha256(self._tok.to_str(pretty=True).encode("utf-8")).hexdigest()

    def to_transformers(self) -> Any:
        """A ``transformers.PreTrainedTokenizerFast`` with the special tokens set (for HF export)."""
        try:
            from transformers import PreTrainedTokenizerFast
        except ImportError as exc:  # optional dependency
            raise PtmError("HF export needs transformers: pip install 'ptmkit[interop]'") from exc
        copy = HFTokenizer.from_str(self._tok.to_str())
        return PreTrainedTokenizerFast(
            tokenizer_object=copy,
            unk_token=K.UNK,
            pad_token=K.PAD,
            cls_token=K.CLS,
            sep_token=K.SEP,
            mask_token=K.MASK,
            do_lower_case=self.lowercase,
        )

    def __repr__(self) -> str:
        langs = f", languages={','.join(self.languages)!r}" if self.languages else ""
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, lowercase={self.lowercase}{langs})"


def check_kind(kind: str) -> None:
    if kind not in K.KINDS:
        raise PtmError(f"unknown tokenizer kind {kind!r}{suggest(kind, K.KINDS)}; kinds: {', '.join(K.KINDS)}")


def _hf_lowercase(model_dir: Path) -> bool:
    """``do_lower_case`` from an HF ``tokenizer_config.json`` (BERT default: True)."""
    cfg = model_dir / "tokenizer_config.json"
    if cfg.is_file():
        try:
            return bool(json.loads(cfg.read_text(encoding="utf-8")).get("do_lower_case", True))
        except json.JSONDecodeError:
            pass
    return True
