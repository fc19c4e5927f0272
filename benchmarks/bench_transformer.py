"""Training-step speed and memory of ptmkit's Transformer vs HF transformers, same config.

Workloads (fp32, CPU, ``torch.set_num_threads(2)`` by default):

* ``mlm``: BERT masked LM.  ptmkit: ``TransformerEncoder`` + ``MaskedLM`` (no NSP), whose head runs only on
  the masked positions.  HF: ``BertForMaskedLM`` with ``labels`` = -100 everywhere except the masked
  positions (the HF way; its head projects every position onto the vocabulary).
* ``clm``: GPT-2 causal LM.  ptmkit: ``TransformerEncoder`` (pre-LN, causal) + ``CausalLM``.  HF: ``GPT2LMHeadModel``
  with ``labels = input_ids``.
* ``roberta``: RoBERTa masked LM.  ptmkit: ``TransformerEncoder`` (one segment, no pooler, LayerNorm eps 1e-5) +
  ``RoBERTa``; HF: ``RobertaForMaskedLM`` (positions from pad + 1), ``labels`` as for ``mlm``.
* ``albert``: ALBERT n-gram MLM + sentence-order prediction, E = 128, all layers sharing one set of
  weights.  ptmkit: ``TransformerEncoder`` (``embedding_size=128``, ``sharing=all``) + ``ALBERT``; HF:
  ``AlbertForPreTraining`` with dense ``labels`` and ``sentence_order_label``.  Pairs of two segments.
* ``bart``: BART denoising.  ptmkit: ``EncoderDecoder`` + ``BartDenoising``; HF: ``BartForConditionalGeneration``
  with the same ``input_ids``, ``attention_mask``, ``decoder_input_ids`` and ``labels``.  Encoder and
  decoder have ``LAYERS // 2`` layers each (the same depth in all as the other workloads).  The
  batches come from the bart objective's own collate over random text: targets of ``seq_len`` tokens,
  sources noised by text infilling (30 %) + sentence permutation, so shorter and padded.
* ``xlnet``: XLNet permutation LM.  ptmkit: ``XLNetEncoder`` + ``PermutationLM``; HF: ``XLNetLMHeadModel``
  with ``perm_mask`` = not ``sees``, ``target_mapping`` = one-hot ``target_positions`` and ``labels``.
  Batches from the plm objective's collate over random text (``seq_len / 6`` n-gram targets, a random
  factorisation order per row); no memory on either side (the training step of a fresh segment).
  HF's XLNet has no SDPA path: both sides compute the relative attention explicitly.
* ``t5``: T5 span corruption.  ptmkit: ``EncoderDecoder`` configured as T5 v1.0 (pre-LN RMS norm, no
  biases, relative position buckets, ReLU, tied output rescaled) + ``SpanCorruption``; HF:
  ``T5ForConditionalGeneration`` at the same size (``LAYERS // 2`` layers per stack, 32 buckets) with
  the same ``input_ids``, ``attention_mask``, ``decoder_input_ids`` and ``labels``, from the t5
  objective's collate: examples of ``seq_len - 1`` tokens, 15 % of them in spans of mean length 3.
* ``electra``: ELECTRA (generator MLM + replaced token detection, λ = 50).  ptmkit: ``TransformerEncoder``
  (no pooler) + ``ELECTRA`` (a 1/4-width generator of the same depth sharing the embeddings, its MLM
  head on the masked positions only).  HF: ``ElectraForMaskedLM`` (the generator: hidden H/4, one
  head, FFN/4, ``embedding_size`` H, so it projects the shared embeddings H -> H/4 as ptmkit's does)
  and ``ElectraForPreTraining`` (the discriminator) with the generator's embedding module replaced by
  the discriminator's and its LM head tied to the shared word embeddings, joined by a few lines here:
  the generator's dense MLM ``labels``, Gumbel-max samples at the masked positions without gradient,
  the discriminator's ``labels`` = sample differs from the original.  Batches masked by the electra
  objective's masker (15 %: 85 % [MASK], 15 % kept).
* ``mlm_bf16``, ``clm_bf16`` (``--bf16`` adds them): ``mlm`` and ``clm`` with both frameworks' steps under
  ``torch.autocast("cpu", dtype=torch.bfloat16)`` (weights and AdamW state stay fp32, as
  ``train.precision=bf16`` trains).  Their keys compare precisions: ``mlm_bf16_speedup`` is ptmkit bf16
  tokens/s / ptmkit fp32 tokens/s (the ``mlm`` workload is measured with it), ``hf_mlm_bf16_speedup``
  the same for HF, ``mlm_bf16_vs_hf`` ptmkit bf16 / HF bf16, ``mlm_bf16_mem_ratio`` ptmkit / HF peak
  memory under bf16; likewise for ``clm_bf16``.  bf16 pays off only where the CPU has bf16 matrix
  instructions (AVX512-BF16 or AMX); elsewhere it may be slower than fp32.

Both sides get identical batches (same tokens, same masked positions), the same dropout (0.1),
the same optimizer (torch's fused AdamW, as both trainers use it) and SDPA attention.  One
training step = zero_grad + forward + backward + optimizer step; tokens/s counts input tokens
(batch x seq_len).

Speed: all four models live in this process and are timed in interleaved rounds (each round
runs every model for ``--steps`` steps, in rotating order), so drifts in machine load hit all
of them alike; the reported figure is the median over rounds.  The process first calls
:func:`ptmkit.train.heap.keep_freed_memory`, as ptmkit's Trainer does on CPU: freed tensors stay in
glibc's heap instead of being faulted in again every step.  It is process-wide, so the HF models
run with it too.

Memory: each (framework, workload) runs in a fresh process with glibc's mmap threshold fixed at
64 KiB (``MALLOC_MMAP_THRESHOLD_``), so every tensor buffer is its own mapping, unmapped when
freed, and the resident set size follows the live tensors rather than the allocator's cache.
After the imports and the batches, the process notes its RSS; it then builds the model and
optimizer and trains ``1 + --mem-steps`` steps.  ``peak_mb`` = peak RSS (``VmHWM``) minus that
baseline: weights + gradients + AdamW state + the step's activations and temporaries, the memory a
training run needs.  ``steady_mb`` is the RSS after the first step minus the baseline, and
``step_extra_mb`` the peak over the later steps above that steady state (the high-water mark is
reset through ``/proc/self/clear_refs``).

MFU: each model's training step is counted once by :func:`ptmkit.flops.counter` (the operations
that run: ptmkit's MLM head on the masked positions only, HF's on every position), and divided
by the median step time and this CPU's measured matrix-product peak for the step's dtype
(:func:`ptmkit.train.mfu.peak_flops`, same threads); ``WORKLOAD_mfu`` is ptmkit's, and the CPU's
name is in ``config``.

Run: ``python benchmarks/bench_transformer.py [--quick]``.  The last line printed is JSON with
``mlm_speedup``, ``clm_speedup``, ``bart_speedup``, ``t5_speedup``, ``xlnet_speedup`` (ptmkit tokens/s / HF
tokens/s), ``mlm_mem_ratio``, ``clm_mem_ratio``, ``bart_mem_ratio``, ``t5_mem_ratio``, ``xlnet_mem_ratio`` (ptmkit
peak / HF peak), and the same keys for ``roberta``, ``albert`` and ``electra`` (``electra_speedup``,
``electra_mem_ratio``); with ``--bf16`` also ``mlm_bf16_speedup`` and ``clm_bf16_speedup`` (see above).
``--workloads`` picks a subset.

``--account``: instead of the comparison, where each step's time goes (:mod:`step_account`, in
this directory): for every workload, ptmkit's and HF's step split into matrix products, attention
core, norms, activations, dropout, loss, optimizer, copies/casts, other element-wise work and
framework time, each in ms per step and share, with the matrix products' time at the measured peak
as their floor; printed as tables and written to ``--account-out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch

HIDDEN, LAYERS, HEADS, FFN, VOCAB, POSITIONS, DROPOUT = 256, 4, 4, 1024, 8000, 512, 0.1
TOKENIZER = SimpleNamespace(vocab_size=VOCAB, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
FRAMEWORKS = ("ptmkit", "hf")
WORKLOADS = ("mlm", "clm", "bart", "t5", "xlnet", "roberta", "albert", "electra")
BF16_WORKLOADS = ("mlm_bf16", "clm_bf16")  # the fp32 workload of the same name, under CPU bf16 autocast
ALL_WORKLOADS = WORKLOADS + BF16_WORKLOADS
ELECTRA_DISC_WEIGHT = 50.0


def base_workload(workload: str) -> str:
    """``mlm_bf16`` -> ``mlm``: the model and batches are the fp32 workload's."""
    return workload.removesuffix("_bf16")
