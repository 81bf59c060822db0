"""The forward pass as a stream of map batches: one pass over the maps, any number of readers.

:func:`map_batches` runs a model over examples (already sorted into storage order) in batches and
yields one :class:`MapBatch` per batch: the records, the attention maps ``[batch, layer, head, T, T]``
(float16, as a store keeps them, or float32 where a store converts them), and, when asked, the norm-based maps of
the same forward pass (Kobayashi et al. 2020) and the value norms behind them. Whatever reads the maps
is a *consumer* (:class:`MapConsumer`: ``start``, ``add``, ``close``, ``abort``):

* :class:`StoreConsumer` writes them to an attention store (``extract-segments --out``; the word-level
  stores of ``extract-words`` and ``coref-extract`` are written from the device, layer by layer:
  :class:`bertlook.attention.layer_readers.LayerStore`);
* :class:`bertlook.attention.norms.NormClassSums` adds up ``|| f(x) ||`` per token class;
* :class:`PerExample` hands every example (or a selection by id) of one map kind to an accumulator
  with ``add(record, attn)``: the surface statistics, the JS partial sums, the rollout statistics of
  :mod:`bertlook.analyses` (attached by the ``extract-segments`` CLI, the glue layer);
* :class:`ExampleSaver` keeps one example's map (the Fig 1 example).

The consumers see exactly the float16 values a store would hold (the maps are converted on the
device, as before), so a statistic computed here equals the same statistic read back from a store.

Definitions: docs/definitions.md#token-level-extraction (the one-pass extraction)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from bertlook.attention import norms as norms_mod
from bertlook.attention.layer_capture import capture_layers
from bertlook.attention.store import FORMAT, AttentionWriter, estimate_store_bytes
from bertlook.errors import BertlookError, check_choice
from bertlook.threads import Work, run_items

MAP_KINDS = ("attention", "norm")
#: the map kinds a layer reader (:mod:`bertlook.attention.layer_readers`) may read: the stored kinds and ``alti``
#: (Ferrando et al. 2022, per layer; computed on the device for the examples a reader asks for, never stored:
#: :mod:`bertlook.attention.alti_stream`)
LAYER_KINDS = MAP_KINDS + ("alti",)


@dataclasses.dataclass
class StreamPlan:
    """What every consumer learns before the first forward pass: the examples in storage order, the layout."""

    records: list[dict[str, Any]]  # the kept examples' records, storage order (length-sorted, ties by id)
    num_layers: int
    num_heads: int
    excluded: dict[str, Any]  # exclusions of the stream (over-long examples, the caller's own)
    meta: dict[str, Any]  # the store meta of the stream (model provenance, special tokens, ...)
    norms: bool  # whether the batches carry norm-based maps


@dataclasses.dataclass
class MapBatch:
    """One batch of the stream (numpy arrays on the CPU, padded to the batch's longest example ``T``)."""

    start: int  # storage index of the first example of the batch
    records: list[dict[str, Any]]
    lengths: list[int]
    maps: np.ndarray | None  # [batch, layer, head, query_pos, key_pos]: float16 (float32 for a converting store); None
    #                         when no reader of the batches asked for them on the host (layer readers only)
    norm_maps: np.ndarray | None = None  # [batch, layer, head, query_pos, key_pos], as ``maps``
    value_norms: np.ndarray | None = None  # [batch, layer, head, key_pos] float32: || f_h(x_j) ||

    def example(self, b: int, kind: str = "attention") -> np.ndarray:
        """Example ``b``'s own map ``[layer, head, n, n]`` (a view) of ``kind`` (attention | norm)."""
        n = self.lengths[b]
        if kind == "attention":
            if self.maps is None:
                raise BertlookError("a reader of the host maps, but the stream keeps the maps on the device")
            return self.maps[b, :, :, :n, :n]  # [layer, head, query_pos, key_pos]
        if kind == "norm":
            if self.norm_maps is None:
                raise BertlookError("a consumer of norm-based maps, but the stream computes none")
            return self.norm_maps[b, :, :, :n, :n]  # [layer, head, query_pos, key_pos]
        raise BertlookError(f"unknown map kind {kind!r} (use one of {', '.join(MAP_KINDS)})")


@dataclasses.dataclass
class LayerBatch:
    """The batch whose layers a layer reader (:mod:`bertlook.attention.layer_readers`) is handed: the storage
    index of its first example, the records and the lengths (each example's maps are ``maps[b, :, :n, :n]`` of
    a layer's padded tensor)."""

    start: int
    records: list[dict[str, Any]]
    lengths: list[int]


class MapConsumer:
    """Base class of a reader of the stream; every method is optional."""

    #: the maps it reads (``attention`` | ``norm``); None: none (e.g. the value norms only)
    map_kind: str | None = "attention"

    def start(self, plan: StreamPlan) -> None:
        """Called once before the first forward pass (checks, disk space, files to open)."""

    def add(self, batch: MapBatch) -> None:
        """Called once per batch, in storage order."""

    def close(self) -> None:
        """Called once after the last batch (finish and publish what was written)."""

    def abort(self) -> None:
        """Called on an error before ``close``: leave nothing half-written."""


# ---------------------------------------------------------------------------------------- producer
def _batch_inputs(batch: Sequence[tuple[dict[str, Any], Sequence[int], Sequence[int]]], pad_id: int):
    import torch  # lazy: the extract-segments parser imports this module, and analysis steps do (no torch)

    lengths = [len(ex[1]) for ex in batch]
    B, T = len(batch), max(lengths)
    ids = torch.full((B, T), pad_id, dtype=torch.long)  # [batch, seq]
    tts = torch.zeros((B, T), dtype=torch.long)  # [batch, seq]
    mask = torch.zeros((B, T), dtype=torch.long)  # [batch, seq]
    for b, (_, input_ids, tt_ids) in enumerate(batch):
        n = lengths[b]
        ids[b, :n] = torch.as_tensor(input_ids, dtype=torch.long)  # [seq]
        tts[b, :n] = torch.as_tensor(tt_ids, dtype=torch.long)  # [seq]
        mask[b, :n] = 1
    return lengths, ids, tts, mask


class _LayerSink:
    """The per-layer callback of :func:`bertlook.attention.layer_capture.capture_layers` during one batch: each
    layer's float32 maps converted to ``dtype`` on the device, handed there to the layer readers
    (:mod:`bertlook.attention.layer_readers`) and, for the kinds in ``host``, copied into ``maps[:, layer]`` on the
    CPU; with norms, its norm-based maps and value norms, computed from the layer's maps and value vectors right
    away (the value norms always reach the host: ``L x H x T`` floats). The device holds one layer's maps at a
    time (a large model on a GPU) unless a layer reader keeps some; the CPU only the kinds its readers need."""

    def __init__(self, num_layers: int, dtype, captured=None, norm_modules=None, grams=None, *,
                 readers: Sequence[Any] = (), host: Iterable[str] = MAP_KINDS, pool=None, helpers: int = 0,
                 alti=None, norm_maps: bool = True) -> None:
        self.num_layers, self.dtype = num_layers, dtype
        self.captured, self.norm_modules, self.grams = captured, norm_modules, grams
        self.alti, self.norm_maps = alti, norm_maps  # alti_stream.AltiLayers or None; whether to compute norm maps
        self.readers = {k: [r for r in readers if r.map_kind == k] for k in LAYER_KINDS}  # kind -> layer readers
        self.host = set(host)
        self.pool, self.helpers = pool, helpers  # threads beside this one for the readers' calls of a layer
        self.maps = self.nmaps = self.vnorms = None
        self.seen = 0
        self.batch = None  # the LayerBatch being computed
        self.lengths: list[int] = []
        self.ids: list[Any] = []

    def start(self, batch=None) -> None:
        self.maps = self.nmaps = self.vnorms = None
        self.seen, self.batch = 0, batch
        self.lengths = list(batch.lengths) if batch is not None else []
        self.ids = [r["id"] for r in batch.records] if batch is not None else []

    def __call__(self, layer: int, a) -> None:
        a16 = a.to(self.dtype)  # [batch, head, query_pos, key_pos]: converted on the device
        if "attention" in self.host:
            self.maps = self._host_copy(self.maps, layer, a16)
        calls = [functools.partial(r.add_layer, self.batch, layer, a16) for r in self.readers["attention"]]
        if self.captured is not None and self.norm_maps:
            nm16 = self._norms(layer, a)
            calls += [functools.partial(r.add_layer, self.batch, layer, nm16) for r in self.readers["norm"]]
        if self.readers["alti"]:  # [batch, 1, T, T] float32: the wanted examples computed at the first read
            alti = self.alti.layer_maps(layer, a, self.captured[layer], self.lengths, self._alti_wanted())
            calls += [functools.partial(r.add_layer, self.batch, layer, alti) for r in self.readers["alti"]]
        self._run(calls)
        if self.captured is not None:
            self.captured[layer] = None  # the layer's value vectors are not needed any more
        if self.alti is not None:
            self.alti.release(layer)
        self.seen += 1

    def _alti_wanted(self) -> list[int]:
        """The examples of the batch some ALTI reader wants (``LayerReader.wants``; a reader without it: all)."""
        readers = self.readers["alti"]
        return [b for b, record in enumerate(self.batch.records)
                if any(getattr(r, "wants", lambda _record: True)(record) for r in readers)]

    def _run(self, calls: list) -> None:
        """The readers' calls of one layer (each reader's own calls stay in order: a layer's are all made before
        the next layer's): in this thread and the ``helpers`` threads of ``pool`` where there are several (their
        kernels release the GIL: numba, torch, numpy), else one after the other."""
        run_items(lambda call: call(), calls, self.helpers + 1 if self.pool is not None else 1, pool=self.pool)

    def _host_copy(self, buf, layer: int, a16):
        import torch  # lazy: see _batch_inputs

        if buf is None:  # on the CPU; page-locked beside a GPU (device-to-host copies at full speed)
            B, H, T, _ = a16.shape
            buf = torch.empty((B, self.num_layers, H, T, T), dtype=self.dtype, pin_memory=a16.is_cuda)
        buf[:, layer].copy_(a16)  # [batch, head, query_pos, key_pos]
        return buf

    def _norms(self, layer: int, a):
        import torch  # lazy: see _batch_inputs

        values = self.captured[layer]
        if values is None:
            raise BertlookError("the value projections were not called in the forward pass (norm-based maps need them)")
        B, H, T, _ = a.shape
        if self.vnorms is None:
            self.vnorms = torch.empty((B, self.num_layers, H, T), dtype=torch.float32, pin_memory=a.is_cuda)
        # [batch, head, key_pos]
        vn = norms_mod.value_norms(values, self.norm_modules[layer][1].weight, H, gram=self.grams[layer])
        self.vnorms[:, layer].copy_(vn)
        nm16 = norms_mod.norm_maps(a, vn, lengths=self.lengths, ids=self.ids).to(self.dtype)  # [batch, head, T, T]
        if "norm" in self.host:
            self.nmaps = self._host_copy(self.nmaps, layer, nm16)
        return nm16

    def check(self) -> None:
        if self.seen != self.num_layers:
            raise BertlookError(f"the model returned attention weights for {self.seen} of {self.num_layers} layers "
                                "(it must be loaded with attn_implementation='eager')")

    def end_batch(self) -> None:
        self._run([functools.partial(r.end_batch, self.batch) for kind in LAYER_KINDS for r in self.readers[kind]])


def map_batches(kept: Sequence[tuple[dict[str, Any], Sequence[int], Sequence[int]]], model, *, batch_size: int,
                device, num_layers: int, num_heads: int, map_dtype: str = "float16", norm_modules=None,
                use_token_types: bool = True, on_batch: Callable[[int], None] | None = None,
                layer_readers: Sequence[Any] = (), host: Iterable[str] = MAP_KINDS,
                reader_threads: int = 1, norm_maps: bool = True) -> Iterator[MapBatch]:
    """Run ``model`` on ``kept`` (``(record, input_ids, token_type_ids)``, storage order) in batches of
    ``batch_size`` under ``torch.inference_mode()``, the model in eval mode; yield a :class:`MapBatch` each.

    Each batch is padded to its longest example with the model's pad id and an attention mask; the maps are
    converted to ``map_dtype`` on the device and moved to the CPU. ``norm_modules``
    (:func:`bertlook.attention.norms.find_attention_modules`): also the row-normalised norm-based maps and
    the value norms of the same pass. ``on_batch(n)`` is called after each batch (progress).
    ``layer_readers`` (:class:`bertlook.attention.layer_readers.LayerReader`): handed each layer's maps of
    their kind on the device during the forward pass (``reader_threads`` > 1: a layer's calls of several readers
    in that many threads; the results do not depend on it); ``host``: the map kinds copied to the CPU for the
    batches (the others are None in the :class:`MapBatch`). Layer readers of the kind ``alti`` get each layer's ALTI
    maps (:mod:`bertlook.attention.alti_stream`; they need ``norm_modules``, whose value vectors ALTI reads);
    ``norm_maps`` False: the value vectors are captured for them, but no norm-based map is computed.
    """
    import torch  # lazy: see _batch_inputs

    dtype = {"float16": torch.float16, "float32": torch.float32}[map_dtype]
    pad_id = getattr(model.config, "pad_token_id", None)
    pad_id = 0 if pad_id is None else int(pad_id)
    was_training = model.training
    model.eval()
    try:
        with contextlib.ExitStack() as stack:
            captured = grams = alti = None
            if norm_modules is not None:
                captured = stack.enter_context(norms_mod.capture_values(norm_modules))
                grams = [norms_mod.head_gram(dense.weight.detach(), num_heads) for _, dense in norm_modules]
            if any(r.map_kind == "alti" for r in layer_readers):
                alti = stack.enter_context(_alti_layers(model, norm_modules))
            # each layer's float32 maps leave the forward pass as soon as the layer computed them
            helpers = max(0, int(reader_threads) - 1) if len(layer_readers) > 1 else 0
            pool = stack.enter_context(ThreadPoolExecutor(helpers, thread_name_prefix="layer-reader")) if helpers else None
            sink = _LayerSink(num_layers, dtype, captured, norm_modules, grams, readers=layer_readers, host=host,
                              pool=pool, helpers=helpers, alti=alti, norm_maps=norm_maps)
            stack.enter_context(capture_layers(model, sink))
            stack.enter_context(torch.inference_mode())
            for start in range(0, len(kept), batch_size):
                batch = kept[start:start + batch_size]
                lengths, ids, tts, mask = _batch_inputs(batch, pad_id)
                kwargs = dict(input_ids=ids.to(device), attention_mask=mask.to(device))
                if use_token_types:
                    kwargs["token_type_ids"] = tts.to(device)
                if captured is not None:
                    captured[:] = [None] * len(captured)
                records = [ex[0] for ex in batch]
                sink.start(LayerBatch(start=start, records=records, lengths=lengths))
                model(**kwargs)
                sink.check()
                sink.end_batch()
                host_np = lambda t: None if t is None else t.cpu().numpy()  # noqa: E731
                # [batch, layer, head, T, T] each (None: kept on the device)
                out = MapBatch(start=start, records=records, lengths=lengths, maps=host_np(sink.maps))
                if captured is not None:
                    out.norm_maps, out.value_norms = host_np(sink.nmaps), host_np(sink.vnorms)
                sink.start()  # release the device buffers before the consumers run
                yield out
                if on_batch is not None:
                    on_batch(len(batch))
    finally:
        if was_training:
            model.train()


def _alti_layers(model, norm_modules):
    """The layer inputs' capture of the stream's ALTI readers (:class:`bertlook.attention.alti_stream.AltiLayers`)."""
    from bertlook.attention.alti_stream import AltiLayers  # lazy: only where a reader asks for ALTI

    if norm_modules is None:
        raise BertlookError("ALTI in the stream needs the value vectors of the norm-based maps (norm_modules)")
    return AltiLayers(model, norm_modules).capture()


SCHEDULES = ("auto", "overlap", "phased")
SYSFS_CPU = "/sys/devices/system/cpu"


def shares_cores(cpus: Iterable[int] | None = None, sysfs: str = SYSFS_CPU) -> bool | None:
    """Whether two of ``cpus`` (default: the CPUs this process may run on) are hyperthreads of one core (Linux
    sysfs ``topology/thread_siblings_list``); None where that cannot be read (another OS, no sysfs)."""
    try:
        cpus = set(cpus if cpus is not None else os.sched_getaffinity(0))
        for c in cpus:
            with open(f"{sysfs}/cpu{c}/topology/thread_siblings_list", encoding="ascii") as f:
                if (_cpu_list(f.read()) & cpus) - {c}:
                    return True
    except (OSError, AttributeError, ValueError):
        return None
    return False


def _cpu_list(text: str) -> set[int]:
    """``0-1,4`` -> {0, 1, 4} (the kernel's CPU list format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def choose_schedule(device, schedule: str = "auto", cpus: Iterable[int] | None = None,
                    sysfs: str = SYSFS_CPU) -> tuple[str, str]:
    """The readers' schedule beside the forward pass and why: ``overlap`` (:func:`_pipelined`: batch t's readers
    beside batch t + 1's forward pass, which gets one thread less) or ``phased`` (each forward pass on every
    thread, then its readers on every thread). ``auto``: overlap where the forward pass does not run on the CPU
    (an accelerator leaves the cores to the readers) or where the cores are hyperthreads of one (the dense
    forward gains 1.3x from a second hyperthread, the latency-bound JS kernel 2x, so each does best on its
    own hyperthread); phased on separate cores (a BERT-base shard of 125 segments: 40.0 -> 31.3 s on 2 cores,
    docs/development/benchmarks.md). Either way the readers see the same batches in the same order."""
    check_choice("schedule", schedule, SCHEDULES)
    if schedule != "auto":
        return schedule, "asked for"
    if getattr(device, "type", str(device)) != "cpu":
        return "overlap", f"the model runs on {device}"
    smt = shares_cores(cpus, sysfs)
    if smt is None:
        return "overlap", "CPU topology unknown"
    return ("overlap", "hyperthreads of one core") if smt else ("phased", "separate cores")


def run_consumers(batches: Iterable[MapBatch], consumers: Sequence[MapConsumer], plan: StreamPlan, *,
                  workers: int = 1, schedule: str = "overlap") -> None:
    """Start every consumer, hand each batch to each in order, close them all; on any error abort every
    consumer (each removes what it began writing) and re-raise.

    ``workers`` > 1: the consumers of a batch run in ``workers - 1`` helper threads and the calling thread;
    ``schedule`` (:func:`choose_schedule`) ``overlap``: while the calling thread computes batch t + 1, and it
    joins them once that batch is ready (:func:`_pipelined`): besides the model's own threads, at most
    ``workers`` threads are busy; ``phased``: after the batch's forward pass, which runs on ``workers - 1``
    more threads than the model's own. Every consumer still sees the batches one at a time and in order, so
    the results do not depend on ``workers`` or ``schedule``. Layer readers (``layerwise``,
    :mod:`bertlook.attention.layer_readers`) are started, closed and aborted here like the others; their layers
    reach them inside ``batches`` (:func:`map_batches`' ``layer_readers``), not through ``add``.
    """
    started: list[MapConsumer] = []
    try:
        for c in consumers:
            if c.map_kind == "norm" and not plan.norms:
                raise BertlookError(f"{type(c).__name__} reads norm-based maps, but the stream computes none")
            c.start(plan)
            started.append(c)
        adders = [c for c in consumers if not getattr(c, "layerwise", False)]  # layer readers: in map_batches
        if workers > 1 and adders:
            _pipelined(batches, adders, workers, overlap=schedule == "overlap")
        else:
            for batch in batches:
                for c in adders:
                    c.add(batch)
        for c in consumers:
            c.close()
    except BaseException:
        for c in started:
            c.abort()
        raise


def _round(batch: MapBatch, consumers: Sequence[MapConsumer]) -> Work:
    """One batch's consumer calls, taken one at a time and in the consumers' order by whichever thread is free:
    a helper thread, or the calling thread once it has computed the next batch (``finish``). (A function of its
    own: the calls keep this ``batch`` while the caller's loop moves on to the next one.)"""
    return Work(lambda consumer: consumer.add(batch), consumers)


@contextlib.contextmanager
def _more_model_threads(extra: int):
    """torch's intra-op threads raised by ``extra`` within the block (the first batch's forward pass: 1.1 s less
    per BERT-base segment shard of 125 segments, docs/development/benchmarks.md)."""
    import torch  # lazy: see _batch_inputs

    before = torch.get_num_threads()
    torch.set_num_threads(before + extra)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _pipelined(batches: Iterable[MapBatch], consumers: Sequence[MapConsumer], workers: int, *,
               overlap: bool = True) -> None:
    """Batch t's consumer calls (a round: :func:`_round`) go to ``workers - 1`` helper threads while the calling thread
    computes batch t + 1; then the calling thread makes the calls not yet taken, waits for the rest, and batch
    t + 1's round begins (so each consumer sees the batches in order). ``overlap=False`` (the ``phased``
    schedule): every batch is computed with the helpers' threads given to the model, as the first one always is,
    and its round is made by the helpers and the calling thread before the next forward pass.

    The calling thread never waits idle while calls are left: with the helpers alone (``workers`` of them, the
    calling thread waiting), the readers and the forward pass were more threads than cores and a BERT-base
    segment shard took 27.8 s instead of 24.6 s (docs/development/benchmarks.md). List the heaviest consumers
    first: the helpers take them while the forward pass runs, the calling thread the light ones at the end. (One
    thread per consumer with its own queue measured slower still: the consumers' Python-level loops contend for
    the GIL.)
    numpy's BLAS runs on one thread meanwhile: the readers already fill the cores beside the forward pass, and
    OpenBLAS' own worker threads spin-wait between calls (the rollout reader's 128 x 128 products: 12.1 -> 4.0 s
    and the demo's extraction job 132 -> 111 CPU-s in standalone runs of its extract-segments command; the
    same numbers, each product's sums keep their order)."""
    from threadpoolctl import threadpool_limits  # lazy: not in envs/analysis.yaml, whose steps import this module

    with threadpool_limits(limits=1, user_api="blas"), \
            ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="consumer") as pool:
        current: Work | None = None
        batches = iter(batches)
        try:
            with _more_model_threads(workers - 1):  # nothing to overlap yet: the helpers' cores go to the model
                batch = next(batches, None)
            while batch is not None:
                if current is not None:
                    current.finish()
                current = _round(batch, consumers).start(workers - 1, pool)
                if overlap:
                    batch = next(batches, None)  # overlaps the helpers' work on the current round
                    continue
                current.finish()
                with _more_model_threads(workers - 1):
                    batch = next(batches, None)
            if current is not None:
                current.finish()
        finally:
            if current is not None:
                current.cancel()  # on an error: no more calls are taken; the pool waits for the running ones


# --------------------------------------------------------------------------------------- consumers
class StoreConsumer(MapConsumer):
    """Write the stream's maps of one kind to a new attention store at ``out_dir`` (atomically, on ``close``).

    ``stored_size(record, n)`` is the size of the map it stores (for the size estimate; converted maps:
    :class:`bertlook.attention.layer_readers.LayerStore`).
    ``meta`` is added to the stream's store meta; ``extra_meta`` is written at ``close``.
    """

    def __init__(self, out_dir, *, kind: str = "attention", level: str = "token", shard_mb: float = 256,
                 meta: dict[str, Any] | None = None, extra_meta: dict[str, Any] | None = None,
                 stored_size=None) -> None:
        check_choice("map kind", kind, MAP_KINDS)
        self.out_dir, self.map_kind, self.level, self.shard_mb = out_dir, kind, level, shard_mb
        self.meta, self.extra_meta = dict(meta or {}), extra_meta
        self.stored_size = stored_size
        self.writer = None
        self.published = False
        self.excluded: dict[str, Any] = {}

    def estimate(self, plan: StreamPlan) -> dict[str, int]:
        """Bytes of the store this consumer will write (:func:`bertlook.attention.store.estimate_store_bytes`)."""
        sizes = [int(self.stored_size(r, len(r["tokens"]))) if self.stored_size else len(r["tokens"])
                 for r in plan.records]
        return estimate_store_bytes(plan.records, sizes, plan.num_layers, plan.num_heads,
                                    meta={**plan.meta, **self.meta, "excluded": plan.excluded})

    def start(self, plan: StreamPlan) -> None:
        self.excluded = plan.excluded
        self.writer = AttentionWriter(self.out_dir, num_layers=plan.num_layers, num_heads=plan.num_heads,
                                      level=self.level, shard_bytes=int(self.shard_mb * 2**20),
                                      meta={**plan.meta, **self.meta})

    def add(self, batch: MapBatch) -> None:
        for b, record in enumerate(batch.records):
            self.writer.add(record, batch.example(b, self.map_kind))  # [layer, head, query_pos, key_pos]

    def close(self) -> None:
        self.writer.close(excluded=self.excluded, extra_meta=self.extra_meta)
        self.published = True

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
        if self.published:  # published, then another consumer failed: nothing is left at the path
            shutil.rmtree(self.out_dir, ignore_errors=True)


class StreamMeta(MapConsumer):
    """Record the stream's plan: :meth:`meta` is the ``meta.json`` a store of the whole stream would have
    (layout, exclusions, the stream's meta, ``extra_meta``), for a run that writes no store."""

    map_kind = None

    def __init__(self, extra_meta: dict[str, Any] | None = None) -> None:
        self.extra_meta = extra_meta
        self.plan: StreamPlan | None = None

    def start(self, plan: StreamPlan) -> None:
        self.plan = plan

    def meta(self) -> dict[str, Any]:
        p = self.plan
        layout = {"format": FORMAT, "num_layers": p.num_layers, "num_heads": p.num_heads, "dtype": "float16",
                  "level": "token", "n_examples": len(p.records)}
        return {**layout, "excluded": p.excluded, **p.meta, **(self.extra_meta or {}), **layout, "stored": False}


class PerExample(MapConsumer):
    """Hand each example of one map kind to an accumulator's ``add(record, attn)`` (``attn`` float16
    ``[L, H, n, n]``, the values a store would hold).

    ``make(plan)`` builds the accumulator when the stream starts (it learns the layout and the special
    tokens from the :class:`StreamPlan`); ``ids``: only the examples with these ids (None: every example).
    After the stream: ``accumulator``, ``count`` (examples handed over) and ``n_stream`` (examples in the
    stream).
    """

    def __init__(self, make: Callable[[StreamPlan], Any], *, kind: str = "attention", ids: set | None = None) -> None:
        check_choice("map kind", kind, MAP_KINDS)
        self.make, self.map_kind, self.ids = make, kind, ids
        self.accumulator = None
        self.count = self.n_stream = 0

    def start(self, plan: StreamPlan) -> None:
        self.accumulator = self.make(plan)
        self.n_stream = len(plan.records)

    def chosen(self, record: dict[str, Any]) -> bool:
        """Whether the example ``record`` goes to the accumulator (``ids``)."""
        return self.ids is None or record.get("id") in self.ids

    def add(self, batch: MapBatch) -> None:
        for b, record in enumerate(batch.records):
            if self.chosen(record):
                self.accumulator.add(record, batch.example(b, self.map_kind))
                self.count += 1


class ExampleSaver(MapConsumer):
    """Keep a copy of the map of the example whose id is ``target`` (attention maps); ``found`` says whether
    the stream held it, ``record`` / ``attn`` are its record and map."""

    def __init__(self, target: Any, *, kind: str = "attention") -> None:
        self.target, self.map_kind = target, kind
        self.found, self.record, self.attn = False, None, None

    def add(self, batch: MapBatch) -> None:
        for b, record in enumerate(batch.records):
            if record.get("id") == self.target:
                self.found, self.record = True, record
                self.attn = np.array(batch.example(b, self.map_kind), copy=True)  # [layer, head, n, n]
