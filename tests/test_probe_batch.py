"""The batched probe engine (issue 24): every variant x seed in one loop, the same optimisation as the reference
(train_probe / evaluate_probe): initial parameters, gradients, training, UAS, MST, tables, threads, the CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from bertlook.analyses.probes import kernels, workers
from bertlook.analyses.probes.batch import BatchedProbes, FusedAdam
from bertlook.analyses.probes.batch import mst_correct
from bertlook.analyses.probes.frames import ABLATION_COLUMNS, ablation_heads
from bertlook.analyses.probes.models import make_model, probe_loss
from bertlook.analyses.probes.reference import evaluate_probe, run_layer_ablations, run_probes, train_probe
from bertlook.analyses.probes.reference import model_batches
from bertlook.analyses.probes.split import Rows, SplitFeatures
from bertlook.analyses.probes.uas import mst_heads
from bertlook.analyses.probes.catalogue import PROBES, TABLE_COLUMNS, TRAINED_PROBES, ProbeTask
from bertlook.analyses.probes.data import ProbeData
from bertlook.analyses.probes.tables import run_probe_tables
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError
from bertlook.testing.synthetic_stores import write_synthetic_word_store

L, H = 2, 3
K = L * H
SEEDS = [0, 1]
VOCAB = ["the", "cat", "sat", "on", "mat", "dog", "ran", ".", ",", "a", "big", "house", "and", "of", "river"]
#: every trained variant of Table 3 on the model's store, two ablations, the random-init probe on its own store
TASKS = [ProbeTask(p, "random" if p == "random_init_attn_glove" else "model") for p in TRAINED_PROBES] + [
    ProbeTask("attn_glove", heads=tuple(ablation_heads("keep", 1, L, H))),
    ProbeTask("attn_glove", heads=tuple(ablation_heads("drop", 1, L, H)))]


def glove(dim: int = 5) -> GloveVectors:
    rng = np.random.default_rng(0)
    return GloveVectors(rng.standard_normal((len(VOCAB), dim)).astype(np.float32), VOCAB, source="test")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Train / dev stores of the model, of the random-init model (the same sentences, flatter maps) and of the
    "norm" maps (the same sentences, other maps); 2 layers x 3 heads, 3-10 words."""
    root = tmp_path_factory.mktemp("batch_stores")
    kw = dict(num_layers=L, num_heads=H, min_words=3, max_words=10, vocab=VOCAB)
    out = {}
    for name, sharp in (("", 2.0), ("r", 0.2), ("n", 1.0)):
        for split_name, n, seed in (("train", 16, 1), ("dev", 10, 2)):
            out[name + split_name] = write_synthetic_word_store(root / f"{name}{split_name}", n_sentences=n, seed=seed,
                                                                sharpness=sharp, **kw)
    return out


def split(stores, kind: str, g=None, **sources) -> SplitFeatures:
    datas = {name: ProbeData(stores[prefix + kind], glove=g) for name, prefix in sources.items()}
    return SplitFeatures(datas, attention=[*datas, "uniform"])


def reference(task: ProbeTask, stores, seed, *, epochs=1, batch_size=1, g=None):
    prefix = "r" if task.source == "random" else ""
    model, info = train_probe(task.probe, ProbeData(stores[prefix + "train"], glove=g), seed=seed, epochs=epochs,
                              batch_size=batch_size, heads=task.heads)
    return model, info, evaluate_probe(model, task.probe, ProbeData(stores[prefix + "dev"], glove=g), mst=True)


# ============================================================================== the same models
def test_initial_parameters_are_the_reference_modules():
    g = glove()
    engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
    assert engine.n_models == len(TASKS) * len(SEEDS) and sorted(engine.columns, key=TASKS.index) == TASKS
    for task in TASKS:
        for seed in SEEDS:
            torch.manual_seed(seed)
            ref = make_model(task.probe, num_heads_total=K, glove_dim=g.dim, heads=task.heads).state_dict()
            got = engine.state(task, seed)
            assert set(got) == set(ref), task
            for k in ref:
                assert torch.equal(got[k].reshape(ref[k].shape), ref[k]), (task, seed, k)


