"""Preconditions of the checking-is-easier testbed (docs/results/testbed.md), measured before any RL:

    python experiments/research/testbed_probe.py [--config jaxrl_reason/configs/testbed_latin.py] \
        [--latin-blanks 10] [--set sft.aux_verify_share=0.0 ...] [--contrast] [--vote-questions 256]

1. the warmed-up policy's accuracy at the training temperature (fresh samples of held-out questions), and the
   error kinds of its wrong samples (the source module's `text_error_kind`, counted; any of graph_path,
   graph_colour, latin_square);
2. the policy's own verifier (P("Yes") on the RL^V verify prompt) on those samples right after the warm-up;
3. the same after an offline verifier warm-up on the policy's own labelled samples of training questions
   (`train/verify_warmup.py`), i.e. the verifier RL^V could reach; with --contrast also on (worked solution,
   "Yes") / (injected wrong solution, "No") pairs, the wrong kinds drawn from the task's INJECT_WEIGHTS;
   with --verify-format worked_check (mark_check) those pairs' targets are the task's worked check (its marks
   alone) then the verdict, trained by next-token SFT on the whole target (with worked-solution rows beside
   them), and the verifier writes its check (greedy, at most --check-tokens) before the score is read;
   --check-own K adds the checks of the policy's own attempts (K per training question) to those pairs;
   --mark-weight W weighs the tokens of the rare non-ok marks (`repeat`, `changed`) W times in that SFT's loss
   (with --mark-span line, the whole non-ok line).
The SFT model is kept in <workdir>/sft_model and reused by a later call with the same workdir.
Scores come from `inference.test_time.evaluate` and `inference.diagnostics.verifier_quality`.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.experiment.probes import error_counts, measure, train_worked_check  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(CONFIGS, "testbed_rlv.py"))
    p.add_argument("--workdir", default="runs/testbed_probe")
    p.add_argument("--vote-questions", type=int, default=256)
    p.add_argument("--vote-n", type=int, default=16)
    p.add_argument("--verify-questions", type=int, default=1024)
    p.add_argument("--verify-samples", type=int, default=8)
    p.add_argument("--verify-steps", type=int, default=400)
    p.add_argument("--verify-lr", type=float, default=1e-3)
    p.add_argument("--graph-arms", type=int, default=0, help="data.graph_arms (0 = the config's)")
    p.add_argument("--graph-arm-len", type=int, default=0, help="data.graph_arm_len (0 = the config's)")
    p.add_argument("--sft-steps", type=int, default=0, help="sft.steps (0 = the config's)")
    p.add_argument("--contrast", action="store_true",
                   help="also train the offline verifier on (worked solution, Yes) / (injected wrong one, No) pairs "
                        "of each training question, the wrong one drawn from the task's INJECT_WEIGHTS mix")
    p.add_argument("--verify-format", default="verdict", choices=["verdict", "worked_check", "mark_check"],
                   help="the offline verifier's target: the one-token verdict, or the task's worked check then the "
                        "verdict (worked_check: each line copies what it compares; mark_check: the marks alone; "
                        "needs --contrast and --verify-samples 0: contrast pairs only)")
    p.add_argument("--check-tokens", type=int, default=256,
                   help="worked_check: the most tokens the verifier writes before its verdict is read")
    p.add_argument("--check-solve-share", type=float, default=0.25,
                   help="worked_check: worked-solution rows per verify row in its SFT (a check row has ~6x the "
                        "target tokens of a solution, so the token share of solving is far smaller)")
    p.add_argument("--check-own", type=int, default=0, metavar="K",
                   help="worked_check: also train on the checks of the policy's own attempts, K samples per "
                        "verify question at the training temperature (each distinct wrong one, as many right)")
    p.add_argument("--mark-weight", type=float, default=1.0, metavar="W",
                   help="worked_check: loss weight of the tokens of the non-ok marks (repeat / changed) in the check "
                        "SFT (1 = every token alike)")
    p.add_argument("--mark-span", default="mark", choices=["mark", "line"],
                   help="--mark-weight weighs the mark word only, or the non-ok line's copied cells and its mark")
    p.add_argument("--latin-blanks", type=int, default=0,
                   help="latin_square blanks per grid (0 = the config's data.latin_blanks)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KNOB=VALUE",
                   help="override any config knob, e.g. --set sft.lr=1e-3 (repeatable)")
    args = p.parse_args(argv)
    checked = args.verify_format != "verdict"
    if checked and not (args.contrast and args.verify_samples == 0):
        p.error(f"--verify-format {args.verify_format} trains on contrast pairs only: add --contrast "
                "--verify-samples 0")
    if args.mark_weight != 1.0 and not checked:
        p.error("--mark-weight weighs the marks of worked-check rows: add --verify-format worked_check or mark_check")
    if args.mark_span != "mark" and args.mark_weight == 1.0:
        p.error("--mark-span chooses what --mark-weight weighs: give --mark-weight too")
    if not args.mark_weight >= 0:
        p.error(f"--mark-weight must be >= 0, got {args.mark_weight}")
    if args.check_own and not checked:
        p.error("--check-own writes worked-check rows: add --verify-format worked_check or mark_check")

    from absl import logging

    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.warmup import tokenizer_corpus, warmed_up_policy, without_verify_warmup
    from jaxrl_reason.train.verify_warmup import verify_warmup

    logging.set_verbosity(logging.WARNING)
    cfg = load_config_file(args.config)
    cfg.rl.progress = False
    for section, knob, value in (("data", "graph_arms", args.graph_arms), ("data", "graph_arm_len", args.graph_arm_len),
                                 ("sft", "steps", args.sft_steps)):
        if value:
            setattr(cfg[section], knob, value)
    for kv in args.set:
        key, value = kv.split("=", 1)
        section, knob = key.split(".")
        old = cfg[section][knob]
        setattr(cfg[section], knob, type(old)(value) if not isinstance(old, bool) else value.lower() == "true")
    if args.latin_blanks:
        cfg.data.latin_blanks = args.latin_blanks
    rc = without_verify_warmup(read_run_config(cfg))
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    task = build_data(rc.data, rc.setup_seed)
    corpus, corpus_prompt_fn = tokenizer_corpus(rc, task)
    tokenizer = build_tokenizer(rc, corpus, workdir, corpus_prompt_fn)
    t = time.time()
    model, _ = warmed_up_policy(rc, tokenizer, task, workdir)
    out = {"sft_seconds": time.time() - t, "temperature": rc.rl.temperature}

    def record(name, v):
        q = v["verifier"]["self"]
        wrong = (error_counts(task.heldout[:args.vote_questions], v["samples"], rc.data.source)
                 if "samples" in v else None)
        out[name] = {"pass@1": v["strategies"]["pass"]["mean"][0], "error_kinds": wrong,
                     "balanced_accuracy": q["balanced_accuracy"], "auroc": q["auroc"],
                     "within_question_auroc": q["within_question_auroc"], "mixed_questions": q["mixed_questions"]}
        print(name, json.dumps(out[name]), flush=True)
        if "samples" in v:  # a few of the policy's own samples, to read
            out[name]["sample_texts"] = [[e.question, row["completions"][:4]] for e, row in
                                         zip(task.heldout[:4], v["samples"][:4])]

    record("after_sft", measure(model, tokenizer, task.heldout, rc, args, task.reward_fn))
    json.dump(out, open(os.path.join(workdir, "probe.json"), "w"), indent=2)
    contrast_fn = None
    if args.contrast:
        from jaxrl_reason.data import testbed

        tb = testbed.task_of(rc.data.source)
        contrast_fn = lambda e, rng: tb.solution_text(  # noqa: E731
            testbed.injected_wrong(tb, e, rng, rc.data.inject_extent)[0])
    t = time.time()
    if args.verify_format != "verdict":
        out["verify_warmup"] = {"seconds": None, **train_worked_check(model, tokenizer, task, rc, args)}
        out["verify_warmup"]["seconds"] = time.time() - t
        from jaxrl_reason.experiment.model import save_hf

        save_hf(model, os.path.join(workdir, "verifier_model"))
        print("verify_warmup", json.dumps(out["verify_warmup"]), flush=True)
        record("after_offline_verifier", measure(model, tokenizer, task.heldout, rc, args, task.reward_fn))
        json.dump(out, open(os.path.join(workdir, "probe.json"), "w"), indent=2)
        return
    res = verify_warmup(model, tokenizer, task.train[:args.verify_questions], task.reward_fn, steps=args.verify_steps,
                        batch_size=rc.sft.verify_batch_size, solve_batch_size=rc.sft.verify_solve_rows,
                        lr=args.verify_lr, samples_per_question=args.verify_samples,
                        max_new_tokens=rc.rl.max_new_tokens, temperature=rc.rl.temperature, seed=rc.seed,
                        progress=False, prompt_fn=task.prompt_fn, contrast_fn=contrast_fn, warmup_steps=10,
                        balance="subsample")
    out["verify_warmup"] = {"seconds": time.time() - t, "rows": res["rows"], "contrast_rows": res["contrast_rows"],
                            "positive_frac_sampled": res["positive_frac_sampled"],
                            "before_bal_acc": res["before"]["balanced_acc"],
                            "after_bal_acc": res["after"]["balanced_acc"]}
    print("verify_warmup", json.dumps(out["verify_warmup"]), flush=True)
    record("after_offline_verifier", measure(model, tokenizer, task.heldout, rc, args, task.reward_fn))
    json.dump(out, open(os.path.join(workdir, "probe.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
