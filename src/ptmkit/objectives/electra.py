"""Replaced token detection: ELECTRA (Clark et al. 2020).

A small *generator* (a masked LM) fills the masked positions with tokens sampled from its own
predictions; the *discriminator* (the backbone that is kept for fine-tuning) reads the
corrupted sequence and predicts, for every token, whether it was replaced:

    L = L_MLM(generator) + λ · L_RTD(discriminator),   λ = ``disc_weight`` (the paper: 50)

Every input token gives the discriminator a training signal, not only the 15% that are masked,
and it never projects onto the vocabulary, which makes RTD the most compute-efficient
objective of the BERT family at small sizes (the paper's ELECTRA-Small result).

* Masking is ``MaskedLM``'s (any masker: ``objective.masking=whole_word`` etc.) with the
  paper's ratios: 15% of the tokens, of those 85% become [MASK] and 15% stay unchanged; the
  batch is the MLM batch without NSP.
* The generator shares the backbone's embedding layer (token, position and segment tables and
  their LayerNorm), projects it to ``generator_size`` × the hidden size (the paper finds 1/4 to
  1/2 best), runs its own Transformer layers and predicts through the tied word embeddings.
* Replacements are sampled from the generator's softmax (Gumbel-max) without gradient: the
  discriminator's loss does not flow into the generator (no adversarial training).  A sample
  equal to the original token counts as *original*, as in the paper.  The sampling temperature
  is ``temperature`` (1 in the paper); with ``temperature_decay_steps = N`` it falls linearly
  from ``temperature`` at step 0 to 1 at step ``N`` and stays there: a function of the
  optimizer step alone (the trainer reports it through :meth:`ELECTRA.at_train_step`), so a
  resumed run samples exactly as the uninterrupted one.
* ``generator=uniform`` replaces the generator by uniform draws from the ordinary vocabulary
  (the paper's "uniform generator" baseline, with no generator parameters and no MLM loss): the
  replacements are then easy to detect, which checks the discriminator and its labels alone.
* The generator's output bias is BERT's: a trainable ``[V]`` vector starting at zero, as in the
  reference implementation; ``output_bias=unigram`` (``MLMConfig``) starts it at the log unigram
  frequencies instead, and ``generator_output_bias=false`` removes it (the generator must then
  learn token frequencies through its hidden states, not one vector).
* The discriminator head is dense + activation + a linear map to one logit per token; its
  binary cross-entropy is averaged over all real (non-padding) tokens.
* ``embedding_rtd_weight`` scales the detection loss's gradient where it enters the shared
  embedding layer (the discriminator's embedding output): 1 (the paper) leaves it at λ, ``1/λ``
  gives the embeddings the detection loss at weight 1 while the discriminator's layers keep λ, 0
  lets the embeddings learn from the generator's MLM alone.  The paper ties the embeddings
  because MLM's dense softmax updates every row (Clark et al. 2020, §3.2); the switch measures
  whether the detection loss's share of their gradient matters (at the README's CPU budget it did
  not for fine-tuning: README, ELECTRA).

Metrics (over the real tokens of the batch): ``rtd_auc`` (ROC AUC of the logits against the
replaced labels, :func:`ptmkit.train.binary_metrics.roc_auc`: 0.5 for a detector that only knows
the base rate), ``rtd_precision`` and ``rtd_recall`` at probability 0.5, ``rtd_acc``,
``replaced`` (the replaced-token base rate) and ``temperature``.  The trainer averages them over
the logging window and over the evaluation batches (token-weighted), so ``rtd_auc`` in the
metrics log is a mean of per-batch AUCs.

Parameters of the generator live under ``objective.generator*`` and ``objective.mlm_head``, so a
checkpoint's backbone is the discriminator alone and fine-tunes like any BERT encoder; ``ptm
export`` writes it with its head as HF's ``ElectraForPreTraining``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.encoders.base import Encoder
from ptmkit.encoders.transformer import TransformerConfig, TransformerLayer
from ptmkit.errors import PtmError
from ptmkit.nn.activations import get_activation
from ptmkit.nn.masks import build_attention_mask
from ptmkit.nn.targets import IGNORE_INDEX
from ptmkit.objectives.base import StepOutput, TokenizerLike
from ptmkit.objectives.mlm import MaskedLM, MLMConfig, MLMHead, cross_entropy_and_accuracy
from ptmkit.registry import register
from ptmkit.train.binary_metrics import precision_recall, roc_auc

GENERATORS = ("transformer", "uniform")


@dataclass(frozen=True)
class ELECTRAConfig(MLMConfig):
    mask_prob: float = 0.15
    mask_token_ratio: float = 0.85  # ELECTRA keeps the other 15% of the chosen tokens, no random ones
    random_token_ratio: float = 0.0
    nsp: bool = False
    generator_size: float = 0.25  # generator hidden, FFN and heads as a fraction of the backbone's
    generator_layers: int | None = None  # None: as many as the backbone
    disc_weight: float = 50.0  # λ
    temperature: float = 1.0  # of the generator's sampling softmax (at step 0 when it decays)
    temperature_decay_steps: int = 0  # > 0: temperature falls linearly to 1 over these optimizer steps
    generator: str = "transformer"  # transformer | uniform (replacements drawn uniformly: no generator)
    generator_output_bias: bool = True  # the generator's [V] output bias (zero-initialised, trainable)
    embedding_rtd_weight: float = 1.0  # share of λ·L_RTD's gradient that reaches the shared embeddings

    def __post_init__(self) -> None:
        for name in ("generator_size", "disc_weight", "temperature", "embedding_rtd_weight"):
            value = getattr(self, name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        super().__post_init__()
        if self.nsp:
            raise PtmError("objective.nsp is not part of ELECTRA; set objective.nsp=false")
        if not 0.0 < self.generator_size <= 1.0:
            raise PtmError(f"objective.generator_size must be in (0, 1], got {self.generator_size}")
        if self.generator_layers is not None and self.generator_layers < 1:
            raise PtmError(f"objective.generator_layers must be >= 1 or null, got {self.generator_layers}")
        if self.disc_weight <= 0 or self.temperature <= 0:
            raise PtmError("objective.disc_weight and objective.temperature must be positive")
        if isinstance(self.temperature_decay_steps, bool) or not isinstance(self.temperature_decay_steps, int) \
                or self.temperature_decay_steps < 0:
            raise PtmError(
                f"objective.temperature_decay_steps must be an integer >= 0 (0: constant temperature), "
                f"got {self.temperature_decay_steps!r}"
            )
        if not isinstance(self.generator_output_bias, bool):
            raise PtmError(f"objective.generator_output_bias must be true or false, got {self.generator_output_bias!r}")
        if not self.generator_output_bias and self.output_bias == "unigram":
            raise PtmError("objective.output_bias=unigram initialises the generator's output bias, which "
                           "objective.generator_output_bias=false removes; set one of them back")
        if self.generator not in GENERATORS:
            raise PtmError(f"objective.generator must be one of {', '.join(GENERATORS)}, got {self.generator!r}")
        if not isinstance(self.embedding_rtd_weight, float) or not 0.0 <= self.embedding_rtd_weight <= 1.0:
            raise PtmError(
                f"objective.embedding_rtd_weight must be a number in [0, 1] (1: the paper; 0: the shared "
                f"embeddings learn from the generator alone), got {self.embedding_rtd_weight!r}"
            )
        if self.embedding_rtd_weight == 0.0 and self.generator == "uniform":
            raise PtmError("objective.embedding_rtd_weight=0 with objective.generator=uniform leaves the "
                           "embeddings without any gradient; freeze them explicitly instead")


def sampling_temperature(cfg: ELECTRAConfig, step: int) -> float:
    """The generator's sampling temperature after ``step`` completed optimizer steps: ``cfg.temperature``,
    or with ``temperature_decay_steps = N`` the line from ``cfg.temperature`` at step 0 to 1 at step N."""
    n = cfg.temperature_decay_steps
    if n <= 0:
        return cfg.temperature
    frac = min(1.0, max(0, step) / n)
    return cfg.temperature + (1.0 - cfg.temperature) * frac


def generator_config(model_cfg: TransformerConfig, cfg: ELECTRAConfig) -> TransformerConfig:
    """The generator's size: hidden, FFN and heads scaled by ``generator_size`` (head size kept
    as close to the backbone's as the hidden size allows), same depth unless given."""
    heads = max(1, round(model_cfg.num_heads * cfg.generator_size))
    hidden = max(heads, round(model_cfg.hidden_size * cfg.generator_size / heads) * heads)
    return replace(
        model_cfg,
        hidden_size=hidden,
        num_heads=heads,
        intermediate_size=max(1, round(model_cfg.intermediate_size * cfg.generator_size)),
        num_layers=cfg.generator_layers or model_cfg.num_layers,
        norm="post",
        pooler=False,
    )