ALBERT_E = 128
SENTINELS = 100  # T5's <extra_id_i>, the last ids of the vocabulary; the text never uses them
T5_TOKENIZER = SimpleNamespace(**vars(TOKENIZER), sentinel_ids=tuple(range(VOCAB - 1, VOCAB - 1 - SENTINELS, -1)))


def make_batches(workload: str, batch_size: int, seq_len: int, n: int, seed: int = 0) -> list[dict]:
    """``n`` batches as ``{"ptmkit": batch dict, "hf": kwargs}`` with identical content."""
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.objectives.mlm import MaskedLM, MLMConfig

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if workload in ("roberta", "albert"):
            out.append(roberta_albert_batch(workload, batch_size, seq_len, rng))
            continue
        if workload == "electra":
            out.append(electra_batch(batch_size, seq_len, rng))
            continue
        ids = rng.integers(5, VOCAB, size=(batch_size, seq_len)).astype(np.int64)
        if workload == "mlm":
            ids[:, 0], ids[:, -1] = TOKENIZER.cls_id, TOKENIZER.sep_id
            attention = np.ones_like(ids)
            cfg = TransformerConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=1, num_heads=HEADS,
                                    intermediate_size=FFN, max_position=POSITIONS)
            masker = MaskedLM(MLMConfig(nsp=False), TransformerEncoder(cfg), TOKENIZER)
            positions, labels = masker.mask_tokens(ids, attention, rng)
            dense = np.full_like(ids, -100)
            used = labels != -100
            dense[np.nonzero(used)[0], positions[used]] = labels[used]
            t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
            ours = {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": t(np.zeros_like(ids)),
                    "mlm_positions": t(positions), "mlm_labels": t(labels)}
            hf = {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": t(np.zeros_like(ids)),
                  "labels": t(dense)}
        elif workload == "bart":
            ours = bart_batch(batch_size, seq_len, rng)
            hf = dict(ours)
        elif workload == "xlnet":
            ours = xlnet_batch(batch_size, seq_len, rng)
            hf = {"input_ids": ours["input_ids"], "perm_mask": (~ours["sees"]).float(),
                  "target_mapping": torch.nn.functional.one_hot(ours["target_positions"], seq_len).float(),
                  "labels": ours["labels"]}
        elif workload == "t5":
            ours = t5_batch(batch_size, seq_len, rng)
            hf = dict(ours)
        else:
            stream = torch.from_numpy(rng.integers(5, VOCAB, size=(batch_size, seq_len + 1)).astype(np.int64))
            ours = {"input_ids": stream[:, :-1].contiguous(), "labels": stream[:, 1:].contiguous()}
            hf = {"input_ids": stream[:, :-1].contiguous(), "labels": stream[:, :-1].contiguous()}
        out.append({"ptmkit": ours, "hf": hf})
    return out


