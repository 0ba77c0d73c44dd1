"""The own-attempt warm-up stage (`sft.own_attempt_steps`) on a finished run's warm-up model, without redoing the
SFT: loads <from>/sft_model, samples the policy's own attempts on warm-up questions, trains on critique /
correction rows built from them (`experiment.warmup.run_own_attempt_warmup`), and writes a run directory that
`own_vs_injected.py` reads:

    python experiments/research/own_attempt_warmup.py --config jaxrl_reason/configs/testbed_latin_cipo.py \
        --from runs/bench_cipo_spread/seed0/grpo --workdir runs/own_attempts_s0 \
        --config.seed=0 --config.sft.own_attempt_steps=300
    python experiments/research/own_vs_injected.py --run runs/own_attempts_s0 --model sft_model

The config must describe the run's data (same task, sizes and seed): the held-out questions are compared with
<from>/heldout.jsonl and a mismatch is refused.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from against_grpo import config_overrides  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the run's config file")
    p.add_argument("--from", dest="source", required=True, help="a run's workdir holding sft_model/ and heldout.jsonl")
    p.add_argument("--workdir", required=True, help="where the new sft_model/, tokenizer and heldout.jsonl go")
    args, overrides = config_overrides(p, argv)

    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import load_hf, save_hf
    from jaxrl_reason.experiment.warmup import check_own_attempts, run_own_attempt_warmup
    from jaxrl_reason.tokenization import Tokenizer

    rc = read_run_config(load_config_file(args.config, overrides))
    check_own_attempts(rc)
    if rc.sft.own_attempt_steps <= 0:
        p.error("set --config.sft.own_attempt_steps to the steps to train (> 0)")
    sft_dir = os.path.join(args.source, "sft_model")
    if not os.path.exists(os.path.join(sft_dir, "config.json")):
        raise SystemExit(f"{sft_dir}: no warm-up model there (a finished run's workdir holds one)")
    task = build_data(rc.data, rc.seed)
    theirs = [e.question for e in load_examples(os.path.join(args.source, "heldout.jsonl"))]
    if theirs != [e.question for e in task.heldout]:
        raise SystemExit(f"{args.source}/heldout.jsonl differs from the held-out questions this config builds: pass "
                         "the run's config and seed (--config.seed=N)")
    tok_dir = os.path.join(args.source, "tokenizer")
    tokenizer = Tokenizer.from_pretrained(tok_dir)
    model = load_hf(sft_dir, rc.model)
    os.makedirs(args.workdir, exist_ok=True)
    report = run_own_attempt_warmup(rc, model, tokenizer, task, args.workdir)
    save_hf(model, os.path.join(args.workdir, "sft_model"))
    shutil.copytree(tok_dir, os.path.join(args.workdir, "tokenizer"), dirs_exist_ok=True)
    shutil.copy(os.path.join(args.source, "heldout.jsonl"), os.path.join(args.workdir, "heldout.jsonl"))
    report["from"] = os.path.abspath(args.source)
    with open(os.path.join(args.workdir, "own_attempts.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
