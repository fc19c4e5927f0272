"""Quantize a fine-tuned model to int8 and measure what it cost and gained: the workflow behind
``ptm quantize``.

1. OUT is checked before anything slow; the task model is loaded
   (:func:`ptmkit.tasks.saved.load_task_model`) on the task it was fine-tuned on, or on the task
   given again (the user's own files).
2. :func:`ptmkit.compress.quantize.quantize` makes the int8 copy (dynamic int8 linear layers,
   optionally int8 embedding tables).
3. Both models score dev and test through the task type's own prediction and metrics.
4. The encoder of each is timed at batch 1 and 32 on sequences of the task's median length
   (its dev split's, as encoded), on ``threads`` threads, in interleaved rounds (each round runs
   both, in alternating order, so drifts in machine load hit both alike); the figure is the
   median over rounds of the time per call.
5. OUT becomes a task model of its own (``task_model.json`` recording ``compression``,
   ``tokenizer.json``, ``best.safetensors`` with the int8 tensors) that ``load_task_model`` loads
   back, with ``results.json``: dev/test metrics of both, file sizes and their ratio, the speeds,
   the quantized layer counts and the CPU; ``quantize.png`` draws size, speed and scores before and
   after, and ``README.md`` is the run card (``ptm info OUT``, ``ptm runs``).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ptmkit import outputs
from ptmkit.compress.quantize import quantization_spec, quantize, quantized_state, summary
from ptmkit.errors import PtmError
from ptmkit.fileio import atomic_write_text
from ptmkit.runcard import write_run_card
from ptmkit.tasks.callbacks import BEST_FILE
from ptmkit.tasks.saved import encoder_of, load_task_model, save_task_model
from ptmkit.train.mfu import cpu_name
from ptmkit.workflows.compress_figures import quantize_figure

RESULTS_FILE, FIGURE_FILE = "results.json", "quantize.png"
BATCHES = (1, 32)


def quantize_run(run: str | Path, out: str | Path, backend: str | None = None, embeddings: bool = False,
                 load_data: Callable[[], Any] | None = None, inputs: Sequence[Any] = (), overwrite: bool = False,
                 threads: int = 2, rounds: int = 5) -> dict[str, Any]:
    """``ptm quantize``: int8 copy of the task model in ``run`` written to ``out`` (see the module
    docstring).  load_data: reads the task to score on (``None``: the built-in task the run
    recorded).  inputs: every file the command reads (refused inside ``out``).  Returns what
    ``OUT/results.json`` holds."""
    if threads < 1:
        raise PtmError(f"--threads must be at least 1, got {threads}")
    if rounds < 1:
        raise PtmError(f"rounds must be at least 1, got {rounds}")
    out, run = Path(out), Path(run)
    inputs = [run, *inputs]
    outputs.check(out, "quantize", inputs, overwrite)  # before any slow loading
    spec = quantization_spec(backend, embeddings)
    started = time.time()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # quantizing edits the weights themselves: LoRA's updates, if any, are folded into them first
        tm = load_task_model(run, load_data() if load_data is not None else None, merged=True)
        if (tm.info.get("compression") or {}).get("quantization"):
            raise PtmError(f"{run} is already quantized; give the float32 fine-tuned model it was made from "
                           f"({tm.info['compression'].get('source', 'its source run')})")
        int8 = quantize(tm.model, spec)
        layers = _layers(int8)
        print(f"quantized {layers['linear_int8']} linear layers ({layers['linear_int8_encoder']} in the encoder)"
              f"{', ' + str(layers['embeddings_int8']) + ' embedding tables' if embeddings else ''} to int8 "
              f"({spec['backend']}); scoring dev and test", flush=True)
        scores = {split: {"float32": tm.evaluate(split), "int8": tm.evaluate(split, int8)} for split in ("dev", "test")}
        seq_len = typical_length(tm)
        speed = encoder_speed(encoder_of(tm.model), encoder_of(int8), seq_len, tm.tokenizer.vocab_size,
                              bool(tm.task.causal), threads, rounds)
        with outputs.writing(out, "quantize", inputs, overwrite=overwrite) as session:
            if overwrite and session.state == "own":
                outputs.clean(out)
            compression = {"quantization": {**spec, **{k: layers[k] for k in ("linear_int8", "embeddings_int8")}},
                           "source": str(run)}
            save_task_model(out, int8, tm.task, tm.config, tm.tokenizer, tm.cfg,
                            derived_from={"run": str(run), "by": "ptm quantize"}, compression=compression,
                            weights=quantized_state(int8))
            sizes = {"float32_bytes": (run / BEST_FILE).stat().st_size, "int8_bytes": (out / BEST_FILE).stat().st_size}
            sizes["ratio"] = round(sizes["int8_bytes"] / sizes["float32_bytes"], 4)
            results = {
                "source": str(run),
                "task": tm.info.get("task"),
                "task_type": tm.info.get("task_type"),
                "compression": compression,
                "layers": layers,
                "dev": scores["dev"],
                "test": scores["test"],
                "size": sizes,
                "speed": speed,
                "cpu": cpu_name(),
                "time_s": round(time.time() - started, 2),
            }
            atomic_write_text(out / RESULTS_FILE, json.dumps(results, indent=2) + "\n")
            quantize_figure(results, out / FIGURE_FILE)
            write_run_card(out, kind="quantize")
    finally:
        torch.set_num_threads(before)
    print(format_results(results))
    print(f"results: {out / RESULTS_FILE}")
    return results


def _layers(int8: nn.Module) -> dict[str, Any]:
    """Quantized layer counts, in the whole model and in its encoder, and what stayed float32."""
    whole, enc = summary(int8), summary(encoder_of(int8))
    return {"linear_int8": whole["linear_int8"], "linear_int8_encoder": enc["linear_int8"],
            "embeddings_int8": whole["embeddings_int8"], "linear_float32": whole["linear_float32"],
            "embeddings_float32": whole["embeddings_float32"]}


def typical_length(tm: Any) -> int:
    """The median encoded length of the dev split (specials included), or the fine-tuning
    ``max_seq_len`` for task types whose encoding has no per-example lengths."""
    lengths = getattr(tm.encoded("dev"), "lengths", None)
    if lengths is None or len(lengths) == 0:
        return int(tm.cfg.max_seq_len)
    return max(1, int(np.median(np.asarray(lengths))))


def encoder_speed(fp32: nn.Module, int8: nn.Module, seq_len: int, vocab_size: int, causal: bool, threads: int,
                  rounds: int, batches: Sequence[int] = BATCHES) -> dict[str, Any]:
    """Milliseconds per encoder call ``[B, seq_len]`` of both encoders at each batch size, and the
    int8 speed-up (float32 time / int8 time)."""
    result: dict[str, Any] = {"threads": threads, "seq_len": seq_len, "rounds": rounds, "what": "encoder forward"}
    g = torch.Generator().manual_seed(0)
    for batch in batches:
        ids = torch.randint(0, vocab_size, (batch, seq_len), generator=g)
        mask = torch.ones_like(ids)
        calls = {name: (lambda m=m: m(ids, mask, causal=causal)) for name, m in (("float32", fp32), ("int8", int8))}
        ms = interleaved_ms(calls, rounds)
        result[f"batch_{batch}"] = {**{f"{k}_ms": round(v, 3) for k, v in ms.items()},
                                    "speedup": round(ms["float32"] / ms["int8"], 3)}
    return result


def interleaved_ms(calls: dict[str, Callable[[], Any]], rounds: int, min_s: float = 0.1,
                   grad: bool = False) -> dict[str, float]:
    """Median over ``rounds`` of each call's milliseconds; every round runs each call (in an order
    that alternates round to round) enough times to last about ``min_s`` seconds.  The calls run
    under ``torch.inference_mode`` unless ``grad`` (training steps)."""
    reps: dict[str, int] = {}
    with torch.inference_mode(not grad):
        for name, call in calls.items():
            call()  # warm-up: first-call allocations and kernel selection
            t = time.perf_counter()
            call()
            reps[name] = max(1, int(min_s / max(time.perf_counter() - t, 1e-6)))
        times: dict[str, list[float]] = {name: [] for name in calls}
        names = list(calls)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                t = time.perf_counter()
                for _ in range(reps[name]):
                    calls[name]()
                times[name].append((time.perf_counter() - t) / reps[name] * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def format_results(results: dict[str, Any]) -> str:
    """A few lines: each split's metrics float32 -> int8, the size ratio, the speed-ups."""
    lines = []
    for split in ("dev", "test"):
        f, q = results[split]["float32"], results[split]["int8"]
        cells = ", ".join(f"{k} {f[k]:.4f} -> {q[k]:.4f}" for k in f if k in q)
        lines.append(f"{split}: {cells}")
    s = results["size"]
    lines.append(f"size: {s['float32_bytes'] / 1e6:.2f} MB -> {s['int8_bytes'] / 1e6:.2f} MB (ratio {s['ratio']:.3f})")
    sp = results["speed"]
    for key in (k for k in sp if k.startswith("batch_")):
        b = sp[key]
        lines.append(f"speed {key.replace('_', ' ')} x {sp['seq_len']} tokens, {sp['threads']} threads: "
                     f"{b['float32_ms']:.2f} ms -> {b['int8_ms']:.2f} ms ({b['speedup']:.2f}x)")
    return "\n".join(lines)


__all__ = ["FIGURE_FILE", "RESULTS_FILE", "cpu_name", "encoder_speed", "format_results", "interleaved_ms", "quantize_run",
           "typical_length"]
