"""Helpers shared by the HF transformers key maps (``hf_bert``, ``hf_gpt2``).

A key map turns the state dict of a ptmkit ``PretrainModel`` (keys ``backbone.*`` and
``objective.*``) into the state dict of an HF model and back.  These helpers hold what every
family needs: activation names, reading an HF model's weights together with the set of keys
its files really contained.  Output directories are written through :func:`ptmkit.outputs.staged`.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ptmkit import outputs, registry
from ptmkit.build import build_model
from ptmkit.config import to_dict
from ptmkit.errors import PtmError
from ptmkit.pretrained import Pretrained
from ptmkit.runcard import write_run_card
from ptmkit.tokenization import Tokenizer
from ptmkit.train.checkpoint import check_safetensors
from ptmkit.train.config import TrainConfig

log = logging.getLogger(__name__)

# ptmkit activation name -> HF ``hidden_act`` / ``activation_function``.
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
# HF names that compute exactly one of ptmkit's activations.
ACT_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


def transformers_module() -> Any:
    """HF transformers, an optional dependency: imported here, where it is first needed (importing
    it takes seconds), never when a family registers; :class:`PtmError` with the install command
    when it is missing."""
    try:
        import transformers
    except ImportError as exc:
        raise PtmError("exchanging models with HF transformers needs it installed: pip install 'ptmkit[interop]'") from exc
    return transformers


def require_transformers() -> None:
    """Raise :class:`PtmError` with the install command when HF transformers is missing."""
    transformers_module()


def hf(name: str) -> Any:
    """``transformers.<name>`` (a config or model class, ``utils``, ...)."""
    return getattr(transformers_module(), name)


def activation_from_hf(name: Any, family: str) -> str:
    if not isinstance(name, str) or name not in ACT_FROM_HF:
        raise PtmError(
            f"the {family} checkpoint uses activation {name!r}, which ptmkit does not implement; "
            f"supported: {', '.join(sorted(ACT_FROM_HF))}"
        )
    return ACT_FROM_HF[name]


def split_prefix(state_dict: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``state_dict`` under ``prefix`` with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence HF's load reports and progress bars (missing keys are checked here)."""
    hf_logging = hf("utils").logging
    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def read_hf(model_cls: type, hf_dir_or_model: Any, tokenizer: Any = None) -> tuple[Any, dict[str, torch.Tensor], Any, Path | None]:
    """What every family's import starts from: ``(hf_model, present, tokenizer, hf_dir)``.

    ``hf_dir_or_model``: an in-memory ``PreTrainedModel`` (every tensor counts as present; ``hf_dir``
    is ``None``) or a directory, loaded as ``model_cls`` by :func:`load_hf_weights`, whose tokenizer
    files are read when no ``tokenizer`` is given.  Tensors are float32.
    """
    PreTrainedModel = hf("PreTrainedModel")

    if isinstance(hf_dir_or_model, PreTrainedModel):
        return hf_dir_or_model, {k: v.float() for k, v in hf_dir_or_model.state_dict().items()}, tokenizer, None
    hf_dir = Path(hf_dir_or_model)
    hf_model, present = load_hf_weights(model_cls, hf_dir)
    return hf_model, present, tokenizer if tokenizer is not None else load_tokenizer(hf_dir), hf_dir


def check_pad(pad_token_id: int, tokenizer: Any) -> None:
    """The model's padding id and the tokenizer's ``[PAD]`` must agree (:class:`PtmError` if not)."""
    if tokenizer is not None and pad_token_id != tokenizer.pad_id:
        raise PtmError(
            f"the model pads with id {pad_token_id} but the tokenizer's [PAD] is {tokenizer.pad_id}; "
            f"ptmkit needs them to agree"
        )


SAFE_LOAD_ADVICE = ("ptm reads PyTorch pickles with torch.load(weights_only=True), which runs no code from the file; "
                    "convert the weights to safetensors (model.safetensors) with a tool you trust, or get the "
                    "model's safetensors version")


