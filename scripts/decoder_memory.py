#!/usr/bin/env python
"""Memory of extracting a decoder's attention: computed from the model's dimensions and, on a CUDA GPU, measured.

Not a test. For a model shape (``--shape 1b``: TinyLlama-1.1B's, 22 layers x 32 heads, hidden 2048, 4
key/value heads; ``--shape 7b``: Llama-2-7B's, 32 x 32, hidden 4096; ``tiny``: 2 layers, for tests; or ``--config
config.json``) at ``--tokens`` tokens, batch 1, it prints

* computed (``bertlook.pipeline.sizing.ModelDims``): the weights in the model's dtype (float16), one layer's
  float32 maps, every layer's float16 maps (what the extraction's readers receive, on the CPU), and what
  ``output_attentions=True`` would hold on the device (every layer in float32);
* measured with ``--measure`` on CUDA (a random model of that shape, float16 weights, eager attention): the
  device's peak memory above the weights of ``bertlook.attention.stream.map_batches`` (the maps captured layer
  by layer) and of ``model(..., output_attentions=True)``, and each forward pass's seconds against the GPU's
  float16 FLOP limit (``--peak-tflops``, default 790: an H200's dense bf16/fp16).

    python scripts/decoder_memory.py --shape 7b --tokens 4096            # computed only
    python scripts/decoder_memory.py --shape 1b --tokens 2048 --measure  # on a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SHAPES = {
    "1b": dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
               num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096,
               architectures=["LlamaForCausalLM"]),
    "7b": dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
               architectures=["LlamaForCausalLM"]),
    # a 2-layer grouped-query decoder for the CPU and the tests (scripts/bench_device_readers.py)
    "tiny": dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=256, max_position_embeddings=4096,
                 architectures=["LlamaForCausalLM"]),
}
GIB = 2.0 ** 30


def build_decoder(cfg: dict, device: str, seed: int = 0):
    """A random ``LlamaModel`` of the shape (eager attention; float16 on CUDA, float32 on the CPU)."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaModel(config)
    return model.to(torch.float16 if device == "cuda" else torch.float32).eval()


def output_attentions_maps(model, ids, device: str):
    """Hugging Face's forward returning its maps: every layer's, stacked in float16 on ``device``
    ``[batch, layer, head, T, T]`` (the extraction before the layer-by-layer stream)."""
    import torch

    with torch.inference_mode():
        attns = model(input_ids=torch.tensor([ids], device=device), output_attentions=True).attentions
        maps = torch.stack([a.to(torch.float16) for a in attns], dim=1)  # [batch, layer, head, T, T]
        del attns
    return maps


def computed(cfg: dict, tokens: int) -> dict:
    """The sizes of one sequence of ``tokens`` tokens, from the dimensions alone."""
    from bertlook.pipeline.sizing import dims_from_config

    d = dims_from_config(cfg)
    entries = d.heads * tokens * tokens  # one layer's map entries
    flops = d.flops_per_token(tokens) * tokens
    return {
        "params": d.params, "weights_fp16_gib": 2 * d.params / GIB,
        "one_layer_fp32_maps_gib": 4 * entries / GIB,
        "all_layers_fp16_maps_gib": 2 * d.layers * entries / GIB,
        "output_attentions_fp32_gib": 4 * d.layers * entries / GIB,
        "forward_tflop": flops / 1e12, "layers": d.layers, "heads": d.heads, "family": d.family,
    }


def measure(cfg: dict, tokens: int, peak_tflops: float) -> dict:
    """Peak device memory above the weights: the layer-by-layer extraction vs output_attentions=True."""
    import torch

    from bertlook.attention.stream import map_batches

    model = build_decoder(cfg, "cuda")
    config = model.config
    ids = torch.randint(3, config.vocab_size, (tokens,)).tolist()
    kept = [({"id": 0, "tokens": ["x"] * tokens}, ids, [0] * tokens)]
    L, H = config.num_hidden_layers, config.num_attention_heads
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    out = {}

    def run(name, fn):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        out[name] = {"peak_above_weights_gib": (torch.cuda.max_memory_allocated() - base) / GIB,
                     "seconds": seconds}

    def layered():
        for batch in map_batches(kept, model, batch_size=1, device="cuda", num_layers=L, num_heads=H,
                                 map_dtype="float16", use_token_types=False):
            out["cpu_maps_gib"] = batch.maps.nbytes / GIB

    def recorded():  # the previous extraction: every layer kept, stacked in float16 on the device, then copied
        out["previous_cpu_maps_gib"] = output_attentions_maps(model, ids, "cuda").cpu().numpy().nbytes / GIB

    run("warmup", layered)  # kernels, allocator
    run("layer_by_layer", layered)
    run("output_attentions", recorded)
    flops = computed(cfg, tokens)["forward_tflop"] * 1e12
    for name in ("layer_by_layer", "output_attentions"):
        out[name]["tflops_achieved"] = flops / out[name]["seconds"] / 1e12
        out[name]["ratio_to_limit"] = out[name]["seconds"] / (flops / (peak_tflops * 1e12))
    out["weights_gib"] = base / GIB
    out["device"] = torch.cuda.get_device_name()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--config", default=None, help="a model's config.json instead of --shape")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--measure", action="store_true", help="measure on the CUDA GPU (a random model of the shape)")
    ap.add_argument("--peak-tflops", type=float, default=790.0)
    ap.add_argument("--out", default=None, help="write the numbers as JSON")
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text()) if args.config else SHAPES[args.shape]
    result = {"shape": args.config or args.shape, "tokens": args.tokens, "computed": computed(cfg, args.tokens)}
    if args.measure:
        result["measured"] = measure(cfg, args.tokens, args.peak_tflops)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