@pytest.mark.parametrize("exp_per_element", [False, True])
def test_one_step_gradients_are_autograd_on_the_reference(stores, exp_per_element, monkeypatch):
    """The hand-written backward of every cohort: one sentence per seed, the gradient of the summed
    cross-entropy of each model equals autograd's on the reference module (float32 rounding); with
    ``exp_per_element`` the fused loops take exp per element (probes.kernels' path for extreme weights)."""
    if exp_per_element:
        monkeypatch.setattr(kernels, "FACTOR_LIMIT", 0.0)
    g = glove()
    sp = split(stores, "train", g, model="", random="r")
    engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
    pairs = [(0, 3), (1, 5)]  # seed 0 reads sentence 3, seed 1 sentence 5
    engine.gradients(sp, pairs)
    for task in TASKS:
        data = sp.sources[task.source]
        for s, n in pairs:
            torch.manual_seed(SEEDS[s])
            model = make_model(task.probe, num_heads_total=K, glove_dim=g.dim, heads=task.heads)
            (batch,) = list(model_batches(data, [[n]], model))
            probe_loss(model(batch), batch.heads, batch.dep_mask, batch.cand_mask).backward()
            got = engine.state(task, SEEDS[s], grad=True)
            for name, p in model.named_parameters():
                assert torch.allclose(got[name].reshape(p.shape), p.grad, rtol=1e-4, atol=1e-5), (task, s, name)


def test_masked_rows_never_move_and_threads_do_not_change_the_result(stores):
    g = glove()
    sp = split(stores, "train", g, model="", random="r")
    runs = []
    for threads in (1, 2):
        engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
        info = engine.train(sp, epochs=1, batch_size=1, threads=threads, progress=False)
        assert info["threads"] == threads and info["steps"] == sp.n
        runs.append(engine)
    keep = TASKS[-2]  # only layer 1's heads: the rows of layer 2 stay exactly 0
    cohort = next(c for c in runs[0].cohorts if keep in c.tasks)
    v = cohort.tasks.index(keep)
    others = [k for k in range(2 * K) if k % K not in keep.heads]
    assert (cohort.weight[:, v, others] == 0).all() and (cohort.bias[:, v, others] == 0).all()
    for task in TASKS:
        for seed in SEEDS:
            a, b = runs[0].state(task, seed), runs[1].state(task, seed)
            assert all(torch.equal(a[k], b[k]) for k in a), task  # each cohort's arithmetic is the same


@pytest.mark.parametrize("batch_size", [1, 4])
def test_training_and_uas_match_the_reference(stores, batch_size):
    """Every variant x 2 seeds, 2 epochs: the parameters after training agree with train_probe's (the outputs'
    constant bias, whose gradient is pure rounding, aside) and the dev UAS / MST UAS within 2 words."""
    g = glove()
    engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
    fit = engine.train(split(stores, "train", g, model="", random="r"), epochs=2, batch_size=batch_size, progress=False)
    res = engine.results(engine.evaluate(split(stores, "dev", g, model="", random="r"), mst=True))
    for task in TASKS:
        for s, seed in enumerate(SEEDS):
            model, info, want = reference(task, stores, seed, epochs=2, batch_size=batch_size, g=g)
            got = engine.state(task, seed)
            for k, p in model.state_dict().items():
                if k != "out.bias":  # softmax ignores it: Adam moves it by rounding noise, in both
                    assert torch.allclose(got[k].reshape(p.shape), p, atol=2e-5, rtol=1e-4), (task, seed, k)
            loss = fit["loss_per_word"][:, s, engine.columns.index(task)]
            assert loss == pytest.approx(info["loss_per_word_by_epoch"], rel=1e-5)
            n = want["n_words"]
            assert res[(task, seed)]["n_words"] == n
            assert abs(res[(task, seed)]["uas"] - want["uas"]) * n <= 2, task
            assert abs(res[(task, seed)]["uas_mst"] - want["uas_mst"]) * n <= 2, task


def test_fused_adam_is_torch_adam():
    torch.manual_seed(0)
    ps = [torch.randn(50), torch.randn(4, 3)]
    qs = [p.clone().requires_grad_(True) for p in ps]
    mine, ref = FusedAdam(ps, 0.002), torch.optim.Adam(qs, lr=0.002, fused=True)
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        for p, q in zip(ps, qs):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        mine.step()
        ref.step()
    assert all(torch.equal(p, q.detach()) for p, q in zip(ps, qs))