def _bart_config():
    from ptmkit.encoders.encoder_decoder import EncoderDecoderConfig

    return EncoderDecoderConfig(vocab_size=VOCAB, hidden_size=HIDDEN, encoder_layers=LAYERS // 2,
                                decoder_layers=LAYERS // 2, num_heads=HEADS, intermediate_size=FFN, max_position=POSITIONS,
                                dropout=DROPOUT, attention_dropout=DROPOUT, pad_token_id=TOKENIZER.pad_id,
                                decoder_start_token_id=TOKENIZER.sep_id)


def bart_batch(batch_size: int, seq_len: int, rng: np.random.Generator) -> dict:
    """One BART batch from the objective's collate over random documents (sentences of 5-30 tokens)."""
    from ptmkit.encoders.encoder_decoder import EncoderDecoder
    from ptmkit.objectives.bart import BartDenoising, DenoisingConfig

    n = batch_size * (seq_len - 2)
    lens = rng.integers(5, 31, size=n // 5)
    bounds = np.concatenate([[0], np.cumsum(lens)])
    bounds = bounds[bounds < n]
    sentences = np.concatenate([bounds, [n]]).astype(np.int64)
    corpus = SimpleNamespace(tokens=rng.integers(5, VOCAB, size=n).astype(np.int64), sentences=sentences,
                             documents=np.array([0, len(sentences) - 1], dtype=np.int64))
    cfg = _bart_config()
    objective = BartDenoising(DenoisingConfig(), EncoderDecoder(replace(cfg, encoder_layers=1, decoder_layers=1)), TOKENIZER)
    starts = np.arange(batch_size, dtype=np.int64) * (seq_len - 2)
    return objective.collate(corpus, np.stack([starts, starts + seq_len - 2], axis=1), rng)


def _xlnet_config():
    from ptmkit.encoders.xlnet import XLNetConfig

    return XLNetConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, intermediate_size=FFN,
                       dropout=DROPOUT, mem_len=0)


def xlnet_batch(batch_size: int, seq_len: int, rng: np.random.Generator) -> dict:
    """One plm batch from the objective's collate over a random token stream (one sentence)."""
    from ptmkit.encoders.xlnet import XLNetEncoder
    from ptmkit.objectives.plm import PermutationLM, PLMConfig

    n = batch_size * seq_len
    corpus = SimpleNamespace(tokens=rng.integers(5, VOCAB, size=n).astype(np.int64),
                             sentences=np.array([0, n], dtype=np.int64), documents=np.array([0, 1], dtype=np.int64))
    objective = PermutationLM(PLMConfig(separator=False), XLNetEncoder(replace(_xlnet_config(), num_layers=1)), TOKENIZER)
    return objective.collate(corpus, objective.example_spans(corpus, seq_len)[:batch_size], rng)


