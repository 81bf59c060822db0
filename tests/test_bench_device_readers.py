"""scripts/bench_device_readers.py: the host-copy counter on hand-made copies, and the CPU path end to end on a
tiny random decoder (every reader sees the sequence; the verdicts' arithmetic)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def bdr():
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("_bench_device_readers", SCRIPTS / "bench_device_readers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_host_copies_counts_copies_and_scalar_reads(bdr):
    """With ``source="cpu"`` every copy to the CPU counts (on a GPU only those from the device): a float16
    conversion of 4 floats (8 bytes), a copy_ of 3 float32 (12 bytes), one float32 .item() (4 bytes); an add and
    a view are no copy."""
    x = torch.ones(4)
    with bdr.HostCopies("cpu") as seen:
        x.to(torch.float16)
        torch.empty(3).copy_(torch.ones(3))
        x.sum().item()
        (x + 1).view(2, 2)
    assert (seen.bytes, seen.copies) == (8 + 12 + 4, 3)
    with bdr.HostCopies("cuda") as none:  # nothing here lives on a GPU
        x.to(torch.float16)
        x.sum().item()
    assert (none.bytes, none.copies) == (0, 0)


def test_tiny_decoder_on_the_cpu_every_reader_reads_it(bdr):
    m = bdr.measure(bdr.SHAPES["tiny"], 48, device="cpu", js_rows=8, repeats=1, output_attentions=True)
    assert m["reader_examples"] == [1] * 5  # stats, norm stats, JS, norm JS, rollout: the one sequence each
    assert m["layers"] == 2 and m["heads"] == 4 and m["one_layer_fp16_map_bytes"] == 2 * 4 * 48 * 48
    passes = ("maps", "readers", "output_attentions", "output_attentions_to_host")
    assert all(m[k]["seconds"] > 0 and "host_bytes" not in m[k] for k in passes)
    v = bdr.verdicts(m)
    assert v["host_bytes"].startswith("n/a")
    assert v["readers_over_output_attentions"] == f"{m['readers']['seconds'] / m['output_attentions']['seconds']:.2f}x"
    ratio = m["readers"]["seconds"] / m["maps"]["seconds"]
    assert v["readers_over_maps"].startswith(f"{ratio:.2f}x (")
    # the counter runs around the whole stream (the dispatch mode does not break the pass or its readers); on the
    # CPU every dtype conversion counts, so only that it saw the readers' float16 -> float32 copies is asserted
    c = bdr.measure(bdr.SHAPES["tiny"], 32, device="cpu", js_rows=None, repeats=1, output_attentions=False,
                    count_from="cpu")
    assert c["reader_examples"] == [1] * 5 and c["readers"]["host_bytes"] > c["maps"]["host_bytes"] > 0


def test_a_pass_out_of_memory_is_skipped_not_fatal(bdr, monkeypatch):
    def too_big():
        raise MemoryError("CUDA out of memory. Tried to allocate 64.00 GiB\nmore detail")

    assert bdr.run_pass(too_big, "cpu", 2, None) == {"skipped": "out of memory: CUDA out of memory. Tried to "
                                                                "allocate 64.00 GiB"}
    assert bdr.run_pass(lambda: None, "cpu", 1, None)["seconds"] >= 0
    # in a whole measurement: the readers' pass out of memory, the maps' pass still timed
    def no_memory(*args):
        raise MemoryError("out of memory in the readers")

    monkeypatch.setattr(bdr, "every_reader", no_memory)
    whole = bdr.measure(bdr.SHAPES["tiny"], 16, device="cpu", js_rows=None, repeats=1, output_attentions=False)
    assert whole["readers"] == {"skipped": "out of memory: out of memory in the readers"}
    assert whole["maps"]["seconds"] > 0 and whole["reader_examples"] is None
    assert bdr.verdicts(whole)["readers_over_maps"] == "not measured (out of memory: out of memory in the readers)"
    m = {"maps": {"seconds": 1.0}, "readers": {"skipped": "out of memory: x"}, "one_layer_fp16_map_bytes": 1}
    assert bdr.verdicts(m) == {"readers_over_maps": "not measured (out of memory: x)", "host_bytes": "not measured"}


def test_verdicts_against_the_targets(bdr):
    m = {"maps": {"seconds": 2.0}, "readers": {"seconds": 3.0, "host_bytes": 99}, "one_layer_fp16_map_bytes": 100}
    assert bdr.verdicts(m) == {"readers_over_maps": "1.50x (PASS, <= 1.5x)",
                               "host_bytes": "99 bytes (PASS, < one layer's float16 maps, 100)"}
    m = {"maps": {"seconds": 2.0}, "readers": {"seconds": 3.02, "host_bytes": 100}, "one_layer_fp16_map_bytes": 100}
    assert [s.split("(")[1][:4] for s in bdr.verdicts(m).values()] == ["FAIL", "FAIL"]


def test_without_cuda_both_scripts_say_so_and_exit_2(tmp_path):
    """The GPU entry points on this CPU machine: one line naming what is missing, exit 2, nothing measured."""
    import os
    import subprocess

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the no-CUDA path cannot be taken")
    py = sys.executable
    r = subprocess.run([py, str(SCRIPTS / "bench_device_readers.py"), "--shape", "tiny", "--tokens", "8"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no CUDA device" in r.stderr
    env = dict(os.environ, PYTHON=py, OUT=str(tmp_path / "out"))
    r = subprocess.run(["bash", str(SCRIPTS / "gpu_long_context.sh")], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "gpu_long_context: no CUDA device" in r.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["log.txt"]