def test_batched_mst_is_the_reference_decoder():
    """MST over all models of all sentences of one length at once: the same heads as mst_heads one matrix at
    a time (random scores have no ties)."""
    rng = np.random.default_rng(3)

    class Sent:
        def __init__(self, W):
            self.n_words, self.heads, self.punct = W, rng.integers(0, W + 1, W), rng.random(W) < 0.2

    sents = [Sent(int(W)) for W in rng.integers(1, 9, 30)]
    logps = [np.log(rng.dirichlet(np.ones(s.n_words + 1), size=(2, 3, s.n_words))).astype(np.float32) for s in sents]
    want = np.zeros((2, 3), dtype=np.int64)
    for s, lp in zip(sents, logps):
        for a in range(2):
            for b in range(3):
                want[a, b] += int(((mst_heads(lp[a, b]) == s.heads) & ~s.punct).sum())
    assert (mst_correct(logps, sents, max_matrices=20) == want).all()


# ================================================================================ the tables
def test_tables_equal_the_reference_tables(stores):
    """Table 3 (the random-init probe on its stores), Table 3 on the "norm" maps and the ablations in one run:
    the reference's columns, notes and data; UAS within 2 words per seed; the norm rows that read no attention
    are Table 3's (trained once); the ablations' reference row is Table 3's Attn+GloVe."""
    g = glove()
    common = dict(glove=g, seeds=SEEDS, epochs=1, batch_size=1, lr=0.002, mst=True)
    norm = ["right_branching", "distances_glove", "attn", "attn_glove"]
    out = run_probe_tables(stores["train"], stores["dev"], random_train_store=stores["rtrain"],
                           random_dev_store=stores["rdev"], norm_train_store=stores["ntrain"],
                           norm_dev_store=stores["ndev"], probes=PROBES, norm_probes=norm,
                           ablation_modes=["keep", "drop"], **common)
    assert out["engine"]["norm_rows_reused_from_table3"] == ["distances_glove"]
    # 2 layers: "drop 1" reads the heads of "keep 2" (the same model, trained once), "drop 2" those of "keep 1"
    assert out["engine"]["models"] == (len(TRAINED_PROBES) + 2 + 2) * len(SEEDS)
    refs = {"table3": run_probes(stores["train"], stores["dev"], random_train_store=stores["rtrain"],
                                 random_dev_store=stores["rdev"], probes=PROBES, **common),
            "table3_norm": run_probes(stores["ntrain"], stores["ndev"], probes=norm, **common),
            "ablations": run_layer_ablations(stores["train"], stores["dev"], modes=["keep", "drop"], **common)}
    n = refs["table3"].attrs["data"]["dev"]["n_eval_words"]
    for name, ref in refs.items():
        got = out[name]
        assert list(got.columns) == (ABLATION_COLUMNS if name == "ablations" else TABLE_COLUMNS)
        assert got.attrs["data"] == ref.attrs["data"]
        key = ["ablation", "layer", "n_heads", "n_seeds"] if name == "ablations" else ["probe", "n_seeds", "note"]
        assert got[key].astype(str).equals(ref[key].astype(str))
        for col in ("uas_mean", "uas_mst_mean"):
            assert ((got[col] - ref[col]).abs().fillna(0) * n).max() <= 2, (name, col)
        assert len(got.attrs["runs"]) == len(ref.attrs["runs"])
        assert all(set(r) >= set(q) for r, q in zip(got.attrs["runs"], ref.attrs["runs"]))
    t3, tn = out["table3"].set_index("probe"), out["table3_norm"].set_index("probe")
    assert t3.loc["distances_glove"].equals(tn.loc["distances_glove"])
    assert t3.loc["attn_glove", "uas_mean"] == out["ablations"].iloc[0]["uas_mean"]
    runs = [r for r in out["table3_norm"].attrs["runs"] if r["probe"] == "distances_glove"]
    assert runs[0]["train_store"] == str(stores["ntrain"].path) and runs[0]["trained_on"] == str(stores["train"].path)


def test_other_sentences_are_trained_apart(stores, tmp_path):
    """Norm stores of other sentences: no reuse, a second loop, still the reference's rows."""
    g = glove()
    kw = dict(num_layers=L, num_heads=H, min_words=3, max_words=10, vocab=VOCAB)
    ntrain = write_synthetic_word_store(tmp_path / "ntrain", n_sentences=20, seed=5, **kw)
    ndev = write_synthetic_word_store(tmp_path / "ndev", n_sentences=8, seed=6, **kw)
    common = dict(glove=g, seeds=[0], batch_size=1, mst=False)
    out = run_probe_tables(stores["train"], stores["dev"], norm_train_store=ntrain, norm_dev_store=ndev,
                           probes=["attn"], norm_probes=["glove_only", "attn"], **common)
    assert out["engine"]["norm_rows_reused_from_table3"] == [] and len(out["engine"]["corpora"]) == 2
    ref = run_probes(ntrain, ndev, probes=["glove_only", "attn"], **common)
    n = ref.attrs["data"]["dev"]["n_eval_words"]
    assert ((out["table3_norm"]["uas_mean"] - ref["uas_mean"]).abs() * n).max() <= 1
    with pytest.raises(BertlookError, match="different sentences"):
        SplitFeatures({"model": ProbeData(stores["train"]), "norm": ProbeData(ntrain)})