def _unsafe_reason(exc: BaseException) -> str:
    """Why a weights-only load refused a file, in words of ours: torch's message advises loading
    with ``weights_only=False``, which would run whatever code the file holds, so it is never passed on."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    if found:
        return f"it holds a Python object of type {found.group(1)}, not only tensors"
    return "it holds Python objects other than tensors"


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc)


def check_pickled_weights(hf_dir: Path) -> None:
    """Every ``pytorch_model*.bin`` that HF would read (there is no ``*.safetensors`` beside it) must
    load with ``torch.load(weights_only=True)``: tensors and plain containers only, no code run.
    Otherwise a :class:`PtmError` that says so and suggests converting it to safetensors."""
    if any(hf_dir.glob("*.safetensors")):
        return  # HF reads those and never opens the pickles
    for path in sorted(hf_dir.glob("pytorch_model*.bin")):
        try:
            try:
                torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # mmap: nothing read yet
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                torch.load(path, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
        except Exception as exc:  # noqa: BLE001 - whatever the unpickler raised, the file is refused
            if _refused(exc):
                raise PtmError(f"{path} could not be loaded safely: {_unsafe_reason(exc)}; {SAFE_LOAD_ADVICE}") from None
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise PtmError(f"{path} is damaged or not a PyTorch weights file ({type(exc).__name__}: {first}); "
                           f"download or copy it again") from None


def load_hf_weights(model_cls: type, hf_dir: str | Path) -> tuple[Any, dict[str, torch.Tensor]]:
    """Load ``model_cls`` from ``hf_dir`` in float32 and return ``(model, present)``.

    ``present`` is the model's state dict restricted to the keys the checkpoint actually held:
    a head missing from the files (e.g. a ``BertModel`` directory loaded as
    ``BertForPreTraining``) is randomly initialised by HF and must not be imported.
    """
    hf_dir = Path(hf_dir)
    if not (hf_dir / "config.json").is_file():
        raise PtmError(f"{hf_dir} is not an HF transformers model directory (no config.json)")
    for weights in sorted(hf_dir.glob("*.safetensors")):
        check_safetensors(weights, "download or copy it again")  # a truncated download, named
    check_pickled_weights(hf_dir)
    try:
        with quiet_transformers():
            # Mismatched shapes are collected (and refused below with their names) rather than
            # raised by HF as a generic error.
            model, info = model_cls.from_pretrained(hf_dir, output_loading_info=True, dtype=torch.float32,
                                                    ignore_mismatched_sizes=True)
    except pickle.UnpicklingError as exc:  # a weights file HF found that the check above did not
        raise PtmError(f"the weights in {hf_dir} could not be loaded safely: {_unsafe_reason(exc)}; "
                       f"{SAFE_LOAD_ADVICE}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise PtmError(f"cannot load the HF model in {hf_dir}: {exc}") from exc
    mismatched = info.get("mismatched_keys") or []
    if mismatched:
        shown = "; ".join(f"{k}: {tuple(a)} in the weights, {tuple(b)} from config.json" for k, a, b in list(mismatched)[:3])
        more = f" (and {len(mismatched) - 3} more)" if len(mismatched) > 3 else ""
        raise PtmError(
            f"the weights in {hf_dir} do not match its config.json: {shown}{more}; the config does not belong "
            f"to these weights (fix or replace config.json)"
        )
    missing = set(info.get("missing_keys", ()))
    present = {k: v for k, v in model.state_dict().items() if k not in missing}
    model.eval()
    return model, present


def check_tied(decoder: torch.Tensor | None, embeddings: torch.Tensor, what: str) -> None:
    """ptmkit ties output projections to the word embeddings; refuse untied checkpoints."""
    if decoder is not None and not torch.equal(decoder, embeddings):
        raise PtmError(
            f"the checkpoint's {what} is not tied to the word embeddings; ptmkit ties them, "
            f"so importing would change the model's predictions"
        )


class HFFamily:
    """One family of HF transformers models that ptmkit exchanges checkpoints with.

    A family lives in its own file, registered with ``@register("hf_family", name)``, and
    declares its key map and config conversion there.  Class attributes: ``formats`` (the export
    formats it writes, e.g. ``("bert", "bert-mlm")``) and ``model_types`` (the HF ``model_type``
    values it imports).  :func:`ptmkit.interop.export_hf` asks every family :meth:`format_for`
    a model, so no other file names a family.
    """

    formats: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()

    def format_for(self, pretrained: Any) -> str | None:
        """The default export format for ``pretrained``, or ``None`` when this family cannot express it."""
        raise NotImplementedError

    def export(self, pretrained: Any, out_dir: str | Path, format: str) -> Path:
        raise NotImplementedError

    def load(self, hf_dir: str | Path) -> Any:
        """Import an HF directory of one of ``model_types`` as a ``Pretrained`` (eval mode)."""
        raise NotImplementedError

    # -- fine-tuned task models (``ptm export TASK_MODEL``) -------------------------------------------
    # TaskHead.kind -> the HF class that puts that head on this family's encoder
    task_classes: dict[str, str] = {}

    def task_problems(self, pretrained: Any, head: "TaskHead") -> list[str]:
        """Why this family cannot export ``pretrained``'s encoder with ``head`` (empty when it can)."""
        return [f"this export writes no {head.kind.replace('_', ' ')} class of this family"]

    def export_task(self, pretrained: Any, head: "TaskHead", out_dir: str | Path) -> Path:
        """Write the encoder with ``head`` as an HF directory of ``task_classes[head.kind]``."""
        raise NotImplementedError


