"""Dynamic int8 quantization of a task model (Jacob et al. 2018; Zafrir et al. 2019, Q8BERT's
inference scheme), for CPU inference.

Every ``nn.Linear`` (the Transformer's fused ``attn.qkv`` ``[3H, H]``, ``attn.out``, ``ffn.fc1``,
``ffn.fc2``, the pooler and the task head) gets int8 weights with one scale per output channel
(symmetric: ``W[o, :] ≈ scale[o] · q[o, :]``, ``q`` in ``[-128, 127]``,
``scale[o] = max|W[o, :]| / 127.5``); its input is quantized at run time, per batch, from the
batch's own range ("dynamic": no calibration data), the product is accumulated in int32 and
rescaled to float32.  Two backends do that:

* ``ao`` (default): ``torch.ao.quantization.quantize_dynamic`` with per-channel weights; activations
  uint8 with one scale and zero point per tensor; fbgemm / oneDNN int8 kernels.  torch.ao uses 7 of
  the 8 bits (``reduce_range``: without VNNI, x86 sums pairs of uint8 x int8 products in int16, which
  8 bits could overflow); on a CPU with VNNI (AVX512-VNNI, AVX-VNNI), whose instructions accumulate
  in int32, ptmkit uses all 8 (:class:`DynamicLinear8`): half the rounding step, at the same speed.
  BERT-family activations have outlier channels (MiniLM's FFN inputs reach 28 where 99.9 % of
  values stay below 8), so the step matters: on MR sentences, MiniLM's token states keep a mean
  cosine of 0.990 with float32 with 8 bits, 0.962 with 7.
* ``torchao``: torchao's ``Int8DynamicActivationInt8WeightConfig``; activations int8 with one scale
  per token (row).  On CPU without ``torch.compile`` it runs slower than float32 (measured in
  ``docs/compression.md``), hence not the default.

Embedding tables (``embeddings=True``): weight-only int8 with one scale per row
(:class:`Int8Embedding`); a lookup dequantizes only the rows it reads.  LayerNorms, biases and
every other tensor stay float32.

The spec (what ``task_model.json`` records under ``compression.quantization``) names the scheme,
backend, activation bits and whether the tables are quantized.  :func:`quantized_state` turns a quantized model
into plain tensors (``<module>.weight_int8 [out, in]`` int8, ``.weight_scale [out]`` float32,
``.weight_zero_point [out]`` int64 for ``ao``, the float32 ``.bias``; a table's
``.weight_int8 [V, E]`` and ``.weight_scale [V]``; everything else float32 as in ``state_dict``), and
:func:`restore` rebuilds the quantized model from them with the very same integers and scales,
so a saved model gives bit-identical outputs when loaded.

Recurrent encoders (``lstm``, ``awd_lstm``) are refused: their weights sit in LSTM cells (with
projections, or with a weight-dropped recurrent matrix) that these linear-layer kernels do not
cover, so quantizing only their few linear layers would shrink and speed up almost nothing.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ptmkit.artefacts import load_state
from ptmkit.encoders.base import Encoder
from ptmkit.errors import PtmError, suggest

try:  # torch.ao.quantization is deprecated upstream; a torch without it still runs the torchao backend
    import torch.ao.nn.quantized.dynamic as nnqd
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
except ImportError:  # pragma: no cover - depends on the installed torch
    nnqd = quantize_dynamic = per_channel_dynamic_qconfig = None

SCHEME = "dynamic_int8"
BACKENDS = ("ao", "torchao")
DEFAULT_BACKEND = "ao"  # faster than float32 on CPU, where torchao's eager path is slower (docs/compression.md)
ACTIVATIONS = {
    "ao": "uint8 ({bits} bits), one scale and zero point per tensor, computed per batch at run time",
    "torchao": "int8, one scale per token, computed per batch at run time",
}
log = logging.getLogger(__name__)
INT8_KEYS = ("weight_int8", "weight_scale", "weight_zero_point")


# --------------------------------------------------------------------------------------- the spec


def quantization_spec(backend: str | None = None, embeddings: bool = False) -> dict[str, Any]:
    """What ``compression.quantization`` records: scheme, backend, whether tables are int8, and
    in words how weights, activations and tables are quantized."""
    backend = DEFAULT_BACKEND if backend is None else backend
    _check_backend(backend)
    bits = 8 if backend == "torchao" or vnni() else 7
    return {
        "scheme": SCHEME,
        "backend": backend,
        "embeddings": bool(embeddings),
        "activation_bits": bits,
        "weights": "int8, one scale per output channel (symmetric)",
        "activations": ACTIVATIONS[backend].format(bits=bits),
        "embedding_tables": "int8, one scale per row (symmetric)" if embeddings else "float32",
        "engine": torch.backends.quantized.engine if backend == "ao" else "torchao",
        "torch": torch.__version__.split("+")[0],
    }


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise PtmError(f"unknown quantization backend {backend!r}{suggest(str(backend), BACKENDS)}; "
                       f"known: {', '.join(BACKENDS)}")
    if backend == "ao" and quantize_dynamic is None:  # pragma: no cover - depends on the installed torch
        raise PtmError(f"this torch ({torch.__version__}) has no torch.ao.quantization: use --backend torchao")


@functools.cache
def vnni() -> bool:
    """Whether this CPU has VNNI (AVX512-VNNI or AVX-VNNI: uint8 x int8 products summed in int32), so
    dynamic int8 layers may quantize their inputs to all 8 bits (Linux; elsewhere: no)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx512_vnni" in flags or "avx_vnni" in flags