def test_engine_errors(stores):
    with pytest.raises(BertlookError, match="need GloVe"):
        BatchedProbes([ProbeTask("attn_glove")], SEEDS, num_heads_total=K, glove_dim=0)
    with pytest.raises(BertlookError, match="distinct"):
        BatchedProbes([ProbeTask("attn")], [0, 0], num_heads_total=K, glove_dim=0)
    engine = BatchedProbes([ProbeTask("attn", "norm")], SEEDS, num_heads_total=K, glove_dim=0)
    with pytest.raises(BertlookError, match="norm"):
        engine.train(SplitFeatures({"model": ProbeData(stores["train"])}, attention=["model"]), progress=False)
    with pytest.raises(BertlookError, match="no batched form"):
        ProbeTask("right_branching").family


# =================================================================================== the CLI
def test_cli_one_process_for_every_table(stores, tmp_path, capsys, monkeypatch):
    """`bertlook probes` with the norm stores and --ablations: the three tables of the three old jobs; the same
    numbers with --engine reference (within 2 words)."""
    from bertlook import cli
    from bertlook.analyses.probes import tables as probe_tables

    monkeypatch.setattr(probe_tables, "load_glove", lambda spec, member=None: glove())

    def run(engine):
        d = tmp_path / engine
        args = ["probes", "--train-attention", str(stores["train"].path), "--dev-attention", str(stores["dev"].path),
                "--random-train-attention", str(stores["rtrain"].path), "--random-dev-attention",
                str(stores["rdev"].path), "--norm-train-attention", str(stores["ntrain"].path),
                "--norm-dev-attention", str(stores["ndev"].path), "--glove", "package:x", "--seeds", "0,1",
                "--batch-size", "1", "--mst", "--ablations", "keep,drop", "--engine", engine, "--threads", "1"]
        for flag, name in (("--out-table", "table3.csv"), ("--out-markdown", "table3.md"),
                           ("--summary", "table3.summary.json"), ("--out-norm-table", "table3_norm.csv"),
                           ("--out-norm-markdown", "table3_norm.md"), ("--norm-summary", "table3_norm.summary.json"),
                           ("--out-ablations-table", "probe_ablations.csv"),
                           ("--out-ablations-markdown", "probe_ablations.md"),
                           ("--ablations-summary", "probe_ablations.summary.json")):
            args += [flag, str(d / name)]
        assert cli.main(args) == 0
        return d

    new = run("batched")
    assert "models trained in one loop" in capsys.readouterr().out
    old = run("reference")
    for name in ("table3", "table3_norm", "probe_ablations"):
        a, b = pd.read_csv(new / f"{name}.csv"), pd.read_csv(old / f"{name}.csv")
        assert list(a.columns) == list(b.columns)
        n = json.loads((new / f"{name}.summary.json").read_text())["data"]["dev"]["n_eval_words"]
        assert ((a["uas_mean"] - b["uas_mean"]).abs() * n).max() <= 2, name
        sa, sb = (json.loads((d / f"{name}.summary.json").read_text()) for d in (new, old))
        assert set(sa) >= set(sb) and sa["engine"] == "batched" and sb["engine"] == "reference"
        assert (new / f"{name}.md").read_text().splitlines()[0] == (old / f"{name}.md").read_text().splitlines()[0]
    norm = json.loads((new / "table3_norm.summary.json").read_text())
    assert norm["probes"] == ["right_branching", "distances_glove", "attn", "attn_glove", "attn_glove_released"]
    assert norm["rows_reused_from_table3"] == ["distances_glove"] and norm["engine_timing"]["models"] > 0



