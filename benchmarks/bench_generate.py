"""Greedy and beam-search generation speed of ptmkit's cached decoding vs HF ``GPT2LMHeadModel.generate``.

Models: random GPT-2s at the sizes of the ``gpt2-tiny`` preset (L=2, H=128, A=2, V=8000) and of
``gpt2-small`` (L=12, H=768, A=12, V=50257), fp32, eval mode.  The HF model is built from the
ptmkit one by the export path (:func:`ptmkit.interop.hf_gpt2.build_hf_gpt2`), so both hold the
same weights; before timing, each setting checks that both produce the same tokens.

Workload per setting (size x batch size): ``--prompt-len`` random prompt tokens per row (rows of
a batch of 8 have different lengths, left-padded, as a real batch of prompts), then exactly
``--new-tokens`` greedy tokens (no end token, so both sides generate the same number).  Both
sides use their key/value cache and SDPA attention.  tokens/s = batch x new tokens / wall time
of the whole call (prompt processing included).

Beam search (``--num-beams``, default 4; 0 skips it): the same prompts, exactly ``--new-tokens``
tokens per beam (no end token, length penalty 1, ``early_stopping=False``: HF's defaults), the
``B x beams`` hypotheses as one batch on both sides; before timing, the best hypotheses are
compared as the greedy tokens are.  Its figure is a ratio of wall times, HF / ptmkit (> 1: ptmkit
is faster).

Timing: the two frameworks run in interleaved rounds (each round runs both, in alternating
order), so drifts in machine load hit both alike; the figure is the median over rounds.

Run: ``python benchmarks/bench_generate.py [--quick]``.  The last line printed is JSON:
``generate_speedup`` (the geometric mean over settings of ptmkit tokens/s / HF tokens/s) and one
``generate_speedup_<size>_b<batch>`` per setting; ``beam_speedup`` (the geometric mean over
settings of HF time / ptmkit time for beam search) and one ``beam_speedup_<size>_b<batch>`` per
setting; ``settings`` with the raw figures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from types import SimpleNamespace

import torch

SIZES = {
    "tiny": dict(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512, max_position=256),
    "small": dict(vocab_size=50257, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                  max_position=1024),
}
PAD = 0


def build(size: str, seed: int = 0):
    """(ptmkit backbone, HF GPT2LMHeadModel) with the same random weights."""
    from ptmkit.encoders import TransformerConfig, TransformerEncoder
    from ptmkit.interop.hf_gpt2 import build_hf_gpt2
    from ptmkit.objectives.base import PretrainModel
    from ptmkit.objectives.clm import CausalLM, CLMConfig
    from ptmkit.pretrained import Pretrained

    cfg = TransformerConfig(**SIZES[size], type_vocab_size=0, norm="pre", activation="gelu_tanh", layer_norm_eps=1e-5,
                            embedding_norm=False, pooler=False, scaled_residual_init=True)
    torch.manual_seed(seed)
    encoder = TransformerEncoder(cfg)
    tok = SimpleNamespace(vocab_size=cfg.vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    model = PretrainModel(encoder, CausalLM(CLMConfig(), encoder, tok)).eval()
    pre = Pretrained({"model": {}, "objective": {"name": "clm"}}, None, model.backbone, model.objective, None, model)
    hf = build_hf_gpt2(pre)
    hf.config._attn_implementation = "sdpa"
    return model.backbone, hf.eval()


def prompts(batch: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [length] if batch == 1 else [max(1, length - (i * length) // (2 * batch)) for i in range(batch)]
    return [torch.randint(5, vocab, (n,), generator=g).tolist() for n in lengths]


def run_ptmkit(backbone, rows: list[list[int]], n: int) -> torch.Tensor:
    from ptmkit.generation import CausalLMStepper, GenerationConfig, decode, left_pad

    ids, mask = left_pad(rows, PAD)
    return decode(CausalLMStepper(backbone, ids, mask), GenerationConfig(max_new_tokens=n, greedy=True), None, PAD)


def run_hf(hf, rows: list[list[int]], n: int) -> torch.Tensor:
    from transformers import GenerationConfig

    from ptmkit.generation import left_pad

    ids, mask = left_pad(rows, PAD)
    gen = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                           pad_token_id=PAD)
    with torch.no_grad():
        return hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)[:, ids.shape[1]:]


def run_ptmkit_beam(backbone, rows: list[list[int]], n: int, beams: int) -> torch.Tensor:
    from ptmkit.generation import CausalLMStepper, GenerationConfig, decode, left_pad

    ids, mask = left_pad(rows, PAD)
    return decode(CausalLMStepper(backbone, ids, mask), GenerationConfig(max_new_tokens=n, num_beams=beams), None, PAD)


def run_hf_beam(hf, rows: list[list[int]], n: int, beams: int) -> torch.Tensor:
    from transformers import GenerationConfig

    from ptmkit.generation import left_pad

    ids, mask = left_pad(rows, PAD)
    gen = GenerationConfig(do_sample=False, num_beams=beams, max_new_tokens=n, eos_token_id=None, pad_token_id=PAD,
                           length_penalty=1.0, early_stopping=False)
    with torch.no_grad():
        return hf.generate(input_ids=ids, attention_mask=mask, generation_config=gen)[:, ids.shape[1]:]


def interleaved(runs: dict[str, object], rounds: int) -> dict[str, float]:
    """The median wall time of each of ``runs`` (name -> call), over ``rounds`` rounds that run
    every call once, in alternating order."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,small")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-beams", type=int, default=4, help="beams of the beam-search timing; 0 = skip it")
    parser.add_argument("--quick", action="store_true", help="tiny size, 8 new tokens, 2 rounds: a check that it runs")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.new_tokens, args.prompt_len, args.rounds = "tiny", 8, 8, 2
    torch.set_num_threads(args.threads)
    results: dict[str, dict[str, float]] = {}
    for size in args.sizes.split(","):
        ours_model, hf_model = build(size)
        for batch in (int(b) for b in args.batches.split(",")):
            rows = prompts(batch, args.prompt_len, SIZES[size]["vocab_size"])
            # warm-up, and the check that both decode the same tokens (a near-tie of random weights
            # could flip one arg-max between the two float32 computations: reported, not fatal)
            same = torch.equal(run_ptmkit(ours_model, rows, args.new_tokens), run_hf(hf_model, rows, args.new_tokens))
            n = args.new_tokens
            median = interleaved({"ptmkit": lambda: run_ptmkit(ours_model, rows, n),
                                  "hf": lambda: run_hf(hf_model, rows, n)}, args.rounds)
            tokens = batch * args.new_tokens
            ours_tps = tokens / median["ptmkit"]
            hf_tps = tokens / median["hf"]
            key = f"{size}_b{batch}"
            results[key] = {"ptmkit_tokens_per_s": round(ours_tps, 1), "hf_tokens_per_s": round(hf_tps, 1),
                            "speedup": round(ours_tps / hf_tps, 3), "same_tokens": same}
            print(f"{key:10s} ptmkit {ours_tps:9.1f} tok/s   HF {hf_tps:9.1f} tok/s   ratio {ours_tps / hf_tps:.3f}"
                  + ("" if same else "   (the tokens differ)"),
                  flush=True)
            if args.num_beams > 0:
                k = args.num_beams
                beam_same = torch.equal(run_ptmkit_beam(ours_model, rows, n, k), run_hf_beam(hf_model, rows, n, k))
                beam = interleaved({"ptmkit": lambda: run_ptmkit_beam(ours_model, rows, n, k),
                                    "hf": lambda: run_hf_beam(hf_model, rows, n, k)}, args.rounds)
                results[key].update({"beam_ptmkit_s": round(beam["ptmkit"], 4), "beam_hf_s": round(beam["hf"], 4),
                                     "beam_speedup": round(beam["hf"] / beam["ptmkit"], 3), "beam_same_tokens": beam_same})
                print(f"{key:10s} beams={k}  ptmkit {beam['ptmkit']:8.3f} s   HF {beam['hf']:8.3f} s   "
                      f"HF/ptmkit {beam['hf'] / beam['ptmkit']:.3f}" + ("" if beam_same else "   (the tokens differ)"),
                      flush=True)
    ratios = [r["speedup"] for r in results.values()]
    summary: dict[str, object] = {"generate_speedup": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3)}
    summary.update({f"generate_speedup_{k}": v["speedup"] for k, v in results.items()})
    if args.num_beams > 0:
        beam_ratios = [r["beam_speedup"] for r in results.values()]
        summary["beam_speedup"] = round(math.exp(sum(map(math.log, beam_ratios)) / len(beam_ratios)), 3)
        summary.update({f"beam_speedup_{k}": v["beam_speedup"] for k, v in results.items()})
    summary["settings"] = results
    summary["config"] = {"prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "rounds": args.rounds,
                         "threads": args.threads, "num_beams": args.num_beams, "torch": torch.__version__}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