class Generator(nn.Module):
    """``x [B, T, H]`` (the shared embedding output) -> ``[B, T, H_g]``: a projection to the
    generator's width (when it differs) and ``num_layers`` post-LN Transformer layers."""

    def __init__(self, hidden_size: int, cfg: TransformerConfig) -> None:
        super().__init__()
        self.project = nn.Linear(hidden_size, cfg.hidden_size) if cfg.hidden_size != hidden_size else None
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if self.project is not None:
            x = self.project(x)
        mask, is_causal = build_attention_mask(attention_mask, None, False, x.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, mask, is_causal)
        return x


class DiscriminatorHead(nn.Module):
    """``h [B, T, H] -> [B, T]`` replaced-token logits: dense + activation + linear to one score."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = get_activation(cfg.activation)
        self.out = nn.Linear(cfg.hidden_size, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.dense(h))).squeeze(-1)


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; the incoming gradient times ``scale`` backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


@contextmanager
def embedding_gradient_scaled(backbone: Encoder, scale: float) -> Iterator[None]:
    """Within the block, the gradient that flows from ``backbone``'s layers into its embedding
    layer's output ``[B, T, H]`` is multiplied by ``scale`` (0: the embeddings get none of it).
    The forward pass is unchanged."""
    if scale == 1.0:
        yield
        return
    embeddings = getattr(backbone, "embeddings", None)
    if not isinstance(embeddings, nn.Module):
        raise PtmError(f"objective.embedding_rtd_weight needs an encoder with an embedding layer; "
                       f"{type(backbone).__name__} has none")
    hook = embeddings.register_forward_hook(
        lambda _module, _inputs, out: out.detach() if scale == 0.0 else _ScaleGradient.apply(out, scale)
    )
    try:
        yield
    finally:
        hook.remove()


def gumbel_sample(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """One token id per row of ``logits [N, V]``, drawn from ``softmax(logits / temperature)``
    with the Gumbel-max trick (from torch's global generator, which the trainer seeds)."""
    u = torch.rand_like(logits, dtype=torch.float32).clamp_(1e-9, 1.0 - 1e-9)
    return (logits.float() / temperature - torch.log(-torch.log(u))).argmax(dim=-1)


@register("objective", "electra")
class ELECTRA(MaskedLM):
    """Generator MLM + discriminator RTD.  Batch keys as ``MaskedLM`` without NSP:
    ``input_ids``, ``attention_mask``, ``token_type_ids``, ``mlm_positions [B, P]``, ``mlm_labels [B, P]``."""

    config_class = ELECTRAConfig
    perplexity = None  # the generator's MLM loss is a perplexity of the generator, not of the model trained
    # Its MLM head belongs to the smaller generator: HF export writes the discriminator and its
    # replaced-token head (ElectraForPreTraining, ptmkit.interop.hf_electra).
    hf_heads = ("rtd",)
    hf_family = "electra"

    def __init__(self, cfg: ELECTRAConfig, encoder: Encoder, tokenizer: TokenizerLike) -> None:
        super().__init__(cfg, encoder, tokenizer)
        model_cfg = encoder.config
        self.step = 0  # completed optimizer steps, set by the trainer (the temperature's clock)
        if cfg.generator == "transformer":
            gen_cfg = generator_config(model_cfg, cfg)
            self.generator = Generator(model_cfg.hidden_size, gen_cfg)
            # The generator predicts through the shared word embeddings: back to their width first.
            self.mlm_head = MLMHead(gen_cfg, out_size=encoder.output_embeddings().shape[1])
            if not cfg.generator_output_bias:
                self.mlm_head.bias = None  # logits = the tied decoder alone
        else:  # uniform replacements: no generator and no MLM head
            self.generator = None
            self.mlm_head = None
        self.rtd_head = DiscriminatorHead(model_cfg)
        std = model_cfg.init_std
        with torch.no_grad():
            for module in (self.generator, self.rtd_head):
                for m in module.modules() if module is not None else ():
                    if isinstance(m, nn.Linear):
                        m.weight.normal_(0.0, std)
                        m.bias.zero_()

    def exported_heads(self) -> tuple[str, ...]:
        return ("rtd",)  # not MaskedLM's: the MLM head is the generator's

    def at_train_step(self, step: int) -> None:
        """Called by the trainer before optimizer step ``step + 1`` (``step`` completed)."""
        self.step = int(step)

    @property
    def temperature(self) -> float:
        return sampling_temperature(self.cfg, self.step)

    def init_from_corpus(self, corpus, spans) -> None:
        if self.mlm_head is not None:
            super().init_from_corpus(corpus, spans)

    @torch.no_grad()
    def corrupt(
        self, ids: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, target: torch.Tensor, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The discriminator's input: ``ids [B, T]`` with the chosen positions ``(rows, positions)
        [N]`` replaced by samples from the generator's ``logits [N, V]`` (no gradient flows through
        them), and ``replaced [B, T]`` (float 0/1): 1 where the sample differs from ``target [N]``."""
        return self.replace_with(ids, rows, positions, target, gumbel_sample(logits[:, : self.vocab_size], self.temperature))

    @torch.no_grad()
    def uniform_samples(self, n: int, device: torch.device) -> torch.Tensor:
        """``[n]`` token ids drawn uniformly from the ordinary (non-special) vocabulary, from
        torch's global generator (seeded by the trainer, as the Gumbel noise)."""
        pool = torch.from_numpy(self._random_pool).to(device)
        return pool[torch.randint(len(pool), (n,), device=device)]

    @staticmethod
    def replace_with(
        ids: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, target: torch.Tensor, sampled: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``ids [B, T]`` with ``sampled [N]`` written at ``(rows, positions)``, and the 0/1 map of
        the positions whose sample differs from the original ``target [N]``."""
        corrupted = ids.clone()
        corrupted[rows, positions] = sampled
        replaced = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        replaced[rows, positions] = (sampled != target).float()
        return corrupted, replaced

    def forward(self, backbone: Encoder, batch: dict[str, torch.Tensor]) -> StepOutput:
        ids = batch["input_ids"]  # [B, T], [MASK] (or the kept token) at the chosen positions
        attention_mask = batch.get("attention_mask")
        token_types = batch.get("token_type_ids")
        labels = batch["mlm_labels"]
        rows, slots = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
        positions = batch["mlm_positions"][rows, slots]
        target = labels[rows, slots]  # [N] original tokens at the chosen positions

        metrics: dict[str, torch.Tensor] = {}
        if self.generator is not None:
            # Generator: MLM on the masked input, only at the chosen positions.
            g = self.generator(backbone.embed(ids, token_types), attention_mask)  # [B, T, H_g]
            word_embeddings = backbone.output_embeddings()
            logits = self.mlm_head(g[rows, positions], word_embeddings)  # [N, V]
            mlm_loss, metrics["mlm_acc"] = cross_entropy_and_accuracy(logits, target)
            corrupted, replaced = self.corrupt(ids, rows, positions, target, logits)
            metrics["mlm_loss"] = mlm_loss.detach()
            metrics["temperature"] = torch.tensor(self.temperature)
        else:
            mlm_loss = None
            corrupted, replaced = self.replace_with(ids, rows, positions, target, self.uniform_samples(len(target), ids.device))

        # Discriminator: was each token replaced?
        with embedding_gradient_scaled(backbone, self.cfg.embedding_rtd_weight):
            out = backbone(corrupted, attention_mask=attention_mask, token_type_ids=token_types)
        scores = self.rtd_head(out.last_hidden_state).float()  # [B, T]
        real = attention_mask.bool() if attention_mask is not None else torch.ones_like(replaced, dtype=torch.bool)
        rtd_loss = F.binary_cross_entropy_with_logits(scores[real], replaced[real])
        with torch.no_grad():
            s, is_replaced = scores[real], replaced[real] > 0
            predicted = s > 0  # probability > 0.5
            precision, recall = precision_recall(predicted, is_replaced)
            metrics.update({
                "rtd_loss": rtd_loss.detach(),
                "rtd_acc": (predicted == is_replaced).float().mean(),
                # The accuracy alone is dominated by the originals: AUC, precision and recall are not.
                "rtd_auc": roc_auc(s, is_replaced).float(),
                "rtd_precision": precision,
                "rtd_recall": recall,
                "replaced": is_replaced.float().mean(),
            })
        n_tokens = int(real.sum())
        loss = self.cfg.disc_weight * rtd_loss
        if mlm_loss is not None:
            loss = mlm_loss + loss
        return StepOutput(loss=loss, metrics=metrics, n_tokens=n_tokens, n_predictions=n_tokens)
