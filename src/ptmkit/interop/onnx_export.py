"""ONNX export of an encoder (``ptm export RUN --format onnx``): the encoder's last hidden states
as one graph with dynamic batch and sequence axes, checked against PyTorch with ONNX Runtime.

What is exported: the Transformer encoders that read both ways (BERT, RoBERTa, ALBERT, ELECTRA's
discriminator, ERNIE, SpanBERT, UniLM) and the encoders of encoder–decoders (BART, T5, MASS):

* inputs ``input_ids [batch, sequence]`` int64, ``attention_mask [batch, sequence]`` int64
  (1 = token, 0 = padding) and, when the model has segment embeddings, ``token_type_ids
  [batch, sequence]`` int64;
* output ``last_hidden_state [batch, sequence, hidden]`` float32.

Causal decoders (GPT-2) are refused: generation needs the key/value cache as graph inputs and
outputs, which this export does not write.  XLNet (two streams over a memory), the LSTM encoders
(ELMo, AWD-LSTM) and static vectors are refused too.

The graph is written by PyTorch's TorchScript exporter (``torch.onnx.export(..., dynamo=False)``):
it needs only the ``onnx`` and ``onnxruntime`` packages (the ``torch.export`` exporter, the
default since PyTorch 2.9, also needs ``onnxscript``).  A tracer records the branch a probe takes,
so the probe traced has a padded row (the padding mask is then part of the graph; an unpadded
batch gets a mask of ones, the same result), and the exported graph is checked on two other
shapes (three padded rows of another length, and one unpadded row): its outputs must match
PyTorch's within :data:`TOLERANCE`, or nothing is written.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.onnx import symbolic_helper

from ptmkit import outputs
from ptmkit.errors import PtmError
from ptmkit.pretrained import load_pretrained

FORMAT = "onnx"
INSTALL = "pip install 'ptmkit[onnx]'"
OPSET = 17  # SDPA and LayerNormalization as ONNX ops; onnxruntime >= 1.14 runs it
MODEL_FILE = "model.onnx"
INFO_FILE = "onnx_export.json"
TOLERANCE = 1e-4  # max |ONNX - PyTorch| per unit of the largest |hidden state|: float32 reordering, not an error
SUPPORTED = ("bidirectional Transformer encoders (BERT, RoBERTa, ALBERT, ELECTRA, ERNIE, SpanBERT, UniLM) and the "
             "encoders of encoder-decoders (BART, T5, MASS)")
WHY_NOT = {
    "xlnet": "XLNet's two attention streams over a memory are not exported",
    "lstm": "the LSTM encoders (ELMo) are not exported",
    "awd_lstm": "the AWD-LSTM encoder is not exported",
    "static_vectors": "a static word-vectors table has no graph to export (its vectors file is the model)",
}


def require_onnx() -> tuple[Any, Any]:
    """The ``onnx`` and ``onnxruntime`` modules, or a :class:`PtmError` saying how to install them."""
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise PtmError(f"ONNX export needs the onnx and onnxruntime packages ({exc.name} is not installed): "
                       f"{INSTALL}") from exc
    return onnx, onnxruntime


class EncoderGraph(nn.Module):
    """What the ONNX graph computes: ``(input_ids [B, T], attention_mask [B, T](, token_type_ids
    [B, T])) -> last_hidden_state [B, T, H]``; an encoder–decoder runs its encoder alone."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.seq2seq = backbone.name == "encoder_decoder"
        self.segments = not self.seq2seq and getattr(backbone.config, "type_vocab_size", 0) > 0

    def input_names(self) -> list[str]:
        return ["input_ids", "attention_mask"] + (["token_type_ids"] if self.segments else [])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if self.seq2seq:
            return self.backbone.encode(input_ids, attention_mask).last_hidden_state
        return self.backbone(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


def check_exportable(pretrained: Any) -> None:
    """:class:`PtmError` naming what is exported unless ``pretrained`` is one of :data:`SUPPORTED`."""
    name = getattr(pretrained.backbone, "name", type(pretrained.backbone).__name__)
    objective = (pretrained.config.get("objective") or {}).get("name")
    if name == "transformer" and pretrained.causal:
        raise PtmError(
            f"this model is a causal decoder (objective {objective!r}): ONNX export covers {SUPPORTED}, without "
            f"the key/value cache generation needs; export it to HF instead (ptm export RUN -o DIR picks the format)"
        )
    if name not in ("transformer", "encoder_decoder"):
        raise PtmError(f"cannot export this model to ONNX: {WHY_NOT.get(name, f'the {name!r} encoder is not exported')}; "
                       f"ONNX export covers {SUPPORTED}")


def probe(graph: EncoderGraph, batch: int, length: int, padded: bool, seed: int) -> dict[str, torch.Tensor]:
    """A random batch ``[batch, length]`` of ordinary token ids; with ``padded``, row ``i > 0`` ends
    in ``i`` padding positions (right padding, as an encoder's batches are)."""
    cfg = graph.backbone.config
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, cfg.vocab_size, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    if padded:
        for i in range(1, batch):
            mask[i, length - min(i, length - 1):] = 0
    ids = ids.masked_fill(mask == 0, 0)
    out = {"input_ids": ids, "attention_mask": mask}
    if graph.segments:
        types = torch.zeros_like(ids)
        if cfg.type_vocab_size > 1:
            types[:, length // 2:] = 1
        out["token_type_ids"] = types
    return out


def _limit(graph: EncoderGraph, wanted: int) -> int:
    positions = graph.backbone.max_positions()
    return wanted if positions is None else min(wanted, positions)


def _rms_norm(g: Any, x: Any, normalized_shape: Any, weight: Any, eps: Any) -> Any:
    """``aten::rms_norm`` (T5's norm) in ONNX ops, which have no RMS normalisation before opset 23:
    ``x / sqrt(mean(x^2 over the normalised axes) + eps) * weight``; eps ``None`` is torch's default
    (float32 machine epsilon)."""
    dims = symbolic_helper._maybe_get_const(normalized_shape, "is")
    axes = list(range(-len(dims), 0))
    eps = torch.finfo(torch.float32).eps if symbolic_helper._is_none(eps) else symbolic_helper._maybe_get_const(eps, "f")
    mean_square = g.op("ReduceMean", g.op("Mul", x, x), axes_i=axes, keepdims_i=1)
    rms = g.op("Sqrt", g.op("Add", mean_square, g.op("Constant", value_t=torch.tensor(eps, dtype=torch.float32))))
    y = g.op("Div", x, rms)
    return y if symbolic_helper._is_none(weight) else g.op("Mul", y, weight)


def trace_to_onnx(graph: EncoderGraph, path: Path, opset: int = OPSET) -> None:
    """Write ``graph`` to ``path`` with dynamic batch and sequence axes (see the module docstring)."""
    torch.onnx.register_custom_op_symbolic("aten::rms_norm", _rms_norm, opset)
    example = probe(graph, 2, _limit(graph, 16), padded=True, seed=0)
    names = graph.input_names()
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        # the tracer's notes on Python values it records as constants (the vocabulary check of the
        # ids; the mask branch, which the padded probe fixes) and the TorchScript exporter's deprecation
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, tuple(example[n] for n in names), str(path), dynamo=False, input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=opset,
                          do_constant_folding=True)


def compare(graph: EncoderGraph, path: Path, ort: Any) -> dict[str, Any]:
    """Run the ONNX file with ONNX Runtime on two probe batches of shapes other than the traced one
    and compare with PyTorch at the real (unpadded) positions: ``{"max_abs_diff", "max_abs_hidden",
    "probes"}``; :class:`PtmError` beyond :data:`TOLERANCE`."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    longest = _limit(graph, 23)
    worst, scale, shapes = 0.0, 0.0, []
    for batch, length, padded, seed in ((3, longest, True, 1), (1, _limit(graph, 9), False, 2)):
        inputs = probe(graph, batch, length, padded, seed)
        with torch.no_grad():
            ref = graph(**inputs).float().numpy()
        got = session.run(["last_hidden_state"], {k: v.numpy() for k, v in inputs.items()})[0]
        if got.shape != ref.shape:
            raise PtmError(f"the ONNX model gives hidden states of shape {got.shape} for a [{batch}, {length}] batch, "
                           f"PyTorch {ref.shape}: its axes are not dynamic; nothing was written")
        real = inputs["attention_mask"].bool().numpy()  # padding states: zeros in packed PyTorch, computed here
        worst = max(worst, float(np.abs(got - ref)[real].max()))
        scale = max(scale, float(np.abs(ref)[real].max()))
        shapes.append([batch, length])
    if not worst <= TOLERANCE * max(1.0, scale):
        raise PtmError(f"the ONNX model's hidden states differ from PyTorch's by up to {worst:.3g} (largest |state| "
                       f"{scale:.3g}, tolerance {TOLERANCE:g} of it) on the probe batches; nothing was written")
    return {"max_abs_diff": worst, "max_abs_hidden": scale, "probes": shapes}


def export_onnx(pretrained: Any, out_dir: str | Path, opset: int = OPSET) -> dict[str, Any]:
    """Write ``pretrained``'s encoder (a ``Pretrained``, or a run / checkpoint directory) as
    ``out_dir/model.onnx`` with its ``tokenizer.json`` and ``onnx_export.json`` (inputs, outputs,
    opset, the check against PyTorch).  Returns the contents of ``onnx_export.json``."""
    onnx, ort = require_onnx()
    if isinstance(pretrained, (str, Path)):
        outputs.check(out_dir, "onnx", inputs=[pretrained])  # before the slow load
        pretrained = load_pretrained(pretrained, heads=False)
    check_exportable(pretrained)
    graph = EncoderGraph(pretrained.backbone).eval().float()
    source = str(pretrained.path) if pretrained.path is not None else None
    with outputs.staged(out_dir, "onnx", inputs=[source]) as stage:
        trace_to_onnx(graph, stage / MODEL_FILE, opset)
        onnx.checker.check_model(str(stage / MODEL_FILE))
        check = compare(graph, stage / MODEL_FILE, ort)
        if pretrained.tokenizer is not None:
            pretrained.tokenizer.save(stage / "tokenizer.json")
        info = {
            "source": source, "encoder": graph.backbone.name,
            "objective": (pretrained.config.get("objective") or {}).get("name"),
            "inputs": graph.input_names(), "outputs": ["last_hidden_state"],
            "dynamic_axes": {"batch": 0, "sequence": 1}, "hidden_size": int(graph.backbone.output_size),
            "max_positions": graph.backbone.max_positions(), "opset": opset, "dtype": "float32",
            "check": {**check, "tolerance": TOLERANCE, "runtime": f"onnxruntime {ort.__version__}"},
            "torch": torch.__version__,
        }
        (stage / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


__all__ = ["FORMAT", "INSTALL", "SUPPORTED", "EncoderGraph", "check_exportable", "compare", "export_onnx", "require_onnx",
           "trace_to_onnx"]
