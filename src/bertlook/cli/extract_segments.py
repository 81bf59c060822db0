"""CLI of bertlook.attention.extraction: ``extract-segments`` (and, through :mod:`bertlook.cli.sharding`,
``merge-stores`` and ``gather-extraction``).

``extract-segments`` is the one pass over the segment maps: the model runs once and every batch of maps goes
to the readers asked for on the command line (:mod:`bertlook.attention.stream`): the stores (``--out``,
``--norms-out``), the partial sums of the surface statistics, of the JS divergences and of the rollout
statistics (of :mod:`bertlook.analyses`), and the Fig 1 example. This module is the glue that attaches them.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any
from pathlib import Path

from bertlook.cli._args import add_batch_arguments, add_model_arguments, add_shard_argument, add_step_parser
from bertlook.errors import BertlookError, check_at_least
from bertlook.io_utils import write_json
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import save_partial

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "extract-segments": "run a model once over the segments: attention stores and the statistics of the same pass",
    "merge-stores": "gather the shard stores of a sharded extraction into one attention store",
    "gather-extraction": "gather the summaries of a sharded segment extraction (no maps needed)",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"extract_segments": costs.Cost(estimate=costs.segment_pass)}


DESCRIPTION = """\
Run a model once on paper-style segments ([CLS] A [SEP] B [SEP]) and hand its attention maps, batch by
batch, to every output asked for; the maps are written to disk only with --out / --norms-out.

input:  --segments segments.jsonl (from `bertlook segments`), a model spec (--model)
stores (optional; float16 [layer, head, from, to] per example, length-sorted order, match by id):
  --out DIR            the token-level attention store
  --norms-out DIR      the norm-based maps of Kobayashi et al. 2020 (alpha * ||f(x)||, row-normalised) of
                       the same forward pass (meta map 'norm'); --norms computes them without storing
statistics of the same pass (partial sums for `surface-stats --partial`, `cluster-heads --partial`,
`rollout --partial`, `figures --example`; the same files the store-reading steps write):
  --stats-partial NPZ       surface statistics (Figs 2, 4) of the attention maps
  --norm-stats-partial NPZ  the same on the norm-based maps
  --js-partial NPZ          JS divergences between heads (Fig 6), summed
  --norm-js-partial NPZ     the same on the norm-based maps
  --rollout-partial NPZ     attention rollout statistics per layer
  --alti-stats-partial NPZ  surface statistics of ALTI per layer (Ferrando et al. 2022; one "head" per layer),
                            computed on the device from the same pass (~2 n^2 H d per layer and segment: see
                            --alti-max-examples)
  --fig1-example NPZ        the Fig 1 example's map (--example-index, in the unsharded store's order)