def test_probe_step_summaries_of_the_norm_table_and_the_ablations(stores):
    """run_probe_step with the norm stores and the ablations: their summaries, as `bertlook probes` writes them."""
    from bertlook.analyses.probes.tables import ProbeOptions, run_probe_step

    g = glove()
    result = run_probe_step(norm_train_attention=stores["ntrain"].path, norm_dev_attention=stores["ndev"].path,
                            train_attention=stores["train"].path, dev_attention=stores["dev"].path,
                            probes=["attn_glove"], norm_probes=["distances_glove", "attn"], ablation_modes=["keep"],
                            options=ProbeOptions(seeds=(0,), batch_size=4), glove=g)
    norm = result.norm_summary
    assert norm["train_attention"] == str(stores["ntrain"].path) and norm["random_train_attention"] is None
    assert norm["probes"] == ["distances_glove", "attn"] and norm["glove"] == g.describe()
    assert norm["rows_reused_from_table3"] == ["distances_glove"] and "read no attention" in norm["rows_reused_note"]
    abl = result.ablations_summary
    assert abl["modes"] == ["keep"] and abl["seeds"] == [0] and abl["trainings"] == len(result.ablations) == 1 + L
    assert abl["dev_attention"] == str(stores["dev"].path) and abl["num_layers"] == L and abl["engine"] == "batched"
    assert [r["ablation"] for r in abl["table"]] == list(result.ablations["ablation"])


def test_cli_checks_the_new_flags(stores, tmp_path, capsys):
    from bertlook import cli

    base = ["probes", "--train-attention", str(stores["train"].path), "--dev-attention", str(stores["dev"].path),
            "--seeds", "0"]
    for extra, message in (
            (["--norm-train-attention", "x", "--out-norm-table", "a.csv", "--out-norm-markdown", "a.md"],
             "give both --norm-train-attention and --norm-dev-attention"),
            (["--ablations", "keep"], "--ablations and --out-ablations-table"),
            (["--ablations", "only", "--out-ablations-table", "a.csv", "--out-ablations-markdown", "a.md"],
             "--ablations"),
            (["--out-norm-table", "a.csv", "--out-norm-markdown", "a.md"], "--norm-train-attention"),
            (["--norm-summary", "s.json", "--out-table", "t.csv", "--out-markdown", "t.md"], "--norm-summary")):
        assert cli.main(base + extra) == 2, extra
        assert message in capsys.readouterr().err, extra


def test_rows_tensors_and_memory_layout(stores):
    g = glove()
    sp = split(stores, "train", g, model="")
    rows = Rows(sp, [(0, 2), (1, 4), (1, 2)], 2)
    gt, rt = rows.maps("model", 0)  # [word, word, layer*head], [word, 2, probe_feature]
    data = sp.sources["model"]
    s = data.sentences[2]
    W = s.n_words
    assert gt.shape == (W, W, K) and rt.shape == (W, 2, 2 * K) and gt.dtype == rt.dtype == torch.float32
    assert rows.Wm == max(W, data.sentences[4].n_words)
    A = torch.from_numpy(data.store.get(s.index).reshape(K, W + 2, W + 2)).float()
    assert torch.equal(gt, A[:, 1 : W + 1, 1 : W + 1].permute(1, 2, 0))  # gt[i, j] = A(i -> j) over the heads
    assert torch.equal(rt[:, 0], torch.cat([A[:, 1 : W + 1, 0].T, A[:, 0, 1 : W + 1].T], dim=1))  # [CLS]
    assert torch.equal(rt[:, 1], torch.cat([A[:, 1 : W + 1, W + 1].T, A[:, W + 1, 1 : W + 1].T], dim=1))  # [SEP]
    assert rows.maps("model", 2)[0] is gt  # another seed's row of the same sentence: converted once
    assert rows.maps("model", 1)[0].shape[0] == data.sentences[4].n_words
    with pytest.raises(BertlookError, match="'norm' attention was not read"):
        rows.maps("norm", 0)
    assert torch.equal(sp.cand(2)[1:], sp.dep[2]) and torch.equal(sp.cand(2, released=True)[:-1], sp.dep[2])
    dep, cand = rows.glove(True)
    assert torch.equal(dep[0, :W], sp.dep[2]) and torch.equal(cand[0, 1, : W + 1], sp.cand(2, True))
    assert sp.nbytes() == sum(int(n) ** 2 * K * 2 + int(n) * 4 * K * 2 for n in sp.lengths)


