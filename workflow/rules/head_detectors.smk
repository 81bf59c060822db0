# Step `head_detectors` (beyond the paper): previous-token, duplicate-token and induction heads
# (Olsson et al. 2022) and the sink share (Xiao et al. 2023) of the run's model, on sequences of random
# tokens repeated once. One forward pass over head_detectors.n_sequences short sequences; the head
# report card takes its scores as columns.


use rule _model_step as head_detectors with:
    output:
        table=data_file(run_path("tables", "head_detectors.csv"), None, "Head detectors (CSV)"),
        markdown=run_path("tables", "head_detectors.md"),
        summary=run_path("tables", "head_detectors.summary.json"),
    log:
        log_path("head_detectors"),
    benchmark:
        bench_path("head_detectors")
    # a few thousand tokens: the job is the model's start-up, on one core (with 2 it took the whole demo
    # machine at 91% load; with 1 it runs beside the segments job). Its golden numbers hold across 1 / 2
    # threads (tests/test_portability.py).
    threads: 1
    params:
        cmd=model_cmd(
            "head-detectors",
            out=OUT.table,
            out_markdown=OUT.markdown,
            summary=OUT.summary,
            **settings("head_detectors", "n_sequences", "length"),
            seed=config["seed"],
            **settings("head_detectors", "batch_size", "threshold"),
            device=config["extraction"]["device"],
            model_dtype=config["extraction"]["model_dtype"],
        ),