--summary JSON: counts (excluded over-long examples), tokens/s, device, the per-class ||f(x)|| sums with
norm-based maps, the seconds each reader took.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``extract-segments`` subcommand."""
    # lazy: numpy (bertlook.attention.store), which the DAG build reading COSTS does not need
    from bertlook.attention.extraction import SEGMENT_ID_MODES
    from bertlook.attention.stream import SCHEDULES

    p = add_step_parser(subparsers, "extract-segments", COMMANDS["extract-segments"], DESCRIPTION)
    p.add_argument("--segments", required=True, help="segments JSONL (id, tokens, segment_ids per line)")
    add_model_arguments(p)
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output: attention store directory (replaced atomically; default: none written)")
    p.add_argument("--segment-ids", choices=SEGMENT_ID_MODES, default="zeros",
                   help="token type ids: zeros (authors' code, default) or pair (A=0, B=1)")
    add_batch_arguments(p, unit="examples", length_help="examples with more wordpieces are excluded and counted")
    p.add_argument("--summary", default=None, help="write the run summary to this JSON file")
    p.add_argument("--norms-out", default=None, metavar="DIR",
                   help="also write the norm-based maps (Kobayashi et al. 2020) to a store here (replaced atomically)")
    p.add_argument("--norms", action="store_true",
                   help="compute the norm-based maps for the --norm-* outputs without storing them")
    for flag, what in (("--stats-partial", "surface statistics"), ("--norm-stats-partial", "surface statistics of "
                       "the norm-based maps"), ("--js-partial", "JS divergence sum"), ("--norm-js-partial",
                       "JS divergence sum of the norm-based maps"), ("--rollout-partial", "rollout statistics"),
                       ("--alti-stats-partial", "surface statistics of ALTI per layer"),
                       ("--fig1-example", "the Fig 1 example")):
        p.add_argument(flag, default=None, metavar="NPZ", help=f"output: {what} of this pass (partial file)")
    p.add_argument("--js-max-examples", type=int, default=None, metavar="N",
                   help="JS divergences over the first N segments of --segments only (default: all)")
    p.add_argument("--js-rows", type=int, default=None, metavar="R",
                   help="JS divergences estimated from R query rows per segment, drawn with --js-seed (the "
                        "estimator for long contexts, docs/definitions.md; default: every row, the paper's "
                        "exact sums)")
    p.add_argument("--js-seed", type=int, default=0, metavar="S",
                   help="seed of the rows --js-rows draws (with each segment's id; default 0)")
    p.add_argument("--rollout-max-examples", type=int, default=None, metavar="N",
                   help="rollout statistics over the first N segments of --segments only (default: all)")
    p.add_argument("--alti-max-examples", type=int, default=None, metavar="N",
                   help="ALTI over the first N segments of --segments only (default: all)")
    p.add_argument("--example-index", type=int, default=0, metavar="I",
                   help="the Fig 1 example: position in the unsharded store's order (default 0)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads of the model and the JS kernel (default: $OMP_NUM_THREADS, else all cores)")
    p.add_argument("--schedule", choices=SCHEDULES, default="auto",
                   help="the readers beside the next batch's forward pass (overlap) or after each one, every "
                        "thread on each (phased); auto: phased on separate CPU cores, else overlap (default; "
                        "the numbers are the same either way)")
    add_shard_argument(p, "segments")
    p.set_defaults(func=_cmd_extract)
    from bertlook.cli import sharding

    sharding.register_cli(subparsers)
    return p


class _Timed:
    """A stream reader that times another one (seconds spent in ``add`` / ``add_layer`` / ``end_batch``, for the
    summary; on a GPU the seconds of queuing the reader's work, which runs behind the forward pass)."""

    def __init__(self, name: str, inner) -> None:
        self.name, self.inner, self.seconds = name, inner, 0.0
        self.map_kind = inner.map_kind
        self.layerwise = getattr(inner, "layerwise", False)

    def wants(self, record) -> bool:
        return self.inner.wants(record)

    def _timed(self, method: str, *args) -> None:
        t0 = time.perf_counter()
        getattr(self.inner, method)(*args)
        self.seconds += time.perf_counter() - t0

    def start(self, plan) -> None:
        self.inner.start(plan)

    def add(self, batch) -> None:
        self._timed("add", batch)

    def add_layer(self, batch, layer: int, maps) -> None:
        self._timed("add_layer", batch, layer, maps)

    def end_batch(self, batch) -> None:
        self._timed("end_batch", batch)

    def close(self) -> None:
        self.inner.close()

    def abort(self) -> None:
        self.inner.abort()


class _Partial:
    """A per-example accumulator in the stream, fed layer by layer on the model's device
    (:class:`bertlook.attention.layer_readers.PerLayer`, built from the stream's plan by ``make(plan, tokens)``)
    and the partial file it becomes (``save``)."""

    def __init__(self, name: str, path, kind: str, make, partial_kind: str, *, ids=None, max_examples=None) -> None:
        from bertlook.attention.layer_readers import PerLayer

        self.name, self.path, self.partial_kind, self.max_examples = name, path, partial_kind, max_examples
        self.stream = PerLayer(lambda plan: make(plan, _special_tokens(plan)), kind=kind, ids=ids)
        self.reader = _Timed(name, self.stream)

    def save(self) -> None:
        meta, arrays = self.stream.accumulator.partial(n_examples_in_store=self.stream.n_stream,
                                                       max_examples=self.max_examples)
        save_partial(self.path, self.partial_kind, meta, arrays)


def _special_tokens(plan) -> dict[str, Any]:
    """The token roles of the stream (:mod:`bertlook.analyses.token_roles`): an encoder's CLS and SEP strings,
    a decoder's first token (None) and EOS token, and whether the maps are causal."""
    from bertlook.analyses.token_roles import is_causal

    tokens = plan.meta.get("special_tokens") or {}
    if is_causal(plan.meta):
        return {"cls_token": tokens.get("cls"), "sep_token": tokens.get("sep"), "causal": True}
    return {"cls_token": tokens.get("cls") or "[CLS]", "sep_token": tokens.get("sep") or "[SEP]"}


def _partials(args, threads: int) -> list[_Partial]:
    """The statistics asked for on the command line, as stream readers, the heaviest first (the JS sums): the
    stream's helper thread takes them while the next batch is computed (:mod:`bertlook.attention.stream`)."""
    from bertlook.analyses import cluster_heads, rollout, surface_stats
    from bertlook.attention.shards import first_segment_ids

    where = lambda kind: f"{args.segments} ({kind} maps of extract-segments)"  # noqa: E731
    ids = lambda n: None if n is None else first_segment_ids(args.segments, n)  # noqa: E731
    out: list[_Partial] = []
    for path, kind in ((args.js_partial, "attention"), (args.norm_js_partial, "norm")):
        if path:
            make = lambda plan, tok, kind=kind: cluster_heads.JsAccumulator(  # noqa: E731
                plan.num_layers, plan.num_heads, where=where(kind), num_threads=threads,
                causal=bool(tok.get("causal")), rows=args.js_rows, seed=args.js_seed)
            out.append(_Partial(f"js_{kind}", path, kind, make, cluster_heads.PARTIAL_KIND,
                                ids=ids(args.js_max_examples), max_examples=args.js_max_examples))
    # ALTI has one map per layer: a "head" per layer, on the first --alti-max-examples segments
    for path, kind, limit in ((args.stats_partial, "attention", None), (args.norm_stats_partial, "norm", None),
                              (args.alti_stats_partial, "alti", args.alti_max_examples)):
        if path:
            make = lambda plan, tok, kind=kind: surface_stats.SurfaceStatsAccumulator(  # noqa: E731
                plan.num_layers, 1 if kind == "alti" else plan.num_heads, where=where(kind), num_threads=threads,
                **tok)
            out.append(_Partial(f"surface_stats_{kind}", path, kind, make, surface_stats.PARTIAL_KIND, ids=ids(limit),
                                max_examples=limit))
    if args.rollout_partial:
        make = lambda plan, tok: rollout.RolloutAccumulator(  # noqa: E731
            plan.num_layers, plan.num_heads, where=where("attention"), store_excluded=plan.excluded, **tok)
        out.append(_Partial("rollout", args.rollout_partial, "attention", make, rollout.PARTIAL_KIND,
                            ids=ids(args.rollout_max_examples), max_examples=args.rollout_max_examples))
    return out


def _cmd_extract(args) -> int:
    import torch

    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.layer_readers import ExampleWindow

    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or torch.get_num_threads()
    check_at_least("--js-rows", args.js_rows, 1, optional=True)
    check_at_least("--alti-max-examples", args.alti_max_examples, 1, optional=True)
    # the readers run layer by layer inside the forward pass (the model paused), so the model and the readers'
    # kernels each get every thread; the stores' writers run beside the next batch (--schedule)
    torch.set_num_threads(threads)
    norms = bool(args.norms or args.norms_out or args.norm_stats_partial or args.norm_js_partial)
    partials = _partials(args, threads)
    saver = fig1_target = None
    if args.fig1_example:
        from bertlook.attention.fig1_example import example_id_from_segments

        fig1_target = example_id_from_segments(args.segments, args.example_index, args.max_seq_len)
        saver = ExampleWindow(fig1_target[0])
    readers = [p.reader for p in partials] + ([saver] if saver else [])
    if args.out is None and args.norms_out is None and not readers:
        raise BertlookError("extract-segments: nothing to write: give --out, --norms-out or a partial output")
    summary = extract_segments(
        args.segments, args.model, args.out, revision=args.revision, batch_size=args.batch_size,
        segment_ids=args.segment_ids, max_seq_len=args.max_seq_len, device=args.device, shard_mb=args.shard_mb,
        model_dtype=args.model_dtype,
        max_unk_rate=args.max_unk_rate, shard=args.shard, norms_out=args.norms_out, norms=norms, consumers=readers,
        workers=threads, schedule=args.schedule,
    )
    for p in partials:
        p.save()
    if saver is not None:
        _save_fig1(args, saver, fig1_target, summary)
    summary["readers"] = {p.name: {"path": str(p.path), "examples": p.stream.count,
                                   "seconds": round(p.reader.seconds, 3)} for p in partials}
    if args.summary:
        write_json(args.summary, summary)
    stores = ([f"attention store -> {args.out}"] if args.out else []) + \
        ([f"norm-based maps -> {args.norms_out}"] if args.norms_out else [])
    print(
        f"extract-segments: {summary['n_examples']} examples ({summary['tokens']} tokens) in {summary['seconds']:.1f} s"
        f"; {'; '.join(stores) if stores else 'no store written (maps only in memory)'}"
        + "".join(f"; {p.name} ({p.reader.seconds:.1f} s) -> {p.path}" for p in partials)
        + (f"; Fig 1 example -> {args.fig1_example}" if saver else "")
        + f"; excluded {summary['excluded_too_long']} over {summary['max_seq_len']} wordpieces; "
        f"{summary['unk_tokens']} [UNK] tokens; {summary['tokens_per_second']} tokens/s on {summary['device']}"
        + (f"; readers {summary['schedule']}" if summary.get("schedule") else "")
    )
    return 0


def _save_fig1(args, saver, target, summary) -> None:
    from bertlook.attention.fig1_example import FIG1_KIND, fig1_partial

    meta, arrays = fig1_partial(where=f"{args.segments} (extract-segments)", example_index=args.example_index,
                                target=target[0], n_total=target[1], num_layers=summary["num_layers"],
                                num_heads=summary["num_heads"], special_tokens=summary["special_tokens"],
                                record=saver.record, attn=saver.attn)
    save_partial(Path(args.fig1_example), FIG1_KIND, meta, arrays)
