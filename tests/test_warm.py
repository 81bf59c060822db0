"""bertlook.analyses.warm: `make install` compiles every numba kernel the pipeline calls, once."""

from __future__ import annotations

import numpy as np

from bertlook.analyses import warm


def test_every_compiled_path_is_called(monkeypatch):
    called = []
    import bertlook.analyses.trees as trees

    real = trees.chu_liu_edmonds_batch

    def spy(scores, **kwargs):
        called.append(np.asarray(scores).dtype)
        return real(scores, **kwargs)

    monkeypatch.setattr(trees, "chu_liu_edmonds_batch", spy)
    seconds = warm.warm_kernels()
    assert set(seconds) == {"surface_stats.row_entropy (float16)", "rollout.rollout (float16)",
                            "cluster_heads.js_divergence_example (float32)",
                            "cluster_heads.js_divergence_example (float64)", "trees.chu_liu_edmonds_batch",
                            "probes.kernels.sigma_grid", "probes.kernels.mlp_scores, mlp_backward",
                            "probes.kernels.hidden_scores, hidden_backward",
                            "probes.kernels.attn_scores, attn_backward", "layer_stats (encoder, causal)",
                            "cluster_heads.JsAccumulator (causal, estimator)",
                            "alti_kernels (per layer float32, per head float64)"}
    assert called == [np.float64] and all(s >= 0 for s in seconds.values())


def test_every_probe_loop_is_compiled():
    from numba.core.registry import CPUDispatcher

    from bertlook.analyses.probes import kernels as pk

    warm.warm_kernels()
    kernels = {n: f for n, f in vars(pk).items() if isinstance(f, CPUDispatcher) and not n.startswith("_")}
    assert {"sigma_grid", "mlp_scores", "mlp_backward", "hidden_scores", "hidden_backward", "attn_scores",
            "attn_backward"} <= set(kernels)
    assert all(f.signatures for n, f in kernels.items() if n != "offset_row"), "a probe loop is left to its first job"


def test_main_names_what_it_compiled(capsys):
    warm.main()
    out = capsys.readouterr().out
    assert out.startswith("numba kernels ready (") and "trees.chu_liu_edmonds_batch" in out


def test_every_layer_stats_kernel_is_compiled():
    """The one-pass surface statistics' kernel (the per-head sweep the Python side calls; the kernels it calls are
    compiled into it) is compiled by warm, not by a job."""
    from bertlook.analyses import layer_stats

    warm.warm_kernels()
    assert layer_stats._head.signatures


def test_alti_kernels_are_compiled_with_the_dtypes_contributions_uses():
    from bertlook.attention import alti_kernels

    warm.warm_kernels()
    layer = [str(sig[1]) for sig in alti_kernels._layer_items.signatures]
    heads = [str(sig[1]) for sig in alti_kernels._head_items.signatures]
    assert any("float32" in s for s in layer) and any("float64" in s for s in heads), (layer, heads)
