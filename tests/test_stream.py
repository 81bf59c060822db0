"""bertlook.attention.stream and the one-pass ``extract-segments``: the forward pass as a stream of map batches,
read by the store writer and by the statistics' accumulators. The statistics computed in the stream must equal
the same statistics read back from a store (bit for bit: the consumers see the float16 values a store holds);
without --out no store is written; an error leaves nothing half-written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertlook import cli
from bertlook.attention.extraction import encode_segment, extract_to_store, stream_maps
from bertlook.attention.store import open_store
from bertlook.attention.stream import (ExampleSaver, MapBatch, MapConsumer, PerExample, StoreConsumer, StreamPlan,
                                       choose_schedule, run_consumers, shares_cores)
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import load_partial
from bertlook.testing.tiny_models import make_segment

TEXTS = [
    ("the cat sat on the mat .", "the dog ran , and it was good ."),
    ("john saw mary .", "she read a book in paris ."),
    ("the king and the queen went to london .", "they said it was a very good city , and then they came home ."),
    ("a man .", "a woman ."),
    ("it was a big house .", "there were many people ."),
    ("one , two , three .", "four five six ."),
]


@pytest.fixture(scope="module")
def segments_file(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("seg") / "segments.jsonl"
    segs = [make_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]
    path.write_text("".join(json.dumps(s) + "\n" for s in segs))
    return path, segs


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    from bertlook.attention.modeling import load_model, resolve_model

    return load_model(resolve_model(str(tiny_bert_dir)), "cpu")


@pytest.fixture(scope="module")
def one_pass(tmp_path_factory, segments_file, tiny_bert_dir):
    """One extract-segments run writing the stores and every partial of the same pass (batch 4: a short
    segment is padded in its batch)."""
    out = tmp_path_factory.mktemp("pass")
    seg, _ = segments_file
    argv = ["extract-segments", "--model", str(tiny_bert_dir), "--segments", str(seg), "--device", "cpu",
            "--batch-size", "4", "--out", str(out / "store"), "--norms-out", str(out / "norms"),
            "--stats-partial", str(out / "stats.npz"), "--norm-stats-partial", str(out / "nstats.npz"),
            "--js-partial", str(out / "js.npz"), "--norm-js-partial", str(out / "njs.npz"),
            "--rollout-partial", str(out / "rollout.npz"), "--fig1-example", str(out / "fig1.npz"),
            "--example-index", "2", "--summary", str(out / "summary.json"), "--threads", "1"]
    assert cli.main(argv) == 0
    return out


@pytest.mark.parametrize("name,kind,store", [("stats", "surface-stats", "store"), ("nstats", "surface-stats", "norms"),
                                             ("js", "js-divergence", "store"), ("njs", "js-divergence", "norms"),
                                             ("rollout", "rollout", "store")])
def test_stream_partials_equal_the_store_reading_ones(one_pass, name, kind, store):
    command = {"surface-stats": "surface-stats", "js-divergence": "cluster-heads", "rollout": "rollout"}[kind]
    ref = one_pass / f"ref-{name}.npz"
    argv = [command, "--attention", str(one_pass / store), "--out-partial", str(ref)]
    if command == "cluster-heads":
        argv += ["--threads", "1"]
    assert cli.main(argv) == 0
    m1, a1 = load_partial(one_pass / f"{name}.npz", kind)
    m2, a2 = load_partial(ref, kind)
    for key in a2:
        assert np.array_equal(a1[key], a2[key]), key  # the same float16 values, the same sums
    for key in ("n_examples", "n_examples_in_store", "num_layers", "num_heads", "sum_n", "counts", "special_tokens"):
        assert m1.get(key) == m2.get(key), key


def test_stream_fig1_example_and_summary(one_pass, segments_file):
    meta, arrays = load_partial(one_pass / "fig1.npz", "fig1-example")
    assert meta["found"] and meta["example_index"] == 2
    store = open_store(one_pass / "store")
    k = [r["id"] for r in store.records].index(meta["id"])
    assert store.records[2]["id"] == meta["id"] and np.array_equal(arrays["attn"], store.get(k))
    summary = json.loads((one_pass / "summary.json").read_text())
    assert summary["n_examples"] == len(TEXTS) and summary["stores"] == [str(one_pass / "store"), str(one_pass / "norms")]
    assert set(summary["readers"]) == {"surface_stats_attention", "surface_stats_norm", "js_attention", "js_norm",
                                       "rollout"}
    assert all(r["examples"] == len(TEXTS) for r in summary["readers"].values())
    assert summary["norms"]["classes"] == ["cls", "sep", "punct", "other"]
    assert summary["map_bytes"] == summary["estimated_map_bytes"]  # both stores written: every map


def test_no_store_without_out(tmp_path, segments_file, tiny_bert_dir, one_pass):
    """Without --out no map is written at all; the partials are the same as with the stores."""
    seg, _ = segments_file
    argv = ["extract-segments", "--model", str(tiny_bert_dir), "--segments", str(seg), "--device", "cpu",
            "--batch-size", "4", "--stats-partial", str(tmp_path / "stats.npz"), "--norm-stats-partial",
            str(tmp_path / "nstats.npz"), "--summary", str(tmp_path / "s.json"), "--shard", "1/1"]
    assert cli.main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nstats.npz", "s.json", "stats.npz"]
    for name in ("stats", "nstats"):
        a1, a2 = load_partial(tmp_path / f"{name}.npz", "surface-stats")[1], load_partial(one_pass / f"{name}.npz",
                                                                                          "surface-stats")[1]
        assert all(np.array_equal(a1[k], a2[k]) for k in a2)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["stores"] == [] and summary["estimated_map_bytes"] == 0 and summary["map_bytes"] > 0
    meta = summary["store_meta"]  # what gather-extraction needs: the store meta of the stream, marked not stored
    assert meta["stored"] is False and meta["n_examples"] == len(TEXTS) and meta["model"]["spec"] == str(tiny_bert_dir)


def test_nothing_to_write_is_an_error(tmp_path, segments_file, tiny_bert_dir, capsys):
    seg, _ = segments_file
    assert cli.main(["extract-segments", "--model", str(tiny_bert_dir), "--segments", str(seg)]) == 2
    assert "nothing to write" in capsys.readouterr().err


def test_js_selection_by_the_first_segments(tmp_path, segments_file, tiny_bert_dir):
    seg, segs = segments_file
    argv = ["extract-segments", "--model", str(tiny_bert_dir), "--segments", str(seg), "--device", "cpu",
            "--js-partial", str(tmp_path / "js.npz"), "--js-max-examples", "2", "--threads", "1"]
    assert cli.main(argv) == 0
    meta, _ = load_partial(tmp_path / "js.npz", "js-divergence")
    assert meta["n_examples"] == 2 and meta["n_examples_in_store"] == len(TEXTS) and meta["max_examples"] == 2


class _Boom(MapConsumer):
    def __init__(self, after: int) -> None:
        self.after, self.seen = after, 0

    def add(self, batch) -> None:
        self.seen += 1
        if self.seen > self.after:
            raise BertlookError("boom")


@pytest.mark.parametrize("schedule", ["overlap", "phased"])
def test_pipelined_readers_give_the_same_partials(tmp_path, one_pass, segments_file, tiny_bert_dir, schedule):
    """--threads 2: the readers run in threads beside the next batch's forward pass (overlap) or after each one
    (phased; run_consumers(workers=2)); every partial is the same array for array as the sequential pass
    (--threads 1, the one_pass fixture)."""
    seg, _ = segments_file
    argv = ["extract-segments", "--model", str(tiny_bert_dir), "--segments", str(seg), "--device", "cpu",
            "--batch-size", "2", "--stats-partial", str(tmp_path / "stats.npz"),
            "--norm-stats-partial", str(tmp_path / "nstats.npz"), "--js-partial", str(tmp_path / "js.npz"),
            "--norm-js-partial", str(tmp_path / "njs.npz"), "--rollout-partial", str(tmp_path / "rollout.npz"),
            "--threads", "2", "--schedule", schedule, "--summary", str(tmp_path / "s.json")]
    assert cli.main(argv) == 0
    assert json.loads((tmp_path / "s.json").read_text())["schedule"] == f"{schedule} (asked for)"
    for name in ("stats", "nstats", "js", "njs", "rollout"):
        with np.load(one_pass / f"{name}.npz") as a, np.load(tmp_path / f"{name}.npz") as b:
            keys = [k for k in a.files if k != "meta"]
            assert keys == [k for k in b.files if k != "meta"] and keys, name
            for k in keys:
                assert np.array_equal(a[k], b[k]), (name, k)


@pytest.mark.parametrize("after", [0, 2])
def test_a_failing_pipelined_consumer_leaves_no_store(tmp_path, segments_file, tokenizer, model, after):
    _, segs = segments_file
    examples = [(s, *encode_segment(s, tokenizer, "zeros")) for s in segs]
    with pytest.raises(BertlookError, match="boom"):
        stream_maps(examples, model, [StoreConsumer(tmp_path / "store"), _Boom(after)], batch_size=2, device="cpu",
                    meta={"special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}}, progress_every=0, workers=2)
    assert not [p for p in tmp_path.iterdir()]


@pytest.mark.parametrize("after", [0, 1])
def test_a_failing_consumer_leaves_no_store(tmp_path, segments_file, tokenizer, model, after):
    """A reader failing mid-stream (after = 0: at the first batch) or after the last batch was written
    (close order: the store closes first, then a later consumer fails) leaves nothing at the store's path."""
    _, segs = segments_file
    examples = [(s, *encode_segment(s, tokenizer, "zeros")) for s in segs]

    class LateBoom(MapConsumer):
        def close(self) -> None:
            raise BertlookError("late boom")

    boom = _Boom(after) if after == 0 else LateBoom()
    with pytest.raises(BertlookError, match="boom"):
        stream_maps(examples, model, [StoreConsumer(tmp_path / "store"), boom], batch_size=4, device="cpu",
                    meta={"special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}}, progress_every=0)
    assert not (tmp_path / "store").exists()
    assert not [p for p in tmp_path.iterdir()]  # no temporary directory left either


def test_per_example_selection_and_saver(segments_file, tokenizer, model):
    _, segs = segments_file
    examples = [(s, *encode_segment(s, tokenizer, "zeros")) for s in segs]
    seen = []

    class Acc:
        def add(self, record, attn):
            assert attn.dtype == np.float16 and attn.shape[-1] == len(record["tokens"])
            seen.append(record["id"])

    reader = PerExample(lambda plan: Acc(), ids={1, 3})
    saver = ExampleSaver(3)
    stream_maps(examples, model, [reader, saver], batch_size=2, device="cpu", meta={}, progress_every=0)
    assert sorted(seen) == [1, 3] and reader.count == 2 and reader.n_stream == len(segs)
    assert saver.found and saver.record["id"] == 3 and saver.attn.shape[-1] == len(segs[3]["tokens"])
    # norm maps asked for without computing them: refused before any work
    with pytest.raises(BertlookError, match="norm"):
        stream_maps(examples, model, [PerExample(lambda plan: Acc(), kind="norm")], batch_size=2, device="cpu",
                    meta={}, progress_every=0)


def test_extract_to_store_is_the_stream_with_a_writer(tmp_path, segments_file, tokenizer, model):
    """extract_to_store (the store API of extract-words and coref) = stream_maps + StoreConsumer: same maps."""
    _, segs = segments_file
    examples = [(s, *encode_segment(s, tokenizer, "zeros")) for s in segs]
    extract_to_store(examples, model, tmp_path / "a", batch_size=3, device="cpu", progress_every=0,
                     meta={"special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}})
    stream_maps(examples, model, [StoreConsumer(tmp_path / "b")], batch_size=3, device="cpu", progress_every=0,
                meta={"special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}})
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    assert [r["id"] for r in a.records] == [r["id"] for r in b.records]
    assert all(np.array_equal(a.get(k), b.get(k)) for k in range(len(a)))


class _Recorder(MapConsumer):
    """Records which thread made each call and how many calls ran at once (``busy``, shared)."""

    map_kind = None

    def __init__(self, name, seconds, busy):
        self.name, self.seconds, self.busy = name, seconds, busy
        self.seen, self.threads = [], []

    def add(self, batch) -> None:
        import threading
        import time

        with self.busy["lock"]:
            self.busy["now"] += 1
            self.busy["max"] = max(self.busy["max"], self.busy["now"])
        self.threads.append(threading.current_thread().name)
        time.sleep(self.seconds)
        self.seen.append(batch.start)
        with self.busy["lock"]:
            self.busy["now"] -= 1


def _fake_batches(n, seconds, threads_seen):
    import time

    import torch

    for k in range(n):
        threads_seen.append(torch.get_num_threads())  # while this batch's "forward pass" runs
        time.sleep(seconds)
        yield MapBatch(start=k, records=[], lengths=[], maps=np.zeros((0, 1, 1, 1, 1), dtype=np.float16))


def test_pipelined_rounds_keep_order_and_the_calling_thread_helps():
    """workers = 2: one helper thread takes batch t's calls (heaviest consumer first) while batch t + 1 is
    computed; then the calling thread makes the calls left. Each consumer sees the batches in order, at most
    two calls run at once, and the first batch (nothing to overlap) gets one more model thread."""
    import threading

    import torch

    busy = {"lock": threading.Lock(), "now": 0, "max": 0}
    heavy = _Recorder("heavy", 0.12, busy)
    light = [_Recorder(f"light{k}", 0.04, busy) for k in range(3)]
    plan = StreamPlan(records=[], num_layers=1, num_heads=1, excluded={}, meta={}, norms=False)
    threads_seen: list[int] = []
    before = torch.get_num_threads()
    run_consumers(_fake_batches(4, 0.05, threads_seen), [heavy, *light], plan, workers=2)
    assert torch.get_num_threads() == before
    assert threads_seen == [before + 1] + [before] * 3
    for c in (heavy, *light):
        assert c.seen == [0, 1, 2, 3], c.name
    assert busy["max"] == 2
    assert all(t.startswith("consumer") for t in heavy.threads[:3])  # the helper takes the heavy one first
    made_by_caller = [t for c in light for t in c.threads if t == threading.main_thread().name]
    assert made_by_caller  # the calling thread made calls once its batch was ready


def test_pipelined_error_in_the_forward_pass_stops_the_helpers():
    """An error while computing batch t + 1 leaves batch t's untaken calls unmade and is re-raised (after the
    running calls end); every consumer is aborted."""
    import threading

    busy = {"lock": threading.Lock(), "now": 0, "max": 0}
    slow = [_Recorder(f"c{k}", 0.05, busy) for k in range(4)]
    aborted = []
    for c in slow:
        c.abort = lambda c=c: aborted.append(c.name)

    def batches():
        yield MapBatch(start=0, records=[], lengths=[], maps=np.zeros((0, 1, 1, 1, 1), dtype=np.float16))
        raise BertlookError("forward failed")

    plan = StreamPlan(records=[], num_layers=1, num_heads=1, excluded={}, meta={}, norms=False)
    with pytest.raises(BertlookError, match="forward failed"):
        run_consumers(batches(), slow, plan, workers=2)
    assert sorted(aborted) == ["c0", "c1", "c2", "c3"]
    assert sum(len(c.seen) for c in slow) < 4  # the helper had time for some calls, not all four
    assert busy["now"] == 0  # no call still running when the error came back


def test_phased_rounds_follow_each_forward_pass_on_every_thread():
    """schedule phased: every batch's forward pass gets the helpers' threads (not only the first), and its
    calls are made (by the helper and the calling thread) before the next forward pass begins: no call
    overlaps a forward pass; each consumer sees the batches in order."""
    import threading
    import time

    import torch

    busy = {"lock": threading.Lock(), "now": 0, "max": 0}
    heavy = _Recorder("heavy", 0.06, busy)
    light = [_Recorder(f"light{k}", 0.02, busy) for k in range(3)]
    plan = StreamPlan(records=[], num_layers=1, num_heads=1, excluded={}, meta={}, norms=False)
    threads_seen: list[int] = []
    calls_during_forward = []

    def batches():
        for b in _fake_batches(4, 0.03, threads_seen):
            yield b
            calls_during_forward.append(busy["now"])  # the next forward pass starts when the generator resumes

    before = torch.get_num_threads()
    t0 = time.perf_counter()
    run_consumers(batches(), [heavy, *light], plan, workers=2, schedule="phased")
    assert torch.get_num_threads() == before
    assert threads_seen == [before + 1] * 4
    assert calls_during_forward == [0, 0, 0, 0]
    for c in (heavy, *light):
        assert c.seen == [0, 1, 2, 3], c.name
    assert busy["max"] == 2  # the helper and the calling thread
    made_by_caller = [t for c in (heavy, *light) for t in c.threads if t == threading.main_thread().name]
    assert made_by_caller
    assert time.perf_counter() - t0 >= 4 * (0.03 + 0.06)  # forward passes and rounds one after the other


def _topology(tmp_path, siblings: dict[int, str]):
    for cpu, text in siblings.items():
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    return str(tmp_path)


def test_schedule_by_device_and_cpu_topology(tmp_path):
    """auto: phased on separate cores, overlap on two hyperthreads of one core, on an accelerator, and where the
    topology cannot be read; an explicit schedule is kept; another name is an error."""
    import torch

    separate = _topology(tmp_path / "a", {0: "0", 1: "1", 2: "2-3", 3: "2-3"})
    smt = _topology(tmp_path / "b", {0: "0,4", 4: "0,4"})
    cpu = torch.device("cpu")
    assert shares_cores({0, 1}, separate) is False
    assert shares_cores({2, 3}, separate) is True
    assert shares_cores({1, 2}, separate) is False  # cpu 2's sibling 3 is not ours
    assert shares_cores({0, 4}, smt) is True
    assert shares_cores({7}, separate) is None  # no such file
    assert choose_schedule(cpu, "auto", {0, 1}, separate) == ("phased", "separate cores")
    assert choose_schedule(cpu, "auto", {0, 4}, smt) == ("overlap", "hyperthreads of one core")
    assert choose_schedule(cpu, "auto", {0}, str(tmp_path / "none")) == ("overlap", "CPU topology unknown")
    assert choose_schedule(torch.device("cuda"), "auto", {0, 1}, separate) == ("overlap", "the model runs on cuda")
    assert choose_schedule(cpu, "overlap", {0, 1}, separate) == ("overlap", "asked for")
    with pytest.raises(BertlookError, match="unknown schedule"):
        choose_schedule(cpu, "interleaved")


def test_phased_error_in_a_consumer_aborts_every_consumer():
    aborted = []
    boom = _Boom(1)
    ok = MapConsumer()
    boom.abort = lambda: aborted.append("boom")
    ok.abort = lambda: aborted.append("ok")
    plan = StreamPlan(records=[], num_layers=1, num_heads=1, excluded={}, meta={}, norms=False)
    with pytest.raises(BertlookError, match="boom"):
        run_consumers(_fake_batches(3, 0.0, []), [boom, ok], plan, workers=2, schedule="phased")
    assert sorted(aborted) == ["boom", "ok"]