def _read_spec(spec: Any) -> tuple[str, bool, int]:
    """(backend, embeddings, activation bits) of a spec, checked; 8 bits fall back to 7 on a CPU
    without VNNI, where they could overflow."""
    if not isinstance(spec, dict):
        raise PtmError(f"a quantization spec is a dict (scheme, backend, embeddings), got {type(spec).__name__}")
    if spec.get("scheme") != SCHEME:
        raise PtmError(f"quantization scheme {spec.get('scheme')!r} is not known to this ptmkit (known: {SCHEME}); "
                       f"upgrade ptmkit or quantize the float32 model again")
    backend = spec.get("backend", DEFAULT_BACKEND)
    _check_backend(backend)
    bits = spec.get("activation_bits", 7)
    if bits not in (7, 8):
        raise PtmError(f"activation_bits must be 7 or 8, got {bits!r}")
    if backend == "ao" and bits == 8 and not vnni():
        log.warning("this CPU has no VNNI: the int8 layers quantize their inputs to 7 bits, not 8 as on a CPU "
                    "with it (outputs differ slightly)")
        bits = 7
    return backend, bool(spec.get("embeddings", False)), bits


# ---------------------------------------------------------------------------------- what is quantized


class DynamicLinear8(nnqd.Linear if nnqd is not None else nn.Module):
    """torch.ao's dynamic int8 linear layer with its input quantized to all 8 bits of uint8 (torch.ao's
    own uses 7, ``reduce_range``); only for CPUs with VNNI (:func:`vnni`).  ``[..., in] -> [..., out]``."""

    @classmethod
    def of(cls, m: nn.Module) -> "DynamicLinear8":
        new = cls(m.in_features, m.out_features, dtype=torch.qint8)
        new.set_weight_bias(m.weight(), m.bias())
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=False).to(x.dtype)

    def _get_name(self) -> str:
        return "DynamicQuantizedLinear8"


def _is_ao_linear(m: nn.Module) -> bool:
    return nnqd is not None and isinstance(m, nnqd.Linear)


def _is_torchao_linear(m: nn.Module) -> bool:
    # torchao keeps the nn.Linear and swaps its weight for an int8 tensor subclass
    return isinstance(m, nn.Linear) and type(m.weight) is not nn.Parameter and hasattr(m.weight, "qdata")


def is_int8_linear(m: nn.Module) -> bool:
    """Whether ``m`` is a linear layer quantized by either backend."""
    return _is_ao_linear(m) or _is_torchao_linear(m)


def _is_float_linear(m: nn.Module) -> bool:
    return type(m) is nn.Linear and not _is_torchao_linear(m)


def summary(model: nn.Module) -> dict[str, Any]:
    """Counts over the distinct modules of ``model``: ``linear_int8``, ``embeddings_int8``, and the
    names of the layers still in float32 (``linear_float32``, ``embeddings_float32``)."""
    counts: dict[str, Any] = {"linear_int8": 0, "embeddings_int8": 0, "linear_float32": [], "embeddings_float32": []}
    for name, m in model.named_modules():
        if is_int8_linear(m):
            counts["linear_int8"] += 1
        elif isinstance(m, Int8Embedding):
            counts["embeddings_int8"] += 1
        elif isinstance(m, nn.Linear):
            counts["linear_float32"].append(name)
        elif isinstance(m, nn.Embedding):
            counts["embeddings_float32"].append(name)
    return counts