def roberta_albert_batch(workload: str, batch_size: int, seq_len: int, rng: np.random.Generator) -> dict:
    """One ``roberta`` / ``albert`` batch for both frameworks, masked by the objective's own masker
    (ALBERT: n-grams over words of one token; two segments and a random sentence-order label)."""
    ids = rng.integers(5, VOCAB, size=(batch_size, seq_len)).astype(np.int64)
    ids[:, 0], ids[:, -1] = TOKENIZER.cls_id, TOKENIZER.sep_id
    segment = np.zeros_like(ids)
    if workload == "albert":
        ids[:, seq_len // 2] = TOKENIZER.sep_id
        segment[:, seq_len // 2 + 1 :] = 1
    attention = np.ones_like(ids)
    objective = build_model("ptmkit", workload, layers=1).objective
    positions, labels = objective.mask_tokens(ids, attention, rng, np.ones_like(ids, dtype=bool))
    dense = np.full_like(ids, -100)
    used = labels != -100
    dense[np.nonzero(used)[0], positions[used]] = labels[used]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    ours = {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": t(segment),
            "mlm_positions": t(positions), "mlm_labels": t(labels)}
    hf = {"input_ids": t(ids), "attention_mask": t(attention), "labels": t(dense)}
    if workload == "albert":
        order = t(rng.integers(0, 2, size=batch_size))
        ours["sop_labels"], hf["sentence_order_label"], hf["token_type_ids"] = order, order, t(segment)
    return {"ptmkit": ours, "hf": hf}


def electra_batch(batch_size: int, seq_len: int, rng: np.random.Generator) -> dict:
    """One ``electra`` batch for both frameworks, masked by the electra objective's masker."""
    ids = rng.integers(5, VOCAB, size=(batch_size, seq_len)).astype(np.int64)
    ids[:, 0], ids[:, -1] = TOKENIZER.cls_id, TOKENIZER.sep_id
    attention = np.ones_like(ids)
    objective = build_model("ptmkit", "electra", layers=1).objective
    positions, labels = objective.mask_tokens(ids, attention, rng)
    dense = np.full_like(ids, -100)
    used = labels != -100
    dense[np.nonzero(used)[0], positions[used]] = labels[used]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    types = t(np.zeros_like(ids))
    ours = {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": types,
            "mlm_positions": t(positions), "mlm_labels": t(labels)}
    hf = {"input_ids": t(ids), "attention_mask": t(attention), "token_type_ids": types, "labels": t(dense)}
    return {"ptmkit": ours, "hf": hf}


class HFElectra(torch.nn.Module):
    """ELECTRA pre-training from HF's classes: ``ElectraForMaskedLM`` (generator) and
    ``ElectraForPreTraining`` (discriminator) sharing the embedding module (word, position and
    segment tables and their LayerNorm), the generator's output layer tied to those word embeddings."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        import transformers

        common = dict(vocab_size=VOCAB, embedding_size=HIDDEN, num_hidden_layers=layers, max_position_embeddings=POSITIONS,
                      hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT, pad_token_id=TOKENIZER.pad_id)
        disc = transformers.ElectraConfig(**common, hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN)
        gen = transformers.ElectraConfig(**common, hidden_size=HIDDEN // 4, num_attention_heads=max(1, HEADS // 4),
                                         intermediate_size=FFN // 4)
        for cfg in (disc, gen):
            cfg._attn_implementation = "sdpa"
        self.discriminator = transformers.ElectraForPreTraining(disc)
        self.generator = transformers.ElectraForMaskedLM(gen)
        self.generator.electra.embeddings = self.discriminator.electra.embeddings
        self.generator.generator_lm_head.weight = self.discriminator.electra.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask, token_type_ids, labels) -> SimpleNamespace:
        gen = self.generator(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels)
        chosen = labels != -100
        with torch.no_grad():  # Gumbel-max sampling at the masked positions, no gradient
            logits = gen.logits[chosen].float()
            u = torch.rand_like(logits).clamp_(1e-9, 1.0 - 1e-9)
            sampled = (logits - torch.log(-torch.log(u))).argmax(-1)
            corrupted = input_ids.clone()
            corrupted[chosen] = sampled
            replaced = (corrupted != torch.where(chosen, labels, input_ids)).long()
        disc = self.discriminator(input_ids=corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                  labels=replaced)
        return SimpleNamespace(loss=gen.loss + ELECTRA_DISC_WEIGHT * disc.loss)


def roberta_albert_model(framework: str, workload: str, layers: int) -> torch.nn.Module:
    """The ``roberta`` / ``albert`` models of both frameworks at the benchmark's size."""
    if framework == "ptmkit":
        from ptmkit.encoders import TransformerConfig, TransformerEncoder
        from ptmkit.objectives.albert import ALBERT, ALBERTConfig
        from ptmkit.objectives.base import PretrainModel
        from ptmkit.objectives.roberta import RoBERTa, RoBERTaConfig

        common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=layers, num_heads=HEADS, intermediate_size=FFN,
                      max_position=POSITIONS, dropout=DROPOUT, attention_dropout=DROPOUT)
        if workload == "roberta":
            encoder = TransformerEncoder(TransformerConfig(**common, type_vocab_size=1, pooler=False, layer_norm_eps=1e-5))
            return PretrainModel(encoder, RoBERTa(RoBERTaConfig(), encoder, TOKENIZER))
        encoder = TransformerEncoder(TransformerConfig(**common, embedding_size=ALBERT_E, sharing="all", activation="gelu_tanh"))
        return PretrainModel(encoder, ALBERT(ALBERTConfig(), encoder, TOKENIZER))
    import transformers

    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=layers, num_attention_heads=HEADS,
                  intermediate_size=FFN, hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT)
    if workload == "roberta":
        cfg = transformers.RobertaConfig(**common, max_position_embeddings=POSITIONS + TOKENIZER.pad_id + 1,
                                         type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=TOKENIZER.pad_id,
                                         bos_token_id=TOKENIZER.cls_id, eos_token_id=TOKENIZER.sep_id)
        cfg._attn_implementation = "sdpa"
        return transformers.RobertaForMaskedLM(cfg)
    cfg = transformers.AlbertConfig(**common, embedding_size=ALBERT_E, num_hidden_groups=1, max_position_embeddings=POSITIONS,
                                    hidden_act="gelu_new", classifier_dropout_prob=DROPOUT, pad_token_id=TOKENIZER.pad_id)
    cfg._attn_implementation = "sdpa"
    return transformers.AlbertForPreTraining(cfg)


