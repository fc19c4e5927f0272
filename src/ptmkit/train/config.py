"""``TrainConfig``: every knob of the training loop (the preset's ``train`` section)."""

from __future__ import annotations

from dataclasses import dataclass

from ptmkit.errors import PtmError, suggest

SCHEDULES = ("linear", "cosine", "constant", "slanted_triangular", "inverse_sqrt", "wsd")
DECAY_SHAPES = ("linear", "cosine", "sqrt")  # the decay at the end of train.schedule=wsd
OPTIMIZERS = ("adamw", "lamb", "adafactor")  # ptmkit.train.optim.build_optimizer
PRECISIONS = ("fp32", "bf16", "fp16")
STRATEGIES = ("ddp", "fsdp")  # ptmkit.train.sharding
INIT_EMBEDDINGS = ("none", "skipgram", "cbow")  # ptmkit.static.init_embeddings.METHODS
REPORT_TO = ("none", "tensorboard")  # where the logged scalars go besides metrics.jsonl (ptmkit.train.tensorboard)


@dataclass(frozen=True)
class TrainConfig:
    """Training-loop settings.

    batch_size: examples per optimizer step, summed over all ranks and micro-batches.
    grad_accum: micro-batches per optimizer step (each rank's rows are split into this many).
    seq_len: tokens per example (at most ``model.max_position``).
    optimizer: ``adamw`` (torch's AdamW), ``lamb`` (You et al. 2020: Adam's update scaled per parameter
        by the trust ratio ``||w|| / ||update||``, for large batches; ``ptmkit.train.optim.Lamb``) or
        ``adafactor`` (Shazeer & Stern 2018, torch's ``Adafactor``: factored second moments, no first
        moment, so ``betas`` and ``eps`` are unused; not under ``strategy=fsdp``, whose sharded weights
        torch's Adafactor cannot step).  Every one decays the weights as AdamW does
        (``weight_decay``, decoupled; not biases and normalisation weights) and follows ``schedule``.
        Under ``adafactor``, ``lr`` caps the relative step ``min(lr, 1/sqrt(t))`` (torch's default
        is 1e-2), which is multiplied by ``max(adafactor_eps2, RMS(w))``.
    adafactor_beta2_decay: the second moments' decay ``beta2_t = 1 - t**adafactor_beta2_decay`` (<= 0).
    adafactor_eps1: the floor of the second-moment estimates' square root and row means (``null``: the weights'
        dtype epsilon, torch's default); adafactor_eps2: the floor of the parameter scale ``RMS(w)``.
    schedule: ``linear`` (warmup + linear decay, BERT), ``cosine``, ``constant``,
        ``slanted_triangular`` (ULMFiT; ``stlr_cut_frac``, ``stlr_ratio``), ``inverse_sqrt`` (Transformer),
        ``wsd`` (warmup-stable-decay, Hu et al. 2024: the peak LR until the last ``decay_fraction`` of
        ``max_steps``, then a ``decay_shape`` decay, ``linear``, ``cosine`` or ``sqrt`` (``1 - sqrt``),
        to ``min_lr_ratio``).  ``linear`` and ``cosine`` also decay to ``min_lr_ratio``.
    bias_correction: Adam's bias correction of the moment estimates; ``false`` trains with AdamW
        without it, as the reference BERT and ELECTRA code (``ptmkit.train.optim.AdamWNoBiasCorrection``;
        ``optimizer=adamw`` only).
    layer_decay: layer-wise LR decay (ELECTRA): layer ``i`` of ``L`` gets ``lr * layer_decay**(L - i)``,
        embeddings ``lr * layer_decay**(L + 1)``; 1.0 disables it.
    eval_every / save_every / log_every: in optimizer steps; 0 disables (eval and save still run at the end);
        a run of fewer than ``log_every`` steps logs every step.
    eval_batches: at most this many evaluation batches per evaluation.
    eval_fraction: share of the training examples held out for evaluation when no eval data is given.
    keep_checkpoints: number of most recent checkpoints kept (older ones are deleted).
    precision: ``fp32``, ``bf16`` (autocast on CUDA or CPU; weights and optimizer state stay fp32) or
        ``fp16`` (CUDA only: autocast in float16 with a dynamic gradient scaler; a step whose scaled
        gradients overflow is skipped and counted as ``overflow_skipped`` in the logs).
    strategy: with several processes (``torchrun``), ``ddp`` (every rank holds the whole model) or
        ``fsdp`` (parameters, gradients and optimizer state sharded over the ranks; sharded
        checkpoints that load at any world size).  One process trains unsharded under either,
        and ``fsdp`` still writes sharded checkpoints.  See ``ptmkit.train.sharding``.
    fsdp_offload: under ``fsdp``, keep the shards and the optimizer state in CPU memory.
    fsdp_mixed_precision: under ``fsdp`` with ``precision=bf16``, gather the weights in bf16 and run
        every operation in bf16 (FSDP's ``MixedPrecisionPolicy``; gradients reduced in fp32) instead
        of autocast's per-operation casts.  Faster, numerically not the same as autocast.
    activation_checkpointing: recompute each layer's activations in the backward pass instead of
        keeping them (memory for about one more forward pass of compute; the losses are unchanged).
    compile: run the training forward and backward through ``torch.compile`` (the first steps
        compile; CPU and CUDA).
    device: ``auto`` (CUDA if available), ``cpu``, ``cuda`` or ``cuda:N``.
    num_threads: CPU threads for torch (0 keeps torch's default).
    nan_guard: a step with a non-finite loss or gradient is skipped with a warning; after this many
        consecutive skipped steps training stops with an error (0 disables the guard).
    max_seconds: stop after this much training time (wall clock, summed over resumes) even before
        ``max_steps``, then evaluate and save as at the end; 0 = no limit.  For comparisons at equal
        compute; the LR schedule still runs to ``max_steps``, so set both.
    init_embeddings: ``none``, or ``skipgram`` / ``cbow``: before step 1, train word2vec (negative
        sampling, ``init_embeddings_epochs`` epochs) on the training examples' token ids and start
        the word embeddings from those vectors (``ptmkit.static.init_embeddings``).
    report_to: ``none``, or ``tensorboard``: the scalars of ``metrics.jsonl`` (loss, LR, grad norm,
        tokens/s, evaluation metrics) are also written as TensorBoard events under
        ``RUN_DIR/tensorboard/`` (needs the ``tensorboard`` extra; ``ptmkit.train.tensorboard``).
    """

    batch_size: int = 32
    grad_accum: int = 1
    seq_len: int = 128
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    bias_correction: bool = True
    optimizer: str = "adamw"
    adafactor_beta2_decay: float = -0.8
    adafactor_eps1: float | None = None
    adafactor_eps2: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 0
    max_steps: int = 1000
    schedule: str = "linear"
    stlr_cut_frac: float = 0.1
    stlr_ratio: float = 32.0
    min_lr_ratio: float = 0.0
    decay_fraction: float = 0.1
    decay_shape: str = "linear"
    layer_decay: float = 1.0
    clip_norm: float = 1.0
    eval_every: int = 0
    eval_batches: int = 50
    eval_fraction: float = 0.05
    save_every: int = 0
    keep_checkpoints: int = 2
    log_every: int = 10
    seed: int = 0
    precision: str = "fp32"
    device: str = "auto"
    num_threads: int = 0
    nan_guard: int = 5
    max_seconds: float = 0.0
    init_embeddings: str = "none"
    init_embeddings_epochs: int = 3
    report_to: str = "none"
    strategy: str = "ddp"
    fsdp_offload: bool = False
    fsdp_mixed_precision: bool = False
    activation_checkpointing: bool = False
    compile: bool = False

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PtmError(f"train.{name} must be a positive integer, got {value!r}")

        def non_negative(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PtmError(f"train.{name} must be an integer >= 0, got {value!r}")

        for name in ("batch_size", "grad_accum", "seq_len", "max_steps", "keep_checkpoints", "eval_batches",
                     "init_embeddings_epochs"):
            positive(name)
        for name in ("warmup_steps", "eval_every", "save_every", "log_every", "num_threads", "nan_guard", "seed"):
            non_negative(name)
        for name in ("lr", "eps", "weight_decay", "clip_norm", "min_lr_ratio", "layer_decay", "stlr_cut_frac", "stlr_ratio",
                     "max_seconds", "decay_fraction", "adafactor_beta2_decay", "adafactor_eps2"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PtmError(f"train.{name} must be a number, got {value!r}")
        for name in ("bias_correction", "fsdp_offload", "fsdp_mixed_precision", "activation_checkpointing", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise PtmError(f"train.{name} must be true or false, got {getattr(self, name)!r}")
        if self.adafactor_eps1 is not None and (isinstance(self.adafactor_eps1, bool)
                                                or not isinstance(self.adafactor_eps1, (int, float))):
            raise PtmError(f"train.adafactor_eps1 must be a number or null, got {self.adafactor_eps1!r}")
        if self.optimizer not in OPTIMIZERS:
            raise PtmError(f"train.optimizer={self.optimizer!r} is not one of {OPTIMIZERS}{suggest(str(self.optimizer), OPTIMIZERS)}")
        if self.optimizer != "adamw" and not self.bias_correction:
            raise PtmError(f"train.bias_correction=false applies to train.optimizer=adamw only, not {self.optimizer}")
        if self.optimizer == "adafactor" and self.strategy == "fsdp":
            raise PtmError("train.optimizer=adafactor cannot step FSDP's sharded weights (torch's Adafactor); use "
                           "train.strategy=ddp, or train.optimizer=adamw or lamb")
        if self.adafactor_beta2_decay > 0 or self.adafactor_eps2 < 0 or (self.adafactor_eps1 or 0) < 0:
            raise PtmError("train.adafactor_beta2_decay must be <= 0, train.adafactor_eps1 and train.adafactor_eps2 >= 0")
        if self.strategy not in STRATEGIES:
            raise PtmError(f"train.strategy={self.strategy!r} is not one of {STRATEGIES}{suggest(str(self.strategy), STRATEGIES)}")
        if self.strategy != "fsdp" and (self.fsdp_offload or self.fsdp_mixed_precision):
            raise PtmError("train.fsdp_offload and train.fsdp_mixed_precision apply to train.strategy=fsdp only")
        if self.fsdp_mixed_precision and self.precision != "bf16":
            raise PtmError("train.fsdp_mixed_precision=true needs train.precision=bf16 (the dtype the weights are gathered in)")
        if self.lr <= 0 or self.eps <= 0:
            raise PtmError(f"train.lr and train.eps must be positive (got lr={self.lr}, eps={self.eps})")
        if self.max_seconds < 0:
            raise PtmError(f"train.max_seconds must be >= 0 (0 = no limit), got {self.max_seconds}")
        if self.weight_decay < 0 or self.clip_norm < 0:
            raise PtmError("train.weight_decay and train.clip_norm must be >= 0 (clip_norm=0 disables clipping)")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise PtmError(f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if not 0.0 < self.layer_decay <= 1.0:
            raise PtmError(f"train.layer_decay must be in (0, 1], got {self.layer_decay}")
        if not 0.0 < self.stlr_cut_frac < 1.0 or self.stlr_ratio < 1.0:
            raise PtmError("train.stlr_cut_frac must be in (0, 1) and train.stlr_ratio >= 1")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise PtmError(f"train.eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if len(self.betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in self.betas):
            raise PtmError(f"train.betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.schedule not in SCHEDULES:
            raise PtmError(f"train.schedule={self.schedule!r} is not one of {SCHEDULES}{suggest(str(self.schedule), SCHEDULES)}")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise PtmError(f"train.decay_fraction must be in (0, 1], got {self.decay_fraction}")
        if self.decay_shape not in DECAY_SHAPES:
            raise PtmError(
                f"train.decay_shape={self.decay_shape!r} is not one of {DECAY_SHAPES}{suggest(str(self.decay_shape), DECAY_SHAPES)}"
            )
        if self.init_embeddings not in INIT_EMBEDDINGS:
            raise PtmError(
                f"train.init_embeddings={self.init_embeddings!r} is not one of {INIT_EMBEDDINGS}"
                f"{suggest(str(self.init_embeddings), INIT_EMBEDDINGS)}"
            )
        if self.report_to not in REPORT_TO:
            raise PtmError(
                f"train.report_to={self.report_to!r} is not one of {REPORT_TO}{suggest(str(self.report_to), REPORT_TO)}"
            )
        if self.precision not in PRECISIONS:
            raise PtmError(f"train.precision={self.precision!r} is not one of {PRECISIONS}{suggest(str(self.precision), PRECISIONS)}")
        if self.batch_size % self.grad_accum:
            raise PtmError(
                f"train.batch_size={self.batch_size} is not divisible by train.grad_accum={self.grad_accum}"
            )
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise PtmError(f"train.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
