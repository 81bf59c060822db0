#!/usr/bin/env python
"""Benchmark (not a test): a decoder's forward pass with every one-pass reader on the maps' device (issue 42).

For a random decoder of a model's shape (``--shape 1b``: TinyLlama-1.1B's, ``7b``: Llama-2-7B's, ``tiny``: a
2-layer model for the CPU and the tests; ``scripts/decoder_memory.py``'s shapes and builder) on one sequence of
``--tokens`` seeded random tokens, batch 1, eager attention (float16 weights on CUDA, float32 on the CPU), it times

* ``maps``: the forward pass with its maps captured layer by layer on the device
  (:func:`bertlook.attention.extraction.stream_maps` with no reader: every map computed, none kept, none copied);
* ``readers``: the same pass with every one-pass reader of ``extract-segments`` fed layer by layer on the device
  (:class:`bertlook.attention.layer_readers.PerLayer`: surface statistics and JS of the attention and of the
  norm-based maps, rollout; the norm-based maps computed in the pass; JS exact, or the estimator with
  ``--js-rows``), their partial sums read once at the end as the CLI does;
* ``output_attentions`` and ``output_attentions_to_host`` (``--output-attentions``): ``model(...,
  output_attentions=True)`` with every layer's maps stacked in float16 on the device (Hugging Face's forward
  returning its maps), and the same copied to the host (the extraction before the layer-by-layer stream); a
  pass that runs out of device memory is reported as skipped;

each the minimum of ``--repeats`` after a warm-up pass, with the device's peak memory above the weights, and
counts the bytes that cross from the device to the host in one more (untimed) pass of each (:class:`HostCopies`:
every ``aten`` copy from the device to the CPU and every scalar read, seen by a ``TorchDispatchMode``). It prints
one JSON object and the verdicts of issue 42's GPU target: ``readers`` <= 1.5x ``maps``, and fewer bytes to the
host than one layer's float16 maps (no full map crosses). On the CPU there is no host copy to count (the maps are
computed on the host), so the second verdict is "n/a"; the seconds and the ratio are the CPU's.

    python scripts/bench_device_readers.py --shape 7b --tokens 4096 --js-rows 64 --out 7b-4k.json   # on a GPU
    python scripts/bench_device_readers.py --shape tiny --tokens 256 --device cpu                   # seconds
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent
for path in (str(SCRIPTS), str(ROOT / "src")):
    if path not in sys.path:
        sys.path.insert(0, path)

from decoder_memory import GIB, SHAPES, build_decoder, computed, output_attentions_maps  # noqa: E402

READER_RATIO_TARGET = 1.5  # issue 42: the 7B decoder at 4k tokens with every reader <= 1.5x its bare forward


class HostCopies:
    """Bytes copied from ``source`` (a device type: ``cuda``) to the CPU while it is entered: every ``_to_copy``
    whose input is on ``source`` and whose output is on the CPU, every ``copy_`` into a CPU tensor from ``source``,
    and every scalar read (``.item()``: ``_local_scalar_dense``) of a ``source`` tensor; ``copies`` counts them."""

    def __init__(self, source: str) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                counter._seen(func, args, out)
                return out

        self.source, self.bytes, self.copies, self._mode = source, 0, 0, _Mode()

    def _seen(self, func, args, out) -> None:
        import torch

        aten = torch.ops.aten
        on = lambda t, kind: isinstance(t, torch.Tensor) and t.device.type == kind  # noqa: E731
        if func is aten._to_copy.default and on(args[0], self.source) and on(out, "cpu"):
            moved = out.numel() * out.element_size()
        elif func is aten.copy_.default and on(args[0], "cpu") and on(args[1], self.source):
            moved = args[0].numel() * args[0].element_size()
        elif func is aten._local_scalar_dense.default and on(args[0], self.source):
            moved = args[0].element_size()
        else:
            return
        self.bytes += moved
        self.copies += 1

    def __enter__(self) -> "HostCopies":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)


def every_reader(layers: int, heads: int, js_rows: int | None) -> list[Any]:
    """The one-pass readers of ``extract-segments`` for a decoder's causal maps, as its CLI attaches them."""
    from bertlook.analyses.cluster_heads import JsAccumulator
    from bertlook.analyses.rollout import RolloutAccumulator
    from bertlook.analyses.surface_stats import SurfaceStatsAccumulator
    from bertlook.attention.layer_readers import PerLayer

    tok = {"cls_token": None, "sep_token": None, "causal": True}
    makes = {
        "surface_stats": ("attention", lambda plan: SurfaceStatsAccumulator(layers, heads, **tok)),
        "surface_stats_norm": ("norm", lambda plan: SurfaceStatsAccumulator(layers, heads, **tok)),
        "js": ("attention", lambda plan: JsAccumulator(layers, heads, causal=True, rows=js_rows)),
        "js_norm": ("norm", lambda plan: JsAccumulator(layers, heads, causal=True, rows=js_rows)),
        "rollout": ("attention", lambda plan: RolloutAccumulator(layers, heads, store_excluded=plan.excluded, **tok)),
    }
    return [PerLayer(make, kind=kind) for kind, make in makes.values()]


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> dict[str, Any]:
    """Seconds (min of ``repeats``) and, on CUDA, the peak device memory above what was allocated before."""
    import torch

    best, peak = float("inf"), None
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        _sync(device)
        base = torch.cuda.memory_allocated() if device == "cuda" else 0
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        if device == "cuda":
            peak = max(peak or 0.0, (torch.cuda.max_memory_allocated() - base) / GIB)
    return {"seconds": best, "peak_above_weights_gib": peak}


