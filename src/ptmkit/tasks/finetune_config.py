"""The settings of a fine-tuning run that every task type shares (:class:`FinetuneConfig`), checked
when built, and the named recipes (ULMFiT's) that set several of them at once."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ptmkit.errors import PtmError, suggest
from ptmkit.nn.layer_mix import MIXES, normalize_mix
from ptmkit.nn.lora import DEFAULT_TARGETS, parse_targets
from ptmkit.tasks.classification import HEADS, POOLINGS
from ptmkit.train.config import REPORT_TO, TrainConfig

MODES = ("finetune", "features")
SCHEDULES = ("linear", "slanted_triangular")


@dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning settings.

    lr: peak AdamW learning rate (BERT used 2e-5..5e-5 for base models; small models and
        randomly initialised ones like more, ~1e-4).
    warmup: fraction of the optimizer steps with a linear LR warmup (then linear decay to 0).
    max_seq_len: tokens per example including the special tokens (truncated beyond).
    dropout: before the classifier; ``None`` keeps the backbone's dropout rate.
    pooling: ``auto`` (``cls`` for BERT, ``last`` for GPT), ``cls``, ``last``, ``mean`` or
        ``concat`` (ULMFiT: ``[h_T; maxpool(H); meanpool(H)]``).
    select: dev metric that picks the epoch whose weights are kept (``loss`` is minimised).

    Fine-tuning strategies (Howard & Ruder 2018; Sun et al. 2019), all off by default:

    layer_decay: discriminative fine-tuning: layer ``i`` of ``L`` gets ``lr * layer_decay**(L - i)``
        and the embeddings ``lr * layer_decay**(L + 1)``, the new head ``lr`` (ULMFiT: 1 / 2.6).
    gradual_unfreeze: epoch 1 trains only the head (and pooler), every further epoch unfreezes
        the next layer down, the embeddings last (ULMFiT).
    freeze_embeddings: keep the (pre-trained) embedding layer fixed, so that words absent from a
        small training set keep their pre-trained neighbourhoods.
    schedule: ``linear`` (warmup then linear decay, BERT) or ``slanted_triangular`` (ULMFiT:
        ``warmup`` plays the paper's ``cut_frac``, the ratio is 32).

    ULMFiT's classifier fine-tuning with all its tricks is ``RECIPES["ulmfit"]``
    (:func:`recipe_config`, ``ptm finetune --recipe ulmfit``).

    Transfer mode and task network:

    mode: ``finetune`` (train everything) or ``features`` (frozen encoder: only ``mix`` and the
        head learn).
    mix: ``auto`` (``scalar`` for features, ``last`` for fine-tuning), ``last`` (top layer),
        ``scalar`` (ELMo's softmax-weighted mix of all layers) or ``layer:k`` / the integer ``k``
        (hidden state ``k`` alone: 0 = embeddings, ``num_layers`` = top, negative from the top;
        layer-wise probing).  An index outside the encoder's layers is refused when the head is built.
    head: ``linear``, ``mlp`` or ``bilstm`` (``head_hidden`` units).

    aux_lm_weight: GPT's auxiliary language-modelling loss (Radford et al. 2018): the loss is
        ``L_task + aux_lm_weight * L_LM`` over the input text (0 = off; the paper uses 0.5).  Only
        for models pre-trained as a causal LM with a tied output layer (the clm objective).
    aux_lm_decay: SiATL's schedule (Chronopoulou et al. 2019): epoch ``e`` weighs the LM loss by
        ``aux_lm_weight * aux_lm_decay ** (e - 1)``; 1 keeps it constant (GPT).
    task: the task type's own settings (``{"crf": True}`` for tagging, ``doc_stride`` for span QA,
        ``task_schedule`` for multi-task, decoding for seq2seq), read and validated by the type
        (:attr:`ptmkit.tasks.base.TaskType.options_class`); on the command line they are plain
        ``KEY=VALUE`` overrides like the others.
    gpt_transform: GPT's input transformations (Radford et al. 2018; :mod:`ptmkit.tasks.gpt_inputs`):
        ``<start> a (<delim> b) <extract>`` per sequence (per choice for multiple choice), the head
        reading the extract token; for a model pre-trained left to right (clm).  Off by default,
        which keeps the family's plain ``a [SEP] (b [SEP])``.
    symmetric_pairs: with ``gpt_transform``, GPT's similarity tasks: each pair is read in both
        orders and the two extract states are added before the head.
    adapter_size: bottleneck adapters of this many units after every attention and feed-forward
        sub-layer (Houlsby et al. 2019); the encoder's other weights stay fixed (layer norms
        train); 0 = off.
    lora_rank: LoRA (Hu et al. 2021; :mod:`ptmkit.nn.lora`): every projection ``lora_targets``
        names gets a trainable low-rank update ``W x + (lora_alpha / r) B A x`` of rank ``r``
        (``A [r, d_in]`` Kaiming-uniform, ``B [d_out, r]`` zero, so step 0 is the pre-trained
        model); the encoder's weights stay fixed and only the updates and the task head learn.
        0 = off.  For Transformer encoders and encoder-decoders.
    lora_alpha: the update's scale is ``lora_alpha / r``; ``None`` (default) sets ``alpha = r``,
        scale 1, as the paper does (it sets alpha to the first r tried and does not tune it).
    lora_dropout: dropout on the updates' input, in [0, 1) (0 = off).
    lora_targets: comma-separated projection names or patterns (default ``q,v``: the attention's
        query and value, the paper's choice; also ``k``, ``o``, ``fc1``, ``fc2``).  A name without
        a dot matches that projection in every layer (``fc*``); one with dots is a glob over the
        full name (``layers.1[01].attn.*``; encoder-decoders: ``encoder.layers.*``,
        ``decoder.layers.*.cross_attn.q``).  A fused ``qkv`` module is updated on the blocks
        named only (``q,v``: the key block is untouched).
    lora_merge: save the model with the updates folded into the weights (``W + (alpha / r) B A``):
        a full-size model that loads without its base and predicts at the base model's speed.
        Default: only the updates and the head are saved, with a record of the base they apply to.
    bitfit: BitFit (Ben Zaken et al. 2022; :mod:`ptmkit.nn.bitfit`): only the encoder's bias terms
        and the task head learn; only they are saved, with a record of the base.
    layerdrop: LayerDrop while fine-tuning (Fan et al. 2020): each encoder layer is skipped in a
        training step with this probability (the backbone's ``layerdrop``; evaluation runs every
        layer), which makes the model robust to removing layers afterwards (``ptm prune --method
        layers``); 0 = off.  In [0, 1).

    Training loop: ``precision`` (fp32 | bf16, autocast on CUDA or CPU), ``device``, ``num_threads`` and
    ``report_to`` (``tensorboard``: the logged scalars as TensorBoard events too) as in pre-training's
    ``train`` section.
    """

    epochs: int = 10
    lr: float = 1e-4
    batch_size: int = 32
    eval_batch_size: int = 128
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_seq_len: int = 128
    clip_norm: float = 1.0
    dropout: float | None = None
    pooling: str = "auto"
    select: str = "accuracy"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    layer_decay: float = 1.0
    gradual_unfreeze: bool = False
    freeze_embeddings: bool = False
    schedule: str = "linear"
    mode: str = "finetune"
    mix: str = "auto"
    head: str = "linear"
    head_hidden: int = 128
    aux_lm_weight: float = 0.0
    aux_lm_decay: float = 1.0
    adapter_size: int = 0
    lora_rank: int = 0
    lora_alpha: float | None = None
    lora_dropout: float = 0.0
    lora_targets: str = DEFAULT_TARGETS
    lora_merge: bool = False
    bitfit: bool = False
    layerdrop: float = 0.0
    gpt_transform: bool = False
    symmetric_pairs: bool = False
    precision: str = "fp32"
    device: str = "auto"
    num_threads: int = 0
    report_to: str = "none"
    task: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.task, dict):
            raise PtmError(f"task holds the task type's settings as a mapping, got {self.task!r}")
        for name in ("epochs", "batch_size", "eval_batch_size", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"{name} must be a positive integer, got {value!r}")
        for name in ("lr", "warmup", "weight_decay", "clip_norm", "eps", "layer_decay", "aux_lm_weight", "aux_lm_decay",
                     "layerdrop"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    object.__setattr__(self, name, float(value))
                except ValueError:
                    raise PtmError(f"{name} must be a number, got {value!r}") from None
        if self.lr <= 0:
            raise PtmError(f"lr must be positive, got {self.lr}")
        if not 0.0 <= self.warmup < 1.0:
            raise PtmError(f"warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.weight_decay < 0 or self.clip_norm < 0:
            raise PtmError("weight_decay and clip_norm must be >= 0")
        if not 0.0 < self.layer_decay <= 1.0:
            raise PtmError(f"layer_decay must be in (0, 1] (1 disables it; ULMFiT uses 1/2.6), got {self.layer_decay}")
        for name in ("gradual_unfreeze", "freeze_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.dropout is not None and not 0.0 <= float(self.dropout) < 1.0:
            raise PtmError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.pooling not in POOLINGS:
            raise PtmError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if not isinstance(self.select, str) or not self.select:
            raise PtmError(f"select names a dev metric of the task type, got {self.select!r}")
        object.__setattr__(self, "mix", normalize_mix(self.mix, ("auto", *MIXES)))  # an integer k -> "layer:k"
        for name, allowed in (("mode", MODES), ("schedule", SCHEDULES), ("head", HEADS)):
            if getattr(self, name) not in allowed:
                raise PtmError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.mode == "features" and (self.gradual_unfreeze or self.freeze_embeddings):
            raise PtmError("mode=features keeps the whole encoder fixed; gradual_unfreeze and freeze_embeddings apply to mode=finetune")
        if isinstance(self.aux_lm_weight, bool) or not isinstance(self.aux_lm_weight, (int, float)) or self.aux_lm_weight < 0:
            raise PtmError(f"aux_lm_weight must be a number >= 0 (0 = no auxiliary LM loss), got {self.aux_lm_weight!r}")
        if not 0.0 < self.aux_lm_decay <= 1.0:
            raise PtmError(f"aux_lm_decay must be in (0, 1] (1 keeps the LM weight constant), got {self.aux_lm_decay}")
        if self.aux_lm_weight > 0 and self.mode == "features":
            raise PtmError("aux_lm_weight > 0 trains the encoder as a language model; it needs mode=finetune")
        if not isinstance(self.adapter_size, int) or isinstance(self.adapter_size, bool) or self.adapter_size < 0:
            raise PtmError(f"adapter_size must be an integer >= 0 (0 = no adapters), got {self.adapter_size!r}")
        if self.adapter_size and (self.mode == "features" or self.gradual_unfreeze or self.freeze_embeddings):
            raise PtmError("adapter_size > 0 trains adapters inside a fixed encoder; it needs mode=finetune without "
                           "gradual_unfreeze or freeze_embeddings")
        self._check_efficient()
        for name in ("gpt_transform", "symmetric_pairs"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.symmetric_pairs and not self.gpt_transform:
            raise PtmError("symmetric_pairs=true reads a pair in both orders with GPT's input transformation; "
                           "set gpt_transform=true as well")
        if self.report_to not in REPORT_TO:
            raise PtmError(f"report_to must be one of {', '.join(REPORT_TO)}, got {self.report_to!r}")
        if isinstance(self.layerdrop, bool) or not isinstance(self.layerdrop, (int, float)) or not 0.0 <= self.layerdrop < 1.0:
            raise PtmError(f"layerdrop is the probability of skipping an encoder layer in a training step, in [0, 1) "
                           f"(0 = off; Fan et al. use 0.2), got {self.layerdrop!r}")
        if not isinstance(self.head_hidden, int) or self.head_hidden <= 0:
            raise PtmError(f"head_hidden must be a positive integer, got {self.head_hidden!r}")

    def _check_efficient(self) -> None:
        """LoRA and BitFit: their own values, then the combinations that would not mean what they say."""
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise PtmError(f"lora_rank must be an integer >= 0 (0 = no LoRA; 8 is a common choice), "
                           f"got {self.lora_rank!r}")
        if self.lora_alpha is not None and (isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, (int, float))
                                            or self.lora_alpha <= 0):
            raise PtmError(f"lora_alpha must be a positive number (the update is scaled by lora_alpha / lora_rank; "
                           f"unset, it equals lora_rank), got {self.lora_alpha!r}")
        if isinstance(self.lora_dropout, bool) or not isinstance(self.lora_dropout, (int, float)) \
                or not 0.0 <= self.lora_dropout < 1.0:
            raise PtmError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if isinstance(self.lora_targets, (list, tuple)):  # YAML's [q, v]
            object.__setattr__(self, "lora_targets", ",".join(str(t) for t in self.lora_targets))
        if not isinstance(self.lora_targets, str):
            raise PtmError(f"lora_targets is a comma-separated list of projection names, got {self.lora_targets!r}")
        object.__setattr__(self, "lora_targets", ",".join(parse_targets(self.lora_targets)))
        for name in ("lora_merge", "bitfit"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not self.lora_rank:
            changed = [n for n, default in (("lora_alpha", None), ("lora_dropout", 0.0), ("lora_targets", DEFAULT_TARGETS),
                                            ("lora_merge", False)) if getattr(self, n) != default]
            if changed:
                raise PtmError(f"{changed[0]} sets up LoRA, which is off: set lora_rank (e.g. lora_rank=8) as well")
        method = "lora_rank > 0" if self.lora_rank else "bitfit=true" if self.bitfit else None
        if method is None:
            return
        if self.lora_rank and self.bitfit:
            raise PtmError("lora_rank > 0 and bitfit=true are two ways of choosing what trains; use one of them")
        if self.adapter_size:
            raise PtmError(f"{method} and adapter_size > 0 are two ways of choosing what trains; use one of them")
        if self.mode == "features":
            raise PtmError(f"{method} fine-tunes part of the encoder; mode=features keeps all of it fixed: use mode=finetune")
        if self.gradual_unfreeze or self.freeze_embeddings:
            raise PtmError(f"{method} decides what trains inside a fixed encoder; leave gradual_unfreeze and "
                           f"freeze_embeddings off")
        if self.lora_rank and self.layer_decay != 1.0:
            raise PtmError(f"layer_decay={self.layer_decay:g} lowers the learning rate of the encoder's lower layers, "
                           f"which LoRA keeps fixed (its updates all train at lr); set layer_decay=1")
        if self.gpt_transform:
            raise PtmError(f"{method} keeps the embeddings fixed, so gpt_transform's new start, delimiter and extract "
                           f"tokens would never learn; set gpt_transform=false")

    @property
    def resolved_mix(self) -> str:
        return self.mix if self.mix != "auto" else ("scalar" if self.mode == "features" else "last")

    def train_config(self, n_train: int, seed: int, steps_per_epoch: int | None = None):
        """The Trainer's settings for ``n_train`` examples (``ceil(n_train / batch_size)`` steps an
        epoch, unless the batch source says ``steps_per_epoch``): one checkpoint and one log line per epoch."""
        steps_per_epoch = steps_per_epoch or -(-n_train // self.batch_size)
        total = steps_per_epoch * self.epochs
        return TrainConfig(
            batch_size=self.batch_size, lr=self.lr, betas=tuple(self.betas), eps=self.eps, weight_decay=self.weight_decay,
            warmup_steps=int(round(self.warmup * total)), max_steps=total, schedule=self.schedule,
            layer_decay=self.layer_decay, clip_norm=self.clip_norm, log_every=steps_per_epoch, save_every=steps_per_epoch,
            eval_every=0, keep_checkpoints=1, seed=seed, precision=self.precision, device=self.device,
            num_threads=self.num_threads, report_to=self.report_to,
        )


# ULMFiT (Howard & Ruder 2018, section 3.3): concat pooling, a hidden layer of 50 units,
# discriminative fine-tuning (each layer down gets the LR / 2.6), slanted triangular LRs
# (cut_frac 0.1, ratio 32), gradual unfreezing (one more layer group per epoch, from the top),
# Adam with beta1 0.7, beta2 0.99, base LR 0.01.
RECIPES: dict[str, dict[str, Any]] = {
    "ulmfit": {
        "pooling": "concat", "head": "mlp", "head_hidden": 50, "layer_decay": 1 / 2.6, "gradual_unfreeze": True,
        "schedule": "slanted_triangular", "warmup": 0.1, "betas": (0.7, 0.99), "lr": 1e-2,
    },
}


def recipe_config(name: str | None, **changes: Any) -> FinetuneConfig:
    """A :class:`FinetuneConfig` from the named recipe (``None``: the defaults), then ``changes``."""
    if name is not None and name not in RECIPES:
        raise PtmError(f"unknown fine-tuning recipe {name!r}{suggest(name, tuple(RECIPES))}; recipes: {', '.join(RECIPES)}")
    return replace(FinetuneConfig(), **{**(RECIPES[name] if name else {}), **changes})