def _t5_config():
    from ptmkit.encoders.encoder_decoder import EncoderDecoderConfig

    return EncoderDecoderConfig(vocab_size=VOCAB, hidden_size=HIDDEN, encoder_layers=LAYERS // 2,
                                decoder_layers=LAYERS // 2, num_heads=HEADS, intermediate_size=FFN, max_position=POSITIONS,
                                activation="relu", dropout=DROPOUT, attention_dropout=DROPOUT, activation_dropout=DROPOUT,
                                layer_norm_eps=1e-6, embedding_norm=False, norm="pre", norm_type="rms", bias=False,
                                positions="relative", relative_buckets=32, relative_max_distance=128,
                                scale_attention=False, scale_decoder_output=True, init="t5",
                                pad_token_id=TOKENIZER.pad_id, decoder_start_token_id=TOKENIZER.pad_id)


def t5_batch(batch_size: int, seq_len: int, rng: np.random.Generator) -> dict:
    """One T5 batch from the t5 objective's collate over random text (examples of ``seq_len - 1`` tokens)."""
    from ptmkit.encoders.encoder_decoder import EncoderDecoder
    from ptmkit.objectives.t5 import SpanCorruption, SpanCorruptionConfig

    n = batch_size * (seq_len - 1)
    corpus = SimpleNamespace(tokens=rng.integers(5, VOCAB - SENTINELS, size=n).astype(np.int64),
                             sentences=np.array([0, n], dtype=np.int64), documents=np.array([0, 1], dtype=np.int64))
    cfg = replace(_t5_config(), encoder_layers=1, decoder_layers=1)
    objective = SpanCorruption(SpanCorruptionConfig(), EncoderDecoder(cfg), T5_TOKENIZER)
    starts = np.arange(batch_size, dtype=np.int64) * (seq_len - 1)
    return objective.collate(corpus, np.stack([starts, starts + seq_len - 1], axis=1), rng)


