"""RL^V on the CPU default task: does training the policy to verify its own solutions pay off at test time?

    python experiments/bench_rlv.py [--workdir runs/bench_rlv] [--n 16] [--questions 256]

Trains (or resumes) two runs from the *same* warm-up on the embedded default task (`configs/rlv.py`: SFT on
worked solutions, then a self-labelled verification warm-up so that the model can answer the verify prompt at all):
  grpo   configs/rlv.py with the verify term removed   plain GRPO
  rlv    configs/rlv.py                                 GRPO^V: the same RL plus the fused "Is this solution correct?" term
then samples N solutions per held-out question from each final policy once and scores every sample with a
verifier: the GRPO^V policy scores its own samples (its trained verifier); the GRPO policy scores its samples
with the same verification prompt without ever having been trained on it (the paper's LLM-as-a-judge baseline).

Prints one table and the issue's four checks:
  1. GRPO^V verifier balanced accuracy (score > 0.5) on its held-out samples >= 75%
  2. GRPO^V weighted@N > GRPO^V maj@N
  3. GRPO^V Best-of-N (self-verification) > GRPO Best-of-N with the LLM-as-a-judge score
  4. pass@1 of GRPO^V >= pass@1 of GRPO - 2 points
and writes `summary.json`, `summary.md` and `accuracy_vs_k.png` to the workdir (each run's own
`results.json` from `experiments/evaluate.py`'s core is in `<workdir>/<run>/eval.json`).
This is a benchmark, not a test: ~40 minutes on 2 CPU cores with `--rl-steps 100`; the configs' 300 steps add
~10 minutes per arm.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script
HERE = os.path.dirname(os.path.abspath(__file__))


def load_config(path):
    spec = importlib.util.spec_from_file_location(f"cfg_{abs(hash(path))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def as_plain_grpo(cfg) -> None:
    """The baseline arm: the same config with the verify term removed (plain GRPO, same estimator)."""
    import ml_collections

    cfg.method.name = "grpo"
    cfg.method.extra = ml_collections.ConfigDict()


def share_warmup(src: str, dst: str) -> None:
    """Starts run `dst` from run `src`'s tokenizer and SFT model, so the two runs differ only in their RL."""
    os.makedirs(dst, exist_ok=True)
    for name in ("tokenizer", "sft_model"):
        if not os.path.exists(os.path.join(dst, name)):
            shutil.copytree(os.path.join(src, name), os.path.join(dst, name))
    results = os.path.join(dst, "results.json")
    if not os.path.exists(results):
        before = json.load(open(os.path.join(src, "results.json")))
        json.dump({k: before[k] for k in ("before", "sft_seconds", "verify_warmup") if k in before}, open(results, "w"),
                  indent=2)


def evaluate_run(run_dir: str, cfg, n: int, questions: int, progress: bool) -> dict:
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.inference.test_time import evaluate
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    out_path = os.path.join(run_dir, "eval.json")
    if os.path.exists(out_path):
        res = json.load(open(out_path))
        if res.get("n") == n and res.get("num_questions") == questions:
            return res
    final = os.path.join(run_dir, "final")
    model, tok = load_pretrained(final), Tokenizer.from_pretrained(final)
    examples = load_examples(os.path.join(run_dir, "heldout.jsonl"))[:questions]
    res = evaluate(model, tok, examples, n=n, max_new_tokens=cfg.rl.max_new_tokens, temperature=cfg.rl.temperature,
                   seed=cfg.seed, progress=progress, keep_samples=False)
    json.dump(res, open(out_path, "w"), indent=2)
    return res


