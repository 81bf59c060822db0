"""CLI of bertlook.pipeline.sharding: ``merge-stores`` and ``gather-extraction`` (registered by
:func:`bertlook.cli.extract_segments.register_cli`)."""

from __future__ import annotations

from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import check_shards, gather_extraction, merge_summaries, read_json_object, shard_entry

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"gather_extraction": costs.SMALL,
         **dict.fromkeys(("merge_words", "merge_words_random", "merge_words_norm"), costs.SMALL)}


def _cmd_merge_stores(args) -> int:
    from bertlook.attention.shards import merge_stores

    result = merge_stores(args.store, args.out, link=not args.copy)
    if args.part_summary:
        if not args.summary:
            raise BertlookError("--part-summary needs --summary (the gathered summary to write)")
        if len(args.part_summary) != len(args.store):
            raise BertlookError(f"{len(args.part_summary)} --part-summary for {len(args.store)} --store")
        summaries = [read_json_object(p, "extraction summary") for p in args.part_summary]
        check_shards(summaries, args.part_summary)
        summary = merge_summaries(summaries, where=args.part_summary)
        summary["out_dir"] = str(args.out)
        summary["shards"] = [shard_entry(s, p) for s, p in zip(summaries, args.part_summary)]
        write_json(args.summary, summary)
    print(f"merge-stores: {result['n_examples']} examples from {len(args.store)} store(s) -> {args.out} "
          f"({result['n_shard_files']} shard files: {result['linked']} hard-linked, {result['copied']} copied)")
    return 0


def _cmd_gather_extraction(args) -> int:
    summary, meta = gather_extraction(args.part_summary)
    write_json(args.summary, summary)
    if args.meta:
        write_json(args.meta, meta)
    print(f"gather-extraction: {len(args.part_summary)} shard(s), {summary.get('n_examples')} examples, "
          f"{summary.get('excluded_too_long')} excluded as too long -> {args.summary}")
    return 0


def register_cli(subparsers) -> None:
    """Add ``merge-stores`` and ``gather-extraction``."""
    p = add_step_parser(
        subparsers, "merge-stores", "gather the shard stores of a sharded extraction into one attention store",
        description=(
            "Gather attention stores (the shards of `extract-words --shard I/K`, or any stores of one\n"
            "model) into one store without copying maps.\n"
            "Input:  --store DIR (repeatable, shard order), optionally --part-summary JSON per store.\n"
            "Output: --out DIR, one store: shard files hard-linked (copied where the file system\n"
            "        cannot link), index concatenated with shard ids renumbered and put back into the\n"
            "        unsharded length-sorted order, meta.json counts summed; validated when written.\n"
            "        --summary JSON: the gathered extraction summary (counts summed, settings checked)."
        ),
    )
    p.add_argument("--store", action="append", required=True, metavar="DIR", help="input: a store (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="output: the merged store (replaced atomically)")
    p.add_argument("--part-summary", action="append", default=None, metavar="JSON",
                   help="input: the extraction summary of each --store, same order")
    p.add_argument("--summary", default=None, metavar="JSON", help="output: the gathered extraction summary")
    p.add_argument("--copy", action="store_true", help="copy the shard files instead of hard-linking them")
    p.set_defaults(func=_cmd_merge_stores)

    g = add_step_parser(
        subparsers, "gather-extraction", "gather the summaries of a sharded segment extraction (no maps needed)",
        description=(
            "Input:  --part-summary JSON of every shard of `extract-segments --shard I/K`, in order.\n"
            "Output: --summary JSON (what one unsharded `extract-segments` writes: counts summed, settings\n"
            "        checked, per-shard timing under `shards`) and --meta JSON (the meta.json of the\n"
            "        unsharded store: model provenance, exclusions), so later steps (manifest) need no maps."
        ),
    )
    g.add_argument("--part-summary", action="append", required=True, metavar="JSON",
                   help="input: a shard's extraction summary (repeatable, shard order)")
    g.add_argument("--summary", required=True, metavar="JSON", help="output: gathered extraction summary")
    g.add_argument("--meta", default=None, metavar="JSON", help="output: gathered store meta (meta.json)")
    g.set_defaults(func=_cmd_gather_extraction)