def build_model(framework: str, workload: str, layers: int = LAYERS) -> torch.nn.Module:
    torch.manual_seed(0)
    workload = base_workload(workload)
    if workload in ("roberta", "albert"):
        return roberta_albert_model(framework, workload, layers)
    if workload == "electra":
        if framework == "hf":
            return HFElectra(layers)
        from ptmkit.encoders import TransformerConfig, TransformerEncoder
        from ptmkit.objectives.base import PretrainModel
        from ptmkit.objectives.electra import ELECTRA, ELECTRAConfig

        encoder = TransformerEncoder(TransformerConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=layers, num_heads=HEADS,
                                                       intermediate_size=FFN, max_position=POSITIONS, dropout=DROPOUT,
                                                       attention_dropout=DROPOUT, pooler=False))
        return PretrainModel(encoder, ELECTRA(ELECTRAConfig(disc_weight=ELECTRA_DISC_WEIGHT), encoder, TOKENIZER))
    if framework == "ptmkit" and workload == "xlnet":
        from ptmkit.encoders.xlnet import XLNetEncoder
        from ptmkit.objectives.base import PretrainModel
        from ptmkit.objectives.plm import PermutationLM, PLMConfig

        encoder = XLNetEncoder(_xlnet_config())
        return PretrainModel(encoder, PermutationLM(PLMConfig(), encoder, TOKENIZER))
    if framework == "ptmkit":
        from ptmkit.encoders import TransformerConfig, TransformerEncoder
        from ptmkit.objectives.base import PretrainModel
        from ptmkit.objectives.clm import CausalLM, CLMConfig
        from ptmkit.objectives.mlm import MaskedLM, MLMConfig

        if workload == "bart":
            from ptmkit.encoders.encoder_decoder import EncoderDecoder
            from ptmkit.objectives.bart import BartDenoising, DenoisingConfig

            encoder = EncoderDecoder(_bart_config())
            return PretrainModel(encoder, BartDenoising(DenoisingConfig(), encoder, TOKENIZER))
        if workload == "t5":
            from ptmkit.encoders.encoder_decoder import EncoderDecoder
            from ptmkit.objectives.t5 import SpanCorruption, SpanCorruptionConfig

            encoder = EncoderDecoder(_t5_config())
            return PretrainModel(encoder, SpanCorruption(SpanCorruptionConfig(), encoder, T5_TOKENIZER))
        common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, intermediate_size=FFN,
                      max_position=POSITIONS, dropout=DROPOUT, attention_dropout=DROPOUT)
        if workload == "mlm":
            # BertForMaskedLM has no pooler; neither does this model.
            cfg = TransformerConfig(**common, pooler=False)
            encoder = TransformerEncoder(cfg)
            return PretrainModel(encoder, MaskedLM(MLMConfig(nsp=False), encoder, TOKENIZER))
        cfg = TransformerConfig(**common, type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
                                embedding_norm=False, pooler=False, scaled_residual_init=True)
        encoder = TransformerEncoder(cfg)
        return PretrainModel(encoder, CausalLM(CLMConfig(), encoder, TOKENIZER))
    import transformers

    if workload == "xlnet":
        cfg = transformers.XLNetConfig(vocab_size=VOCAB, d_model=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_inner=FFN,
                                       ff_activation="gelu", dropout=DROPOUT, mem_len=None, use_mems_train=False,
                                       pad_token_id=TOKENIZER.pad_id)
        return transformers.XLNetLMHeadModel(cfg)
    if workload == "bart":
        cfg = transformers.BartConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS // 2,
                                      decoder_layers=LAYERS // 2, encoder_attention_heads=HEADS,
                                      decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                                      max_position_embeddings=POSITIONS, dropout=DROPOUT, attention_dropout=DROPOUT,
                                      activation_dropout=0.0, pad_token_id=TOKENIZER.pad_id, bos_token_id=TOKENIZER.cls_id,
                                      eos_token_id=TOKENIZER.sep_id, decoder_start_token_id=TOKENIZER.sep_id,
                                      forced_eos_token_id=None)
        cfg._attn_implementation = "sdpa"
        return transformers.BartForConditionalGeneration(cfg)
    if workload == "t5":
        cfg = transformers.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN,
                                    num_layers=LAYERS // 2, num_decoder_layers=LAYERS // 2, num_heads=HEADS,
                                    relative_attention_num_buckets=32, relative_attention_max_distance=128,
                                    dropout_rate=DROPOUT, feed_forward_proj="relu", pad_token_id=TOKENIZER.pad_id,
                                    eos_token_id=TOKENIZER.sep_id, decoder_start_token_id=TOKENIZER.pad_id)
        cfg._attn_implementation = "sdpa"
        return transformers.T5ForConditionalGeneration(cfg)
    if workload == "mlm":
        cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                      num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=POSITIONS,
                                      hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT)
        cfg._attn_implementation = "sdpa"
        return transformers.BertForMaskedLM(cfg)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FFN,
                                  n_positions=POSITIONS, resid_pdrop=DROPOUT, embd_pdrop=DROPOUT, attn_pdrop=DROPOUT,
                                  bos_token_id=TOKENIZER.sep_id, eos_token_id=TOKENIZER.sep_id)
    cfg._attn_implementation = "sdpa"
    return transformers.GPT2LMHeadModel(cfg)


class Runner:
    """One model + optimizer + its batches; ``step()`` is one training step."""

    def __init__(self, framework: str, workload: str, batches: list[dict]) -> None:
        self.framework = framework
        self.bf16 = workload.endswith("_bf16")
        self.model = build_model(framework, workload).train()
        # fused, as both trainers run it (ptmkit on CPU/CUDA; HF Trainer's default optim with torch >= 2.8)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.batches = [b[framework] for b in batches]
        self.i = 0

    def count_flops(self) -> float:
        """FLOPs of one training step (forward + backward) as they run, counted on one step."""
        from ptmkit.flops import counter

        with counter() as fc:
            self.step()
        return float(fc.get_total_flops())

    def step(self) -> float:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            if self.framework == "ptmkit":
                loss = self.model(batch).loss
            else:
                loss = self.model(**batch).loss
        loss.float().backward()
        self.opt.step()
        return float(loss.detach())


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_worker(framework: str, workload: str, batch_size: int, seq_len: int, steps: int, threads: int) -> dict:
    """Runs in a fresh process: peak RSS of training (see the module docstring), in MiB."""
    torch.set_num_threads(threads)
    if framework == "hf":
        import transformers  # noqa: F401  (import cost is not training memory)
    batches = make_batches(base_workload(workload), batch_size, seq_len, 2)
    base = _rss_kib("VmRSS")
    runner = Runner(framework, workload, batches)
    runner.step()  # allocates gradients and optimizer state
    steady = _rss_kib("VmRSS")
    first_peak = _rss_kib("VmHWM")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    for _ in range(steps):
        runner.step()
    peak = max(first_peak, _rss_kib("VmHWM"))
    return {
        "peak_mb": (peak - base) / 1024,
        "steady_mb": (steady - base) / 1024,
        "step_extra_mb": (_rss_kib("VmHWM") - steady) / 1024 if reset else None,
    }