def at(res: dict, strategy: str, k: int) -> float:
    return res["strategies"][strategy]["mean"][res["ks"].index(k)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="runs/bench_rlv")
    ap.add_argument("--grpo-config", default=os.path.join(HERE, "configs", "rlv.py"),
                    help="the baseline arm's config; its method is forced to plain GRPO (default: the GRPO^V config, "
                         "so both arms share one warm-up, including its verification warm-up)")
    ap.add_argument("--rlv-config", default=os.path.join(HERE, "configs", "rlv.py"))
    ap.add_argument("--n", type=int, default=16, help="samples per question (N of weighted@N, maj@N, BoN@N)")
    ap.add_argument("--questions", type=int, default=256, help="held-out questions to evaluate")
    ap.add_argument("--rl-steps", type=int, default=0, help="RL steps per arm (0 = the configs' rl.steps)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    from absl import logging
    logging.set_verbosity(logging.WARNING)
    import train as train_script

    t0 = time.time()
    runs = {}
    for name, path in (("grpo", args.grpo_config), ("rlv", args.rlv_config)):
        cfg = load_config(path)
        if name == "grpo":
            as_plain_grpo(cfg)
        cfg.workdir = os.path.join(os.path.abspath(args.workdir), name)
        cfg.rl.progress = not args.no_progress
        if args.rl_steps:
            cfg.rl.steps = args.rl_steps
        if name == "rlv":
            share_warmup(runs["grpo"][0].workdir, cfg.workdir)
        print(f"== {name}: {path} -> {cfg.workdir}")
        train_script.run(cfg)
        runs[name] = (cfg, None)
    for name, (cfg, _) in list(runs.items()):
        print(f"== evaluating {name}: {args.questions} held-out questions x {args.n} samples")
        runs[name] = (cfg, evaluate_run(cfg.workdir, cfg, args.n, args.questions, not args.no_progress))

    g, v = runs["grpo"][1], runs["rlv"][1]
    n = args.n
    bal = v["verifier"]["self"]["balanced_accuracy"]
    checks = [
        ("GRPO^V verifier balanced accuracy >= 75%", bal, 0.75, bal is not None and bal >= 0.75),
        (f"GRPO^V weighted@{n} > GRPO^V maj@{n}", at(v, "weighted", n), at(v, "majority", n),
         at(v, "weighted", n) > at(v, "majority", n)),
        (f"GRPO^V BoN@{n} (self) > GRPO BoN@{n} (LLM-as-a-judge)", at(v, "best_of_n", n), at(g, "best_of_n", n),
         at(v, "best_of_n", n) > at(g, "best_of_n", n)),
        ("GRPO^V pass@1 >= GRPO pass@1 - 2 points", at(v, "pass", 1), at(g, "pass", 1) - 0.02,
         at(v, "pass", 1) >= at(g, "pass", 1) - 0.02),
    ]
    rows = ["| policy | verifier | pass@1 | maj@%d | BoN@%d | weighted@%d | pass@%d | verifier bal. acc. | AUROC | "
            "AUROC within a question |" % (n, n, n, n), "|---|---|---|---|---|---|---|---|---|---|"]
    for label, res, who in (("GRPO", g, "itself, warm-up only (LLM-as-a-judge)"), ("GRPO^V", v, "itself (warm-up + RL^V)")):
        q = res["verifier"]["self"]
        fmt = lambda x: "n/a" if x is None else f"{100 * x:.1f}"
        rows.append(f"| {label} | {who} | {fmt(at(res, 'pass', 1))} | {fmt(at(res, 'majority', n))} | "
                    f"{fmt(at(res, 'best_of_n', n))} | {fmt(at(res, 'weighted', n))} | {fmt(at(res, 'pass', n))} | "
                    f"{fmt(q['balanced_accuracy'])} | {fmt(q['auroc'])} | {fmt(q.get('within_question_auroc'))} |")
    lines = rows + ["", "| check | measured | against | met |", "|---|---|---|---|"]
    lines += [f"| {c} | {100 * a:.1f} | {100 * b:.1f} | {'yes' if ok else '**no**'} |" for c, a, b, ok in checks]
    table = "\n".join(lines)
    print()
    print(table)
    workdir = os.path.abspath(args.workdir)
    summary = {"n": n, "questions": args.questions, "grpo": {k: g[k] for k in ("strategies", "ks", "verifier",
                                                                               "sample_accuracy")},
               "rlv": {k: v[k] for k in ("strategies", "ks", "verifier", "sample_accuracy")},
               "checks": [{"check": c, "measured": a, "against": b, "met": bool(ok)} for c, a, b, ok in checks],
               "seconds": time.time() - t0}
    json.dump(summary, open(os.path.join(workdir, "summary.json"), "w"), indent=2)
    open(os.path.join(workdir, "summary.md"), "w").write(table + "\n")
    plot(g, v, os.path.join(workdir, "accuracy_vs_k.png"))
    print(f"\nwrote {workdir}/summary.md, summary.json, accuracy_vs_k.png ({time.time() - t0:.0f} s)")
    return summary


def plot(g: dict, v: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for res, label, style in ((g, "GRPO", "--"), (v, "GRPO^V", "-")):
        ks = res["ks"]
        for strategy, name in (("majority", "maj@k"), ("best_of_n", "BoN@k"), ("weighted", "weighted@k"),
                               ("pass", "pass@k")):
            ax.plot(ks, [100 * x for x in res["strategies"][strategy]["mean"]], style, marker="o", ms=3,
                    label=f"{label} {name}" + (" (judge)" if label == "GRPO" and strategy in
                                               ("best_of_n", "weighted") else ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per question)")
    ax.set_ylabel("held-out accuracy (%)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