def run_pass(fn, device: str, repeats: int, count_from: str | None) -> dict[str, Any]:
    """One pass of :func:`measure`: timed (:func:`_timed`), then once more under :class:`HostCopies` when
    ``count_from`` names a device; a pass that runs out of memory is reported as skipped, the others still run."""
    import torch

    oom = (getattr(torch.cuda, "OutOfMemoryError", MemoryError), MemoryError)
    try:
        row = _timed(fn, device, repeats)
        if count_from:
            with HostCopies(count_from) as seen:
                fn()
            row.update(host_bytes=seen.bytes, host_copies=seen.copies)
    except oom as err:
        if device == "cuda":
            torch.cuda.empty_cache()
        return {"skipped": f"out of memory: {str(err).splitlines()[0][:200]}"}
    return row


def measure(cfg: dict[str, Any], tokens: int, *, device: str, js_rows: int | None, repeats: int,
            output_attentions: bool, seed: int = 0, count_from: str | None = None) -> dict[str, Any]:
    """The passes of the module docstring on ``device``: seconds, peak memory, bytes to the host (copies from
    ``count_from``, by default the device; none counted on the CPU unless ``count_from`` says so: the tests)."""
    import torch

    from bertlook.attention.extraction import stream_maps

    model = build_decoder(cfg, device, seed)
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (tokens,), generator=gen).tolist()
    kept = [({"id": 0, "tokens": ["x"] * tokens}, ids, [0] * tokens)]
    stream = dict(batch_size=1, max_seq_len=tokens, device=device, progress_every=0, check_disk=False)
    readers_out: dict[str, Any] = {}

    def maps():
        stream_maps(kept, model, [], **stream)

    def readers():
        consumers = every_reader(L, H, js_rows)
        stream_maps(kept, model, consumers, norms=True, **stream)
        for c in consumers:  # the partial sums read once at the end, as the CLI's save does (timed with the pass)
            c.accumulator.partial(n_examples_in_store=c.n_stream)
        readers_out["examples"] = [c.count for c in consumers]

    def recorded(to_host: bool):
        maps_ = output_attentions_maps(model, ids, device)  # [batch, layer, head, T, T]
        if to_host:
            maps_.cpu()

    passes = {"maps": maps, "readers": readers}
    if output_attentions:  # Hugging Face's maps returned, in float16 on the device; then also copied to the host
        passes.update(output_attentions=lambda: recorded(False), output_attentions_to_host=lambda: recorded(True))
    maps()  # warm-up: kernels, allocator
    out: dict[str, Any] = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                           "weights_gib": sum(p.numel() * p.element_size() for p in model.parameters()) / GIB,
                           "layers": L, "heads": H, "tokens": tokens, "js_rows": js_rows}
    source = count_from or (None if device == "cpu" else device)
    for name, fn in passes.items():
        out[name] = run_pass(fn, device, repeats, source)
    out["reader_examples"] = readers_out.get("examples")  # None when the readers' pass was skipped
    out["one_layer_fp16_map_bytes"] = 2 * H * tokens * tokens
    return out


def verdicts(m: dict[str, Any]) -> dict[str, str]:
    """Issue 42's GPU target on the measurement: the readers' pass <= 1.5x the maps' pass; fewer bytes to the host
    than one layer's float16 maps ("n/a" on the CPU, where the maps are computed on the host). With the
    output_attentions passes, the readers' pass over Hugging Face's maps returned in float16 is printed too."""
    if "seconds" not in m["readers"] or "seconds" not in m["maps"]:
        return {"readers_over_maps": "not measured (" + (m["readers"].get("skipped") or m["maps"].get("skipped"))
                + ")", "host_bytes": "not measured"}
    ratio = m["readers"]["seconds"] / m["maps"]["seconds"]
    hf = m.get("output_attentions", {}).get("seconds")
    host = m["readers"].get("host_bytes")
    return {
        "readers_over_maps": f"{ratio:.2f}x ({'PASS' if ratio <= READER_RATIO_TARGET else 'FAIL'}, "
                             f"<= {READER_RATIO_TARGET:g}x)",
        "host_bytes": "n/a (maps computed on the host)" if host is None else
        f"{host:,} bytes ({'PASS' if host < m['one_layer_fp16_map_bytes'] else 'FAIL'}, < one layer's float16 "
        f"maps, {m['one_layer_fp16_map_bytes']:,})",
        **({} if hf is None else {"readers_over_output_attentions": f"{m['readers']['seconds'] / hf:.2f}x"}),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--js-rows", type=int, default=None, help="the JS estimator's rows (default: exact JS)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output-attentions", action="store_true",
                    help="also time output_attentions=True with every map copied to the host (needs the memory)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the numbers as JSON")
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_device_readers: no CUDA device (use --device cpu for the CPU)", file=sys.stderr)
        return 2
    cfg = SHAPES[args.shape]
    result = {"shape": args.shape, "computed": computed(cfg, args.tokens),
              "measured": measure(cfg, args.tokens, device=args.device, js_rows=args.js_rows, repeats=args.repeats,
                                  output_attentions=args.output_attentions, seed=args.seed)}
    result["verdicts"] = verdicts(result["measured"])
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