@dataclass(frozen=True)
class TaskHead:
    """A fine-tuned model's task head as HF's task classes hold it: one linear layer (dropout before
    it) over the encoder's top layer.

    kind: ``sequence_classification`` (over the pooler's output, ``tanh(W h[CLS] + b)``),
    ``token_classification`` (over every token's state) or ``question_answering`` (start and end
    scores, ``weight [2, H]``).  weight ``[K, H]``, bias ``[K]``; labels: the names of the ``K``
    outputs (empty for question answering); problem_type: HF's ``problem_type``
    (``single_label_classification``, ``regression``) or ``None``; dropout: the rate before the layer."""

    kind: str
    weight: torch.Tensor
    bias: torch.Tensor
    labels: tuple[str, ...] = ()
    problem_type: str | None = None
    dropout: float = 0.1

    @property
    def num_labels(self) -> int:
        return int(self.weight.shape[0])

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        """The layer's weights under ``prefix`` (``classifier``, ``qa_outputs``, ...)."""
        return {f"{prefix}.weight": self.weight.detach().clone(), f"{prefix}.bias": self.bias.detach().clone()}


def task_model(class_name: str, hf_cfg: Any, head: TaskHead, state: dict[str, torch.Tensor]) -> Any:
    """``transformers.<class_name>`` (eval mode) built from ``hf_cfg`` with ``head``'s outputs
    (``num_labels``, ``id2label`` / ``label2id``, ``problem_type``, the classifier's dropout) and
    loaded with ``state``, its own keys.  Every tensor of the class must be in ``state``; a pooler
    the class lacks (token classification, question answering read no pooler) is left out."""
    hf_cfg.num_labels = head.num_labels
    if head.labels:
        hf_cfg.id2label = dict(enumerate(head.labels))
        hf_cfg.label2id = {name: i for i, name in enumerate(head.labels)}
    hf_cfg.problem_type = head.problem_type
    for name in ("classifier_dropout", "classifier_dropout_prob"):  # ALBERT's name is the second
        if hasattr(hf_cfg, name):
            setattr(hf_cfg, name, head.dropout)
    model = hf(class_name)(hf_cfg)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(k for k in state if k not in own and ".pooler." not in k)
    if missing or unexpected:
        raise PtmError(f"cannot export as {class_name}: no weights for {missing[:4]}, no place for {unexpected[:4]}")
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=True)
    return model.eval()


