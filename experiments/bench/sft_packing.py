"""The warm-up's SFT update with packed rows (`sft.pack`, `rl.batch.pack_rows`) against one sequence per row.

    python experiments/bench/sft_packing.py [--config jaxrl_reason/configs/testbed_latin_cure_check.py] \
        [--rows critique] [--steps 8] [--repeats 3]

Workload: the preset's model (random weights; the cost does not depend on them), its tokenizer, and one stage's
batches: the worked-check stage's contrast pairs (`--rows critique`: critiques that open with the check; `verify`:
verify rows with the check) mixed one for one with worked solutions, `sft.check_batch_size` rows a step, exactly
as `train/check_warmup.py` draws them. The same `--steps` batches are timed both ways, alternating the two
layouts `--repeats` times; a step is building the rows (and packing them) plus the update, after one untimed step
per shape. Printed: median seconds a step, trained tokens per second, the share of batch positions that hold a
token, and the ratio packed / unpacked, with the CPU model.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

import numpy as np  # noqa: E402

from jaxrl_reason.experiment.perf import cpu_model  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="jaxrl_reason/configs/testbed_latin_cure_check.py")
    ap.add_argument("--rows", default="critique", choices=("critique", "verify"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokenizer-dir", default="runs/bench_sft_packing_tok")
    args = ap.parse_args(argv)

    import jax

    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.datasets import DataIterator
    from jaxrl_reason.data.prompts import whole_turn_prompt_fn
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_model, build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import tokenizer_corpus
    from jaxrl_reason.rl.batch import pack_rows, pad_rows_to
    from jaxrl_reason.rl.losses import sft_spec
    from jaxrl_reason.train.state import make_optimizer
    from jaxrl_reason.train.trainer import checked_update, sft_rows
    from jaxrl_reason.train.update import start_training

    rc, _ = start(load_config_file(args.config))
    task = build_data(rc.data, rc.setup_seed)
    corpus, corpus_prompt_fn = tokenizer_corpus(rc, task)
    tok = build_tokenizer(rc, corpus, args.tokenizer_dir, corpus_prompt_fn)
    pairs = testbed.check_pairs(testbed.task_of(rc.data.source), task.train[:1024], seed=rc.seed,
                                rows_as=args.rows, inject_extent=rc.data.inject_extent)
    rows = pairs + list(task.train[:len(pairs)])
    prompt_fn = whole_turn_prompt_fn(pairs, task.prompt_fn)
    data = DataIterator(rows, rc.sft.check_batch_size, seed=rc.seed)
    drawn = [next(data) for _ in range(args.steps)]

    model = build_model(rc, tok, None)
    tr = start_training(model, make_optimizer(1e-5, total_steps=10**6), (sft_spec(("solve",), name="sft"),), None)
    params, opt_state = tr.params, tr.opt_state

    def batch_of(examples, pack):
        b = sft_rows(tok, examples, prompt_fn=prompt_fn)
        return pad_rows_to(pack_rows(b), 1, bucket=True) if pack else b

    def step(examples, pack):
        nonlocal params, opt_state
        b = batch_of(examples, pack)
        out = checked_update(tr.update, params, opt_state, b, where="bench")
        params, opt_state = out.params, out.opt_state
        jax.block_until_ready(params)
        return b

    fill, tokens = {}, {}
    for pack in (False, True):  # compile every shape the timed steps will see
        seen = set()
        for ex in drawn:
            b = batch_of(ex, pack)
            if b.tokens.shape not in seen:
                seen.add(b.tokens.shape)
                step(ex, pack)
        bs = [batch_of(ex, pack) for ex in drawn]
        fill[pack] = float(np.mean([(np.asarray(b.segment_ids) != 0).mean() for b in bs]))
        tokens[pack] = float(np.mean([np.asarray(b.loss_mask).sum() for b in bs]))
    times = {False: [], True: []}
    for _ in range(args.repeats):
        for pack in (False, True):
            for ex in drawn:
                t = time.perf_counter()
                step(ex, pack)
                times[pack].append(time.perf_counter() - t)
    med = {p: statistics.median(v) for p, v in times.items()}
    print(f"\n{args.rows} pairs + worked solutions, {rc.sft.check_batch_size} rows a step, model "
          f"{rc.model.num_hidden_layers} x {rc.model.hidden_size}; {cpu_model()}, {os.cpu_count()} cores")
    print("| layout | s / step (median) | trained tokens / s | positions holding a token |")
    print("|---|---|---|---|")
    for pack, name in ((False, "one sequence per row"), (True, "packed (sft.pack)")):
        print(f"| {name} | {med[pack]:.2f} | {tokens[pack] / med[pack]:.0f} | {fill[pack]:.0%} |")
    print(f"\npacked / unpacked step time: {med[True] / med[False]:.2f} ({args.steps} batches x {args.repeats})")
    return med


if __name__ == "__main__":
    main()