def check_quantizable(model: nn.Module, embeddings: bool = False) -> None:
    """Refuse a model that is already quantized, one whose encoder is recurrent, and one with
    nothing the spec would quantize, each with what to do instead."""
    done = summary(model)
    if done["linear_int8"] or done["embeddings_int8"]:
        raise PtmError("this model is already quantized; quantize the float32 fine-tuned model instead")
    for enc in (m for m in model.modules() if isinstance(m, Encoder)):
        cells = [n for n, m in enc.named_modules() if isinstance(m, nn.RNNBase)]
        if cells:
            listed = ", ".join(cells[:3]) + (", ..." if len(cells) > 3 else "")
            raise PtmError(
                f"the {enc.name} encoder keeps its weights in LSTM cells ({listed}), which int8 quantization does "
                f"not cover; ptm quantize takes Transformer encoders (transformer, encoder_decoder, xlnet)"
            )
    has_linear = any(type(m) is nn.Linear for m in model.modules())
    has_table = any(type(m) is nn.Embedding for m in model.modules())
    if not has_linear and not (embeddings and has_table):
        hint = "; --embeddings quantizes its embedding tables" if has_table else ""
        raise PtmError(f"{type(model).__name__} has no linear layer to quantize{hint}")


# ----------------------------------------------------------------------------------- the modules


class Int8Embedding(nn.Module):
    """A weight-only int8 embedding table: ``weight_int8 [V, E]`` int8 and ``weight_scale [V]``
    float32, one scale per row, symmetric (``row ≈ scale · q``, error at most ``scale / 2`` =
    ``max|row| / 254`` per entry).  ``forward(ids [...]) -> [..., E]`` float32 dequantizes only the
    rows it reads; ``weight`` (the whole table, dequantized) serves code that slices the table
    directly (the Transformer's absolute positions)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.register_buffer("weight_int8", torch.zeros(num_embeddings, embedding_dim, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(num_embeddings))

    @classmethod
    def from_float(cls, table: nn.Embedding) -> "Int8Embedding":
        w = table.weight.detach().float()
        m = cls(w.shape[0], w.shape[1], table.padding_idx)
        scale = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127.0  # a zero row: any scale
        m.weight_int8.copy_(torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8))
        m.weight_scale.copy_(scale)
        return m.to(table.weight.device)

    @property
    def weight(self) -> torch.Tensor:
        return self.weight_int8.float() * self.weight_scale[:, None]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight_int8).float().mul_(self.weight_scale[ids].unsqueeze(-1))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8 per row"


def _swap(model: nn.Module, pick: Callable[[nn.Module], bool], make: Callable[[nn.Module], nn.Module]) -> None:
    """Replace every child that ``pick`` selects by ``make(child)``; a module shared by several
    parents (tied or ALBERT-shared weights) is converted once and stays shared."""
    made: dict[int, nn.Module] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if pick(child):
                if id(child) not in made:
                    made[id(child)] = make(child)
                setattr(parent, name, made[id(child)])


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.ao's deprecation notices, once per call (the API still ships and is the fast one on CPU)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel")
        yield


def _torchao() -> Any:
    """torchao's quantization module (optional dependency: ``pip install 'ptmkit[quantize]'``)."""
    loggers = [logging.getLogger(n) for n in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:  # it warns about each CUDA-only extension a CPU build cannot load
            lg.setLevel(logging.ERROR)
        import torchao.quantization as tq
    except ImportError:
        raise PtmError("--backend torchao needs the torchao package: pip install 'ptmkit[quantize]' "
                       "(or use the default backend, ao)") from None
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    return tq


def _quantize_in_place(model: nn.Module, backend: str, embeddings: bool, bits: int) -> nn.Module:
    if embeddings:
        _swap(model, lambda m: type(m) is nn.Embedding, Int8Embedding.from_float)
    if backend == "ao":
        with _quiet():
            quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
            if bits == 8:
                _swap(model, lambda m: type(m) is nnqd.Linear, DynamicLinear8.of)
        return model
    tq = _torchao()
    seen: set[int] = set()

    def once(m: nn.Module, _name: str) -> bool:  # torchao would quantize a shared layer's int8 weight again
        if type(m) is not nn.Linear or id(m) in seen:
            return False
        seen.add(id(m))
        return True

    tq.quantize_(model, tq.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False), filter_fn=once)
    return model


def quantize(model: nn.Module, spec: dict[str, Any]) -> nn.Module:
    """A quantized copy of ``model`` in eval mode (``model`` itself is left as it is); ``spec`` as
    :func:`quantization_spec` makes it."""
    backend, embeddings, bits = _read_spec(spec)
    check_quantizable(model, embeddings)
    return _quantize_in_place(copy.deepcopy(model).eval(), backend, embeddings, bits)


# ------------------------------------------------------------------------------- save and restore