def write_hf_dir(model: Any, pretrained: Any, out_dir: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Save an HF ``model`` and ``pretrained``'s tokenizer (as an HF fast tokenizer, its
    ``model_max_length`` the encoder's positions, if it has a limit) into the new directory ``out_dir``, published
    only when complete (:func:`ptmkit.outputs.staged`).  ``state_dict`` keeps tensors the HF
    class lacks (a pooler under ``BertForMaskedLM``)."""
    with outputs.staged(out_dir, "export", inputs=[pretrained.path]) as stage:
        with quiet_transformers():
            if state_dict is None:
                model.save_pretrained(stage)
            else:
                model.save_pretrained(stage, state_dict={k: v.contiguous() for k, v in state_dict.items()})
        if pretrained.tokenizer is not None:
            hf_tokenizer = pretrained.tokenizer.to_transformers()
            max_position = getattr(pretrained.backbone.config, "max_position", None)
            if max_position is not None:  # relative positions (XLNet): no length limit to declare
                hf_tokenizer.model_max_length = max_position
            hf_tokenizer.save_pretrained(stage)
        write_run_card(stage, kind="export", name=Path(out_dir).name, derives_from=[pretrained.path])
    log.info("exported %s to %s", type(model).__name__, out_dir)
    return Path(out_dir)


def check_unpruned(backbone: Any) -> None:
    """:class:`PtmError` for an encoder with pruned attention heads, which no HF model holds."""
    pruned = getattr(getattr(backbone, "config", None), "pruned_heads", None)
    if pruned:  # HF's layers have a fixed head count per model: the smaller matrices do not load
        raise PtmError(f"this model has pruned attention heads (model.pruned_heads={dict(pruned)}); HF transformers "
                       f"(5) models have no pruned heads, so it cannot be exported: export the model before pruning")


def export_heads(pretrained: Any) -> tuple[str, ...]:
    """The heads the objective declares for export (none when loaded without heads)."""
    return tuple(pretrained.objective.exported_heads()) if pretrained.objective is not None else ()


def encoder_name(model_cfg: Any) -> str:
    """The registered encoder whose ``config_class`` ``model_cfg`` is an instance of."""
    for name in registry.names("encoder"):
        if type(model_cfg) is registry.get("encoder", name).config_class:
            return name
    raise PtmError(f"no registered encoder takes a {type(model_cfg).__name__}")


def checkpoint_config(model_cfg: Any, objective: dict[str, Any], tokenizer: Any, source: str) -> dict[str, Any]:
    """The resolved config a ptmkit checkpoint stores for an imported model."""
    config: dict[str, Any] = {"model": {"encoder": encoder_name(model_cfg), **to_dict(model_cfg)}, "objective": dict(objective)}
    if tokenizer is not None:
        config["tokenizer"] = {
            "kind": tokenizer.kind,
            "vocab_size": int(tokenizer.vocab_size),
            "lowercase": bool(tokenizer.lowercase),
        }
    config["train"] = to_dict(TrainConfig())
    config["imported_from"] = source
    return config


def assemble(model_cfg: Any, objective: dict[str, Any], state: dict[str, torch.Tensor], tokenizer: Any, source: str) -> Any:
    """Build a ``Pretrained`` (eval mode) from an imported config and ``PretrainModel`` state dict.

    Every backbone tensor must be in ``state``; objective heads the source did not have keep
    their fresh initialisation (logged), so the result is a complete, saveable model.
    """
    if tokenizer is None:
        raise PtmError(f"{source} has no tokenizer files (tokenizer.json or vocab.txt); ptmkit needs one to build the model")
    config = checkpoint_config(model_cfg, objective, tokenizer, source)
    model = build_model(config, tokenizer)
    backbone, obj = model.backbone, model.objective
    result = model.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise PtmError(f"imported weights that the ptmkit model has no place for: {result.unexpected_keys[:4]}")
    missing_backbone = [k for k in result.missing_keys if k.startswith("backbone.")]
    if missing_backbone:
        raise PtmError(f"the imported checkpoint lacks backbone weights: {missing_backbone[:4]}")
    if result.missing_keys:
        heads = sorted({k.split(".")[1] for k in result.missing_keys})
        log.info("%s has no %s; those heads are freshly initialised", source, ", ".join(heads))
    model.eval()
    return Pretrained(config, tokenizer, backbone, obj, None, model)


def load_tokenizer(hf_dir: Path) -> Any:
    """ptmkit ``Tokenizer`` of an HF model directory (its ``tokenizer.json``, else a WordPiece
    tokenizer from ``vocab.txt`` honouring ``do_lower_case``); ``None`` when there is neither."""
    if not ((hf_dir / "tokenizer.json").is_file() or (hf_dir / "vocab.txt").is_file()):
        log.warning("%s has no tokenizer.json or vocab.txt; importing the model without a tokenizer", hf_dir)
        return None
    try:
        return Tokenizer.load(hf_dir)
    except PtmError as exc:
        raise PtmError(f"cannot use the tokenizer in {hf_dir}: {exc}") from exc