def measure_memory(args: argparse.Namespace) -> dict:
    # Fixed mmap threshold: every tensor buffer over 64 KiB gets its own mapping, returned to the
    # system when freed, so RSS follows the live tensors instead of glibc's cached heap.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    out = {}
    for workload in args.workloads:
        for framework in FRAMEWORKS:
            cmd = [sys.executable, os.path.abspath(__file__), "--memory-worker", f"{framework}:{workload}",
                   "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                   "--mem-steps", str(args.mem_steps), "--threads", str(args.threads)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            if res.returncode != 0:
                raise RuntimeError(f"memory worker {framework}:{workload} failed:\n{res.stderr[-3000:]}")
            out[f"{framework}_{workload}"] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def measure_speed(args: argparse.Namespace) -> dict:
    from tqdm import tqdm

    from ptmkit.train.heap import keep_freed_memory

    keep_freed_memory()  # as the Trainer on CPU (see the module docstring); both frameworks get it

    runners = {}
    for workload in args.workloads:
        batches = make_batches(base_workload(workload), args.batch_size, args.seq_len, 4)
        for framework in FRAMEWORKS:
            runners[(framework, workload)] = Runner(framework, workload, batches)
    keys = list(runners)
    for key in keys:  # warm-up: first-call allocations, kernel selection
        for _ in range(args.warmup):
            runners[key].step()
    flops = {key: runners[key].count_flops() for key in keys}
    times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    cpu: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    tokens = args.batch_size * args.seq_len
    for r in tqdm(range(args.rounds), desc="rounds", file=sys.stderr):
        order = keys[r % len(keys):] + keys[: r % len(keys)]  # rotate who goes first
        for key in order:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                runners[key].step()
            times[key].append((time.perf_counter() - t0) / args.steps)
            cpu[key].append((time.process_time() - c0) / args.steps)
    # Wall-clock medians are the headline figures; CPU-time medians are printed beside them because
    # on a shared machine other processes stretch wall time but not this process's CPU time.
    return {f"{f}_{w}": {"tok_s": tokens / statistics.median(times[(f, w)]),
                         "cpu_tok_s": tokens / statistics.median(cpu[(f, w)]),
                         "step_s": statistics.median(times[(f, w)]), "flops_per_step": flops[(f, w)],
                         "step_s_all": [round(t, 4) for t in times[(f, w)]]} for (f, w) in keys}


def run_account(args: argparse.Namespace, peaks: dict[str, float]) -> None:
    """``--account``: every workload's step, ptmkit's and HF's, split by operator group."""
    import step_account

    from ptmkit.train.heap import keep_freed_memory
    from ptmkit.train.mfu import cpu_name

    keep_freed_memory()
    result: dict = {"cpu": cpu_name(), "threads": args.threads, "batch_size": args.batch_size, "seq_len": args.seq_len,
                    "peak_fp32_gflops": round(peaks["fp32"] / 1e9, 1), "peak_bf16_gflops": round(peaks["bf16"] / 1e9, 1),
                    "load_at_start": os.getloadavg()[0], "workloads": {}}
    for workload in args.workloads:
        batches = make_batches(base_workload(workload), args.batch_size, args.seq_len, 4)
        peak = peaks["bf16" if workload.endswith("_bf16") else "fp32"]
        for framework in FRAMEWORKS:
            runner = Runner(framework, workload, batches)
            for _ in range(max(1, args.warmup)):
                runner.step()
            matmul, attention = step_account.flops_split(runner.step)
            timed = step_account.median_step(runner.step, max(3, args.steps))
            acc = step_account.account(runner.step, args.account_steps, matmul, attention, peak, timed)
            result["workloads"][f"{framework}_{workload}"] = acc
            print(step_account.table(f"{framework} {workload}", acc), flush=True)
            del runner
    with open(args.account_out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and steps (about a minute)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=2, help="timed steps per model per round")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--mem-steps", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workloads", nargs="+", choices=ALL_WORKLOADS, default=list(WORKLOADS), help="which workloads to run")
    p.add_argument("--bf16", action="store_true",
                   help="add mlm_bf16 and clm_bf16 (CPU bf16 autocast) and the fp32 workloads they are compared with")
    p.add_argument("--account", action="store_true",
                   help="a per-operator account of each step instead of the comparison (see the docstring)")
    p.add_argument("--account-steps", type=int, default=3, help="profiled steps per model (--account)")
    p.add_argument("--account-out", default="step_account.json", help="where --account writes its JSON")
    p.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.memory_worker:
        framework, workload = args.memory_worker.split(":")
        print(json.dumps(memory_worker(framework, workload, args.batch_size, args.seq_len, args.mem_steps, args.threads)))
        return
    if args.quick:
        args.rounds, args.steps, args.warmup, args.mem_steps = 3, 1, 1, 1
    if args.bf16:
        args.workloads = list(dict.fromkeys([*args.workloads, *BF16_WORKLOADS]))
    # A bf16 workload's headline ratio is against the same framework in fp32: measure that too.
    args.workloads = list(dict.fromkeys([w for x in args.workloads for w in (base_workload(x), x)]))
    torch.set_num_threads(args.threads)

    import transformers

    from ptmkit.train import mfu

    # MFU against this CPU's measured matrix-product peak for the step's dtype (same threads),
    # probed first, while nothing else of this benchmark runs
    peaks = {"fp32": mfu.peak_flops("cpu", torch.float32, n=2048), "bf16": mfu.peak_flops("cpu", torch.bfloat16, n=2048)}
    if args.account:
        run_account(args, peaks)
        return
    speed = measure_speed(args)
    memory = measure_memory(args)
    result: dict = {
        "config": {"hidden": HIDDEN, "layers": LAYERS, "heads": HEADS, "ffn": FFN, "vocab": VOCAB,
                   "seq_len": args.seq_len, "batch_size": args.batch_size, "threads": args.threads,
                   "dtype": "fp32 (the *_bf16 workloads: bf16 autocast, fp32 weights)",
                   "rounds": args.rounds, "steps_per_round": args.steps, "torch": torch.__version__,
                   "cpu": mfu.cpu_name(), "peak_fp32_gflops": round(peaks["fp32"] / 1e9, 1),
                   "peak_bf16_gflops": round(peaks["bf16"] / 1e9, 1),
                   "transformers": transformers.__version__},
    }
    for workload in args.workloads:
        ours, theirs = speed[f"ptmkit_{workload}"], speed[f"hf_{workload}"]
        m_ours, m_theirs = memory[f"ptmkit_{workload}"], memory[f"hf_{workload}"]
        result[workload] = {
            "ptmkit_tok_s": round(ours["tok_s"], 1), "hf_tok_s": round(theirs["tok_s"], 1),
            "ptmkit_step_s": ours["step_s_all"], "hf_step_s": theirs["step_s_all"],
            "ptmkit_peak_mb": round(m_ours["peak_mb"], 1), "hf_peak_mb": round(m_theirs["peak_mb"], 1),
            "ptmkit_steady_mb": round(m_ours["steady_mb"], 1), "hf_steady_mb": round(m_theirs["steady_mb"], 1),
            "ptmkit_step_extra_mb": m_ours["step_extra_mb"], "hf_step_extra_mb": m_theirs["step_extra_mb"],
        }
        peak = peaks["bf16" if workload.endswith("_bf16") else "fp32"]
        for name, r in (("ptmkit", ours), ("hf", theirs)):
            result[workload][f"{name}_gflops_per_step"] = round(r["flops_per_step"] / 1e9, 2)
            result[workload][f"{name}_mfu"] = round(r["flops_per_step"] / r["step_s"] / peak, 4)
        result[f"{workload}_mfu"] = result[workload]["ptmkit_mfu"]
        result[f"{workload}_speedup"] = round(ours["tok_s"] / theirs["tok_s"], 3)
        result[f"{workload}_cpu_time_speedup"] = round(ours["cpu_tok_s"] / theirs["cpu_tok_s"], 3)
        result[f"{workload}_mem_ratio"] = round(m_ours["peak_mb"] / m_theirs["peak_mb"], 3)
        if workload != base_workload(workload):  # bf16: the speedup is over the same framework in fp32
            fp32 = base_workload(workload)
            result[f"{workload}_vs_hf"] = result.pop(f"{workload}_speedup")
            result[f"{workload}_cpu_time_vs_hf"] = result.pop(f"{workload}_cpu_time_speedup")
            result[f"{workload}_speedup"] = round(ours["tok_s"] / speed[f"ptmkit_{fp32}"]["tok_s"], 3)
            result[f"hf_{workload}_speedup"] = round(theirs["tok_s"] / speed[f"hf_{fp32}"]["tok_s"], 3)
    print(f"{result['config']['cpu']}, {args.threads} threads: measured matrix-product peak "
          f"fp32 {result['config']['peak_fp32_gflops']} GFLOP/s, bf16 {result['config']['peak_bf16_gflops']} GFLOP/s")
    for workload in args.workloads:
        r = result[workload]
        print(f"{workload}: MFU ptmkit {r['ptmkit_mfu']:.1%} ({r['ptmkit_gflops_per_step']} GFLOP/step), "
              f"HF {r['hf_mfu']:.1%} ({r['hf_gflops_per_step']} GFLOP/step)")
        if workload != base_workload(workload):
            print(f"{workload}: ptmkit {r['ptmkit_tok_s']:.0f} tok/s (x{result[workload + '_speedup']} over ptmkit fp32), "
                  f"HF {r['hf_tok_s']:.0f} tok/s (x{result['hf_' + workload + '_speedup']} over HF fp32); ptmkit/HF "
                  f"x{result[workload + '_vs_hf']}; peak training memory ptmkit {r['ptmkit_peak_mb']:.0f} MB, "
                  f"HF {r['hf_peak_mb']:.0f} MB (ratio {result[workload + '_mem_ratio']})")
            continue
        print(f"{workload}: ptmkit {r['ptmkit_tok_s']:.0f} tok/s, HF {r['hf_tok_s']:.0f} tok/s "
              f"(x{result[workload + '_speedup']}, by CPU time x{result[workload + '_cpu_time_speedup']}); "
              f"peak training memory ptmkit {r['ptmkit_peak_mb']:.0f} MB, "
              f"HF {r['hf_peak_mb']:.0f} MB (ratio {result[workload + '_mem_ratio']})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