def quantized_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Plain tensors that safetensors can store (see the module docstring for the names); a
    shared module is stored under each of its names, as ``state_dict`` lists it."""
    state: dict[str, torch.Tensor] = {}
    done: list[str] = []
    for name, m in model.named_modules(remove_duplicate=False):
        p = f"{name}." if name else ""
        if _is_ao_linear(m):
            w, bias = m.weight(), m.bias()
            if w.qscheme() not in (torch.per_channel_affine, torch.per_channel_symmetric):
                raise PtmError(f"{name}: per-tensor int8 weights are not a scheme ptmkit saves; quantize with ptmkit")
            state[p + "weight_int8"] = w.int_repr()
            state[p + "weight_scale"] = w.q_per_channel_scales().float()  # computed in float32, held as double
            state[p + "weight_zero_point"] = w.q_per_channel_zero_points()
        elif _is_torchao_linear(m):
            state[p + "weight_int8"] = m.weight.qdata
            state[p + "weight_scale"] = m.weight.scale.reshape(-1)
            bias = m.bias
        else:
            continue
        if bias is not None:
            state[p + "bias"] = bias
        done.append(p)
    for key, value in model.state_dict().items():
        if not any(key.startswith(p) for p in done):
            state[key] = value
    return {k: v.detach().cpu().contiguous() for k, v in state.items()}


def _int8_modules(state: dict[str, torch.Tensor]) -> list[str]:
    return sorted({k[: -len(".weight_int8")] if k != "weight_int8" else "" for k in state if k.endswith("weight_int8")})


def _dequantized(state: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    q, scale = state[_key(p, "weight_int8")], state[_key(p, "weight_scale")]
    return q.float() * scale.float().reshape(-1, 1)


def _key(p: str, leaf: str) -> str:
    return f"{p}.{leaf}" if p else leaf


def restore(model: nn.Module, spec: dict[str, Any], state: dict[str, torch.Tensor], source: Any = "the quantized weights") -> nn.Module:
    """The quantized model from its float32 skeleton ``model`` (built from the saved config),
    ``spec`` and ``state`` (what :func:`quantized_state` gave): the float32 tensors are loaded, the
    model quantized, and the stored integers and scales written over the result, so its outputs
    are bit-identical to those of the model that was saved.  ``source``: the file ``state`` came
    from, named when the tensors do not fit."""
    backend, embeddings, bits = _read_spec(spec)
    names = _int8_modules(state)
    modules = dict(model.named_modules(remove_duplicate=False))
    for p in names:
        m = modules.get(p)
        if type(m) not in (nn.Linear, nn.Embedding):
            raise PtmError(f"the weights hold int8 {p or 'model'}.weight_int8, but the model has "
                           f"{type(m).__name__ if m is not None else 'no module'} there: they do not fit the "
                           f"model the config describes")
        if type(m) is nn.Embedding and not embeddings:
            raise PtmError(f"the weights hold an int8 table {p}, but the quantization spec says embeddings=false")
    fp32 = {k: v for k, v in state.items() if not (k.rpartition(".")[2] in INT8_KEYS and k.rpartition(".")[0] in names)}
    fp32.update({_key(p, "weight"): _dequantized(state, p) for p in names})
    load_state(model, fp32, source, what="the model the config describes")
    q = _quantize_in_place(model.eval(), backend, embeddings, bits)
    modules = dict(q.named_modules(remove_duplicate=False))
    made = sorted(n for n, m in modules.items() if is_int8_linear(m) or isinstance(m, Int8Embedding))
    if made != names:
        extra = sorted(set(made) ^ set(names))
        raise PtmError(f"the saved model and its quantization spec disagree on which layers are int8 "
                       f"({', '.join(extra[:4])}): save it again with ptm quantize")
    with _quiet(), torch.no_grad():
        for p in names:
            _load_int8(modules[p], state, p)
    return q


def _load_int8(m: nn.Module, state: dict[str, torch.Tensor], p: str) -> None:
    """Write the stored integers and scales of ``p`` into its quantized module ``m``."""
    q, scale = state[_key(p, "weight_int8")], state[_key(p, "weight_scale")].float()
    if isinstance(m, Int8Embedding):
        m.weight_int8.copy_(q)
        m.weight_scale.copy_(scale)
    elif _is_ao_linear(m):
        zero = state.get(_key(p, "weight_zero_point"), torch.zeros(q.shape[0], dtype=torch.int64))
        w = torch._make_per_channel_quantized_tensor(q, scale.double(), zero.long(), 0)
        m.set_weight_bias(w, m.bias())
    else:
        m.weight.qdata.copy_(q)
        m.weight.scale.copy_(scale.reshape(m.weight.scale.shape))


__all__ = ["ACTIVATIONS", "BACKENDS", "DEFAULT_BACKEND", "SCHEME", "DynamicLinear8", "Int8Embedding",
           "check_quantizable", "is_int8_linear", "quantization_spec", "quantize", "quantized_state", "restore",
           "summary", "vnni"]