# ===================================================================== cohort groups in processes
@pytest.mark.skipif(not workers.AVAILABLE, reason="forked workers need Linux's fork")
def test_forked_groups_equal_threaded_groups(stores):
    """threads = 2: the second group of cohorts trains and evaluates in a forked child (probes.workers); its
    parameters, last gradients, losses and log-probabilities are those of the same group in a thread, bit for bit."""
    g = glove()
    sp, dev = split(stores, "train", g, model="", random="r"), split(stores, "dev", g, model="", random="r")
    runs = []
    for processes in (False, True):
        engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
        engine.processes = processes
        assert len(engine._groups(2)) == 2
        fit = engine.train(sp, epochs=1, batch_size=1, threads=2, progress=False)
        runs.append((engine, fit, engine.log_probs(dev, threads=2)))
    (a, fa, la), (b, fb, lb) = runs
    assert np.array_equal(fa["loss_per_word"], fb["loss_per_word"])
    assert all(np.array_equal(x, y) for x, y in zip(la, lb))
    for task in TASKS:
        for seed in SEEDS:
            for grad in (False, True):
                sa, sb = a.state(task, seed, grad=grad), b.state(task, seed, grad=grad)
                assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa), (task, seed, grad)


@pytest.mark.skipif(not workers.AVAILABLE, reason="forked workers need Linux's fork")
@pytest.mark.parametrize("how", ["raises", "dies"])
def test_a_failing_worker_process_is_an_error(stores, monkeypatch, how):
    """An error in the child comes back as a BertlookError naming its cohorts; a child that ends without an
    answer (here os._exit(3)) too, with its exit code."""
    import os

    g = glove()
    sp = split(stores, "train", g, model="", random="r")
    engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
    parent = os.getpid()

    def failing(forward):
        def run(rows):
            if os.getpid() != parent:  # only in the child (whichever cohorts the measured costs send there)
                if how == "dies":
                    os._exit(3)
                raise RuntimeError("cohort broke")
            return forward(rows)
        return run

    for cohort in engine.cohorts:
        monkeypatch.setattr(cohort, "forward", failing(cohort.forward))
    with pytest.raises(BertlookError) as err:
        engine.train(sp, epochs=1, batch_size=1, threads=2, progress=False)
    second = engine._groups(2)[1]  # the child's cohorts, by the costs measured in train
    match = "cohort broke" if how == "raises" else "exit code 3"
    assert re.search(rf"cohorts \[{', '.join(map(str, second))}\].*{match}", str(err.value)), str(err.value)


def test_groups_are_split_by_measured_costs_and_the_numbers_do_not_depend_on_it(stores):
    """train measures each cohort's step (forward; forward + backward) before it forks, on one torch thread, and
    splits the cohorts into the two groups whose costs differ least; measuring trains nothing, and the grouping
    (measured or estimated) does not change a number."""
    g = glove()
    sp = split(stores, "train", g, model="", random="r")
    runs = []
    for measure in (False, True):
        engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=g.dim)
        engine.measure = measure
        fit = engine.train(sp, epochs=1, batch_size=1, threads=2, progress=False)
        assert ("measured" in fit["parallel"]) == measure and (engine.costs is not None) == measure
        runs.append((engine, fit))
    (a, fa), (b, fb) = runs
    assert set(b.costs) == {"train", "evaluate"} and all(len(v) == len(b.cohorts) for v in b.costs.values())
    assert all(t > f > 0 for t, f in zip(b.costs["train"], b.costs["evaluate"]))  # backward costs something
    assert np.array_equal(fa["loss_per_word"], fb["loss_per_word"])
    for task in TASKS:
        for seed in SEEDS:
            x, y = a.state(task, seed), b.state(task, seed)
            assert all(torch.equal(x[k], y[k]) for k in x), task


def test_two_groups_take_the_most_even_split():
    """Costs 3, 3, 2, 2, 2: longest-first would give 7 / 5; every split is tried, so 6 / 6 (three groups still go
    longest first onto the least loaded)."""
    engine = BatchedProbes(TASKS, SEEDS, num_heads_total=K, glove_dim=5)
    costs = [3.0, 3.0, 2.0, 2.0, 2.0] + [0.0] * (len(engine.cohorts) - 5)
    engine.costs = {"train": costs}
    loads = engine._loads(2, "train")
    assert sorted(load for load, _ in loads) == [6.0, 6.0]
    assert sorted(k for _, g in loads for k in g) == list(range(len(engine.cohorts)))
    assert [load for load, _ in engine._loads(3, "train")] == [5.0, 3.0, 4.0]  # 3+2, 3, 2+2
    estimated = [c.cost() for c in engine.cohorts]  # no measured costs for a phase: the estimates
    assert sorted(load for load, _ in engine._loads(2, "evaluate")) == sorted(
        sum(estimated[k] for k in g) for _, g in engine._loads(2, "evaluate"))
