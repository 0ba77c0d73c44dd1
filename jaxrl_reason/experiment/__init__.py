"""What the entry points under experiments/ share: the typed run config (`config`), named data sources (`data`),
model and tokenizer build/load/save (`model`), the SFT and verification warm-ups (`warmup`), a whole training run
(`pipeline.run`), its report (`report`), the performance tools' workloads (`perf`), and the headless notebook
runner (`notebooks`)."""
