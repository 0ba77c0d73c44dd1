"""RL^V: does training the policy to verify its own solutions pay off at test time? (issue #24 on the testbed)

    python experiments/research/bench_rlv.py [--workdir runs/bench_rlv] [--n 16] [--questions 256] [--seed 1]
        [--grpo-config C --rlv-config C]    # e.g. jaxrl_reason/configs/testbed_latin_check.py for both
    python experiments/research/bench_rlv.py --medians DIR DIR DIR --workdir OUT   # the checks over seeds

Trains (or resumes; a finished run is only evaluated) four runs of one config (default `configs/rlv.py`, the CPU
default task) that share one tokenizer and the same SFT on worked solutions (config and seed; the plain arm runs
it again, unless its verifier is taught only after the SFT -- sft.verify_steps / check_steps -- when it starts
from that SFT's model):
  grpo_plain  SFT, then plain GRPO; never trained on the verify prompt    the issue's plain GRPO model
  grpo        SFT + the verifier's warm-up, then plain GRPO               a control: same start as GRPO^V
  rlv         SFT + the verifier's warm-up, then GRPO^V (the fused "Is this solution correct?" term)
  rloo_v      the same with the leave-one-out estimator (RLOO^V)
(the verifier's warm-up is `train/verify_warmup.py`, self-labelled one-token verdicts, or `train/check_warmup.py`,
the worked check on contrast pairs: a model this small cannot answer the verify prompt without one). Then it
samples N solutions per held-out question from each final policy once and scores every sample with the policy
itself: the RL^V arms' trained verifier; for `grpo_plain` the same verify prompt on a model never trained on it
(the paper's LLM-as-a-judge baseline); for `grpo` the verifier its warm-up left.

Prints each run's greedy accuracy and warm-up verifier (every round of its check stage), one table and the
issue's checks (the baseline is `grpo_plain`, as the issue defines it):
  1. GRPO^V verifier balanced accuracy (score > 0.5) on its held-out samples >= 75%, and its AUROC within a
     question (the questions with right and wrong samples) >= 0.75
  2. GRPO^V weighted@N > GRPO^V maj@N
  3. GRPO^V Best-of-N (self-verification) > plain GRPO Best-of-N with the LLM-as-a-judge score
  4. pass@1 of GRPO^V >= pass@1 of plain GRPO - 2 points
and checks 3 and 4 again against the control `grpo` (same warm-up, so only the RL term differs), and GRPO^V's
Best-of-N against the Best-of-N a verifier that reads nothing gets on the same samples (a random score per distinct
completion: a policy that repeats its right solution verbatim and errs in many ways puts this far below pass@1);
those three are reported, not the issue's checks. Also the fewest samples weighted voting needs to reach plain
GRPO's majority@N, per arm (of the evaluated ks: exact when k - 1 was evaluated too). Writes `summary.json`,
`summary.md` and `accuracy_vs_k.png` (accuracy against k for every strategy and arm) to the workdir (each run's
own `results.json` from `experiments/evaluate.py`'s core is in `<workdir>/<run>/eval.json`). This is a
benchmark, not a test: its wall times are in docs/results/rlv_cpu.md and rlv_testbed.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

# the repository root, so the script runs from a checkout without the editable install
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

import numpy as np  # noqa: E402

from jaxrl_reason.configs import PRESET_DIR, load_config_file

CONFIGS = PRESET_DIR


# Run order: the control makes the shared warm-up, GRPO^V and RLOO^V start from it, plain GRPO shares only the
# tokenizer (and the SFT alone, when its verifier is taught after it).
ARMS = ("grpo", "rlv", "rloo_v", "grpo_plain")
ARM_LABELS = {  # table rows, in this order
    "grpo_plain": ("GRPO", "itself, never trained to verify (LLM-as-a-judge)"),
    "grpo": ("GRPO from the verification warm-up (control)", "itself, the warm-up's verifier"),
    "rlv": ("GRPO^V", "itself (warm-up + RL^V)"),
    "rloo_v": ("RLOO^V", "itself (warm-up + RL^V)"),
}


def as_plain_grpo(cfg, *, verify_warmup: bool) -> None:
    """A baseline arm: the same config with the verify term removed (plain GRPO, same estimator); without
    `verify_warmup` the model is never trained on the verify prompt at all."""
    import ml_collections

    cfg.method.name = "grpo"
    cfg.method.extra = ml_collections.ConfigDict()
    if not verify_warmup:  # neither the verification / worked-check warm-ups nor verify rows in the SFT
        cfg.sft.verify_steps = 0
        cfg.sft.check_steps = 0
        cfg.sft.aux_verify_share = 0.0


def shares_sft_only(cfg) -> bool:
    """The plain arm's warm-up is the control arm's SFT alone (saved as warmup.SFT_ONLY) when the verify rows come
    only from stages after the SFT: no verify rows in the SFT itself, no own-attempt stage."""
    return cfg.sft.aux_verify_share == 0 and cfg.sft.own_attempt_steps == 0 and \
        cfg.sft.verify_steps + cfg.sft.check_steps > 0


def share_sft_only(src: str, dst: str) -> None:
    """Starts run `dst` from run `src`'s tokenizer and SFT-only model (its warm-up before the verifier stages)."""
    from jaxrl_reason.experiment.warmup import SFT_ONLY

    share_warmup(src, dst, names=("tokenizer",))
    # a control arm trained before the SFT alone was kept has none: the plain arm then trains the SFT again
    if os.path.exists(os.path.join(src, SFT_ONLY)) and not os.path.exists(os.path.join(dst, "sft_model")):
        shutil.copytree(os.path.join(src, SFT_ONLY), os.path.join(dst, "sft_model"))


def as_rloo_v(cfg) -> None:
    """The RLOO^V arm: the RL^V config with the leave-one-out estimator (the paper's other value-free method)."""
    cfg.method.estimator = "rloo"
    cfg.method.estimator_kwargs = type(cfg.method.estimator_kwargs)()


def share_warmup(src: str, dst: str, names=("tokenizer", "sft_model")) -> None:
    """Starts run `dst` from run `src`'s tokenizer (and SFT model, when shared), so that the runs differ only in
    what comes after what they share."""
    os.makedirs(dst, exist_ok=True)
    for name in names:
        if not os.path.exists(os.path.join(dst, name)):
            shutil.copytree(os.path.join(src, name), os.path.join(dst, name))
    results = os.path.join(dst, "results.json")
    if "sft_model" in names and not os.path.exists(results):
        before = json.load(open(os.path.join(src, "results.json")))
        json.dump({k: before[k] for k in ("before", "sft_seconds", "verify_warmup") if k in before}, open(results, "w"),
                  indent=2)


def trained(cfg) -> bool:
    """The run finished `cfg.rl.steps` RL steps and saved its final checkpoint (so only evaluation is left)."""
    path = os.path.join(cfg.workdir, "results.json")
    if not os.path.exists(os.path.join(cfg.workdir, "final", "config.json")) or not os.path.exists(path):
        return False
    results = json.load(open(path))
    return "after" in results and results.get("rl_steps") == cfg.rl.steps


def claim_seed(workdir: str, seed: int) -> None:
    """Records which seed a benchmark workdir's arms were trained with, and refuses to mix seeds in one workdir
    (a finished arm is reused, so a second seed there would silently evaluate the first seed's models)."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "bench_seed.json")
    if os.path.exists(path):
        had = json.load(open(path))["seed"]
        if had != seed:
            raise SystemExit(f"bench_rlv: {workdir} holds arms trained with seed {had}, not {seed}; pass "
                             f"--seed {had} to resume it, or a new --workdir for seed {seed}")
    else:
        json.dump({"seed": seed}, open(path, "w"))


def evaluate_run(run_dir: str, cfg, n: int, questions: int, progress: bool) -> dict:
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.data.testbed import CHECK_FORMATS
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.inference.test_time import evaluate
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    out_path = os.path.join(run_dir, "eval.json")
    if os.path.exists(out_path):
        res = json.load(open(out_path))
        # A cached evaluation counts only for the same sample budget and the same checkpoint (a run trained on to
        # more RL steps gets a new one).
        if (res.get("n"), res.get("num_questions"), res.get("rl_steps")) == (n, questions, cfg.rl.steps) and \
                "best_of_n_chance" in res:
            return res
    final = os.path.join(run_dir, "final")
    model, tok = load_pretrained(final), Tokenizer.from_pretrained(final)
    examples = load_examples(os.path.join(run_dir, "heldout.jsonl"))[:questions]
    d = read_run_config(cfg).data
    # The task's own reward (the testbed's checker; math answers otherwise), and the check a worked-check verifier
    # writes before its verdict.
    res = evaluate(model, tok, examples, n=n, max_new_tokens=cfg.rl.max_new_tokens, temperature=cfg.rl.temperature,
                   seed=cfg.seed, progress=progress, keep_samples=False, reward_fn=build_data(d, cfg.seed).reward_fn,
                   check_tokens=d.check_tokens if d.verify_format in CHECK_FORMATS else 0)
    res["rl_steps"] = cfg.rl.steps
    json.dump(res, open(out_path, "w"), indent=2)
    return res


def at(res: dict, strategy: str, k: int) -> float:
    return res["strategies"][strategy]["mean"][res["ks"].index(k)]


def issue_checks(plain: dict, control: dict, rlv: dict, n: int) -> list:
    """The issue's checks (module docstring), against plain GRPO as the issue defines it, then checks 3 and 4 again
    against the control arm (same warm-up as GRPO^V), then GRPO^V's Best-of-N against the one a verifier that reads nothing
    gets on its samples (`best_of_n_chance`: a random score per distinct completion). Each: {"check", "measured",
    "against", "met", "issue"}."""
    bal = rlv["verifier"]["self"]["balanced_accuracy"]
    within = rlv["verifier"]["self"].get("within_question_auroc")
    out = [dict(check="GRPO^V verifier balanced accuracy >= 75%", measured=bal, against=0.75,
                met=bal is not None and bal >= 0.75, issue=True),
           dict(check="GRPO^V verifier AUROC within a question >= 0.75", measured=within, against=0.75,
                met=within is not None and within >= 0.75, issue=True),
           dict(check=f"GRPO^V weighted@{n} > GRPO^V maj@{n}", measured=at(rlv, "weighted", n),
                against=at(rlv, "majority", n), met=at(rlv, "weighted", n) > at(rlv, "majority", n), issue=True)]
    for base, issue, who in ((plain, True, "GRPO"), (control, False, "control GRPO")):
        judge = "(LLM-as-a-judge)" if issue else "(its warm-up verifier)"
        out.append(dict(check=f"GRPO^V BoN@{n} (self) > {who} BoN@{n} {judge}", measured=at(rlv, "best_of_n", n),
                        against=at(base, "best_of_n", n), met=at(rlv, "best_of_n", n) > at(base, "best_of_n", n),
                        issue=issue))
        out.append(dict(check=f"GRPO^V pass@1 >= {who} pass@1 - 2 points", measured=at(rlv, "pass", 1),
                        against=at(base, "pass", 1) - 0.02, met=at(rlv, "pass", 1) >= at(base, "pass", 1) - 0.02,
                        issue=issue))
    chance = rlv["best_of_n_chance"]["accuracy"]
    out.append(dict(check=f"GRPO^V BoN@{n} (self) > BoN@{n} of a verifier that reads nothing",
                    measured=at(rlv, "best_of_n", n), against=chance, met=at(rlv, "best_of_n", n) > chance,
                    issue=False))
    return out


def samples_to_match(res: dict, target: float) -> dict:
    """The fewest samples k (of the evaluated ks) at which weighted voting reaches `target` (plain GRPO's
    majority@N): {"k": k or None, "exact": whether k - 1 was evaluated too, so that k is the least, not a bound}."""
    ks, weighted = res["ks"], res["strategies"]["weighted"]["mean"]
    for i, (k, acc) in enumerate(zip(ks, weighted)):
        if acc >= target:
            return {"k": k, "exact": (ks[i - 1] if i else 0) == k - 1, "weighted": acc, "target": target}
    return {"k": None, "exact": True, "weighted": weighted[-1], "target": target}


def results_table(evals: dict, checks: list, n: int) -> str:
    fmt = lambda x: "n/a" if x is None else f"{100 * x:.1f}"  # noqa: E731
    rows = ["| policy | verifier | pass@1 | maj@%d | BoN@%d | BoN@%d, reading nothing | weighted@%d | pass@%d | "
            "verifier bal. acc. | AUROC | AUROC within a question |" % (n, n, n, n, n), "|" + "---|" * 11]
    for arm, (label, who) in ARM_LABELS.items():
        res = evals[arm]
        q = res["verifier"]["self"]
        rows.append(f"| {label} | {who} | {fmt(at(res, 'pass', 1))} | {fmt(at(res, 'majority', n))} | "
                    f"{fmt(at(res, 'best_of_n', n))} | {fmt(res['best_of_n_chance']['accuracy'])} | "
                    f"{fmt(at(res, 'weighted', n))} | {fmt(at(res, 'pass', n))} | "
                    f"{fmt(q['balanced_accuracy'])} | {fmt(q['auroc'])} | {fmt(q.get('within_question_auroc'))} |")
    rows += ["", f"| policy | weighted@k reaches GRPO's maj@{n} ({fmt(at(evals['grpo_plain'], 'majority', n))}) "
             "at k = |", "|---|---|"]
    for arm in ("rlv", "rloo_v", "grpo"):
        m = samples_to_match(evals[arm], at(evals["grpo_plain"], "majority", n))
        k = f"> {n}" if m["k"] is None else str(m["k"]) if m["exact"] else f"<= {m['k']}"
        rows.append(f"| {ARM_LABELS[arm][0]} | {k} |")
    rows += ["", "| check | measured | against | met |", "|---|---|---|---|"]
    for c in checks:
        met = "yes" if c["met"] else "**no**"
        rows.append(f"| {c['check']}{'' if c['issue'] else ' (not an issue check)'} | {fmt(c['measured'])} | "
                    f"{fmt(c['against'])} | {met} |")
    # Where weighted voting could beat the majority over all N samples, and what the verifier would need for it.
    rows += ["", f"| policy | maj@{n} wrong | of them with a right sample | top wrong answer's share | right share | "
             "score ratio needed | score ratio given | weighted rescues | weighted breaks |", "|" + "---|" * 9]
    num = lambda x, f: "n/a" if x is None else format(x, f)  # noqa: E731
    for arm, (label, _) in ARM_LABELS.items():
        h = evals[arm]["vote_headroom"]["self"]
        rows.append(f"| {label} | {num(h['majority_wrong'], '.1f')} of {h['questions']} | {h['solvable']} | "
                    f"{fmt(h['top_wrong_share'])} | {fmt(h['right_share'])} | {num(h['needed_ratio'], '.2f')} | "
                    f"{num(h['score_ratio'], '.2f')} | {num(h['rescued'], '.1f')} | {num(h['broken'], '.1f')} |")
    return "\n".join(rows)


def warmup_report(workdirs: dict) -> tuple[dict, str]:
    """-> (per arm: greedy held-out accuracy before and after RL, and the warm-up's verifier stages as each run's
    results.json recorded them; its markdown table). The warm-up arms share one warm-up, so its verifier is
    reported from the first run that trained it."""
    rows, out = [], {}
    for arm, workdir in workdirs.items():
        path = os.path.join(workdir, "results.json")
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        out[arm] = {"greedy_before": r.get("before", {}).get("accuracy"),
                    "greedy_after": r.get("after", {}).get("accuracy")}
        for stage in ("check_warmup", "verify_warmup"):
            if stage in r:
                w = r[stage]
                out[arm][stage] = {"before": w["before"]["balanced_acc"], "after": w["after"]["balanced_acc"],
                                   "after_rounds": w.get("after_rounds", [w["after"]["balanced_acc"]])}
        pct = lambda x: "–" if x is None else f"{100 * x:.1f}"  # noqa: E731
        stage = out[arm].get("check_warmup") or out[arm].get("verify_warmup")
        held = "–" if stage is None else (f"{pct(stage['before'])} -> "
                                          + " -> ".join(pct(x) for x in stage["after_rounds"]))
        rows.append(f"| {arm} | {pct(out[arm]['greedy_before'])} | {pct(out[arm]['greedy_after'])} | {held} |")
    table = ("| run | greedy held-out before RL | after RL | warm-up verifier, held-out balanced accuracy "
             "(before -> after each round) |\n|---|---|---|---|\n" + "\n".join(rows))
    return out, table


def seed_medians(summaries: list) -> tuple[dict, str]:
    """The issue's checks as medians over independent seeds, from one `summary.json` per seed: per check the median
    measured value against the median of what it is compared with (the issue's reading: "median over three
    training seeds"), with the median of the per-seed differences and every seed's values beside it; then each
    arm's median pass@1, maj@N, BoN@N, weighted@N and verifier. -> (the numbers, their markdown)."""
    ns = {s["n"] for s in summaries}
    if len(ns) != 1 or len({len(s["checks"]) for s in summaries}) != 1:
        raise ValueError(f"seed_medians: the summaries differ in N ({sorted(ns)}) or in their checks; give runs of "
                         "the same benchmark")
    n, med = ns.pop(), lambda xs: float(np.median(xs))  # noqa: E731
    fmt = lambda x: "n/a" if x is None else f"{100 * x:.1f}"  # noqa: E731
    checks, rows = [], []
    for i, c in enumerate(summaries[0]["checks"]):
        per = [s["checks"][i] for s in summaries]
        if any(p["check"] != c["check"] for p in per):
            raise ValueError(f"seed_medians: check {i} differs between the summaries: {[p['check'] for p in per]}")
        if any(p["measured"] is None for p in per):
            got = dict(check=c["check"], measured=None, against=None, difference=None, met=False, issue=c["issue"])
        else:
            m, a = med([p["measured"] for p in per]), med([p["against"] for p in per])
            got = dict(check=c["check"], measured=m, against=a, issue=c["issue"],
                       difference=med([p["measured"] - p["against"] for p in per]),
                       met=m >= a if " >= " in c["check"] else m > a)
        checks.append(got)
        seeds = ", ".join(f"{fmt(p['measured'])} / {fmt(p['against'])}" for p in per)
        rows.append(f"| {c['check']}{'' if c['issue'] else ' (not an issue check)'} | {fmt(got['measured'])} | "
                    f"{fmt(got['against'])} | {fmt(got['difference'])} | {seeds} | "
                    f"{'yes' if got['met'] else '**no**'} |")
    seeds = ", ".join(str(s.get("seed")) for s in summaries)
    table = [f"| check (median over seeds {seeds}) | measured | against | median difference | per seed, measured / "
             "against | met |", "|---|---|---|---|---|---|"] + rows
    arms = {}
    table += ["", f"| policy (median) | pass@1 | maj@{n} | BoN@{n} | weighted@{n} | verifier bal. acc. | "
              "AUROC within a question |", "|---|---|---|---|---|---|---|"]
    for arm, (label, _) in ARM_LABELS.items():
        res = [s[arm] for s in summaries]
        within = [r["verifier"]["self"].get("within_question_auroc") for r in res]
        arms[arm] = {"pass@1": med([at(r, "pass", 1) for r in res]),
                     f"majority@{n}": med([at(r, "majority", n) for r in res]),
                     f"best_of_n@{n}": med([at(r, "best_of_n", n) for r in res]),
                     f"weighted@{n}": med([at(r, "weighted", n) for r in res]),
                     "balanced_accuracy": med([r["verifier"]["self"]["balanced_accuracy"] for r in res]),
                     "within_question_auroc": None if None in within else med(within)}
        table.append(f"| {label} | " + " | ".join(fmt(v) if "auroc" not in k else
                                                   ("n/a" if v is None else f"{v:.3f}")
                                                   for k, v in arms[arm].items()) + " |")
    return {"n": n, "seeds": [s.get("seed") for s in summaries], "checks": checks, "arms": arms}, "\n".join(table)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="runs/bench_rlv")
    ap.add_argument("--grpo-config", default=os.path.join(CONFIGS, "rlv.py"),
                    help="the baseline arms' config; its method is forced to plain GRPO, and for grpo_plain its "
                         "verification warm-up is dropped (default: the GRPO^V config)")
    ap.add_argument("--rlv-config", default=os.path.join(CONFIGS, "rlv.py"))
    ap.add_argument("--n", type=int, default=16, help="samples per question (N of weighted@N, maj@N, BoN@N)")
    ap.add_argument("--questions", type=int, default=256, help="held-out questions to evaluate")
    ap.add_argument("--rl-steps", type=int, default=0, help="RL steps per arm (0 = the configs' rl.steps)")
    ap.add_argument("--seed", type=int, default=None,
                    help="every arm's seed (model init, data split and order, sampling, evaluation); default: the "
                         "GRPO^V config's. A new seed with a new --workdir is an independent repeat of the benchmark")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--medians", nargs="+", metavar="WORKDIR",
                    help="train nothing: print the issue's checks as medians over these finished workdirs (one seed "
                         "each) and write medians.json / medians.md to --workdir")
    args = ap.parse_args(argv)
    if args.medians:
        return write_medians(args.medians, args.workdir)

    from absl import logging
    logging.set_verbosity(logging.WARNING)
    from jaxrl_reason.experiment.pipeline import run

    t0 = time.time()
    seed = args.seed if args.seed is not None else load_config_file(args.rlv_config).seed
    claim_seed(os.path.abspath(args.workdir), seed)
    cfgs = {}
    for arm in ARMS:
        cfg = load_config_file(args.rlv_config if arm in ("rlv", "rloo_v") else args.grpo_config)
        if arm == "rloo_v":
            as_rloo_v(cfg)
        elif arm != "rlv":
            as_plain_grpo(cfg, verify_warmup=arm == "grpo")
        cfg.workdir = os.path.join(os.path.abspath(args.workdir), arm)
        cfg.rl.progress = not args.no_progress
        if args.rl_steps:
            cfg.rl.steps = args.rl_steps
        cfg.seed = seed
        if arm in ("rlv", "rloo_v"):
            share_warmup(cfgs["grpo"].workdir, cfg.workdir)
        elif arm == "grpo_plain" and shares_sft_only(cfgs["grpo"]):  # the same SFT: trained once
            share_sft_only(cfgs["grpo"].workdir, cfg.workdir)
        elif arm == "grpo_plain":
            share_warmup(cfgs["grpo"].workdir, cfg.workdir, names=("tokenizer",))
        if trained(cfg):
            print(f"== {arm}: {cfg.workdir} (trained for {cfg.rl.steps} RL steps already)")
        else:
            print(f"== {arm}: {cfg.workdir}")
            run(cfg)
        cfgs[arm] = cfg
    evals = {}
    for arm, cfg in cfgs.items():
        print(f"== evaluating {arm}: {args.questions} held-out questions x {args.n} samples")
        evals[arm] = evaluate_run(cfg.workdir, cfg, args.n, args.questions, not args.no_progress)

    n = args.n
    checks = issue_checks(evals["grpo_plain"], evals["grpo"], evals["rlv"], n)
    table = results_table(evals, checks, n)
    warmup, warmup_md = warmup_report({arm: cfg.workdir for arm, cfg in cfgs.items()})
    table = warmup_md + "\n\n" + table
    print()
    print(table)
    workdir = os.path.abspath(args.workdir)
    keys = ("strategies", "ks", "verifier", "sample_accuracy", "vote_headroom", "best_of_n_chance")
    plain_maj = at(evals["grpo_plain"], "majority", n)
    summary = {"n": n, "questions": args.questions, "seed": seed, "warmup": warmup,
               **{arm: {k: evals[arm][k] for k in keys} for arm in ARMS}, "checks": checks,
               "samples_to_match_plain_majority": {arm: samples_to_match(evals[arm], plain_maj)
                                                    for arm in ("rlv", "rloo_v", "grpo")},
               "seconds": time.time() - t0}
    json.dump(summary, open(os.path.join(workdir, "summary.json"), "w"), indent=2)
    open(os.path.join(workdir, "summary.md"), "w").write(table + "\n")
    plot(evals, os.path.join(workdir, "accuracy_vs_k.png"))
    print(f"\nwrote {workdir}/summary.md, summary.json, accuracy_vs_k.png ({time.time() - t0:.0f} s)")
    return summary


def write_medians(workdirs: list, out: str) -> dict:
    summaries = []
    for w in workdirs:
        path = os.path.join(w, "summary.json")
        if not os.path.exists(path):
            raise SystemExit(f"--medians: no {path}; run the benchmark in {w} to its end first")
        summaries.append(json.load(open(path)))
    result, table = seed_medians(summaries)
    result["workdirs"] = [os.path.abspath(w) for w in workdirs]
    os.makedirs(out, exist_ok=True)
    json.dump(result, open(os.path.join(out, "medians.json"), "w"), indent=2)
    open(os.path.join(out, "medians.md"), "w").write(table + "\n")
    print(table)
    print(f"\nwrote {os.path.abspath(out)}/medians.md, medians.json")
    return result


def plot(evals: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for arm, style, label in (("grpo_plain", ":", "GRPO"), ("grpo", "--", "GRPO (control)"), ("rlv", "-", "GRPO^V"),
                              ("rloo_v", "-.", "RLOO^V")):
        res = evals[arm]
        # One colour per strategy, one line style per arm.
        for color, (strategy, name) in enumerate((("majority", "maj@k"), ("best_of_n", "BoN@k"),
                                                  ("weighted", "weighted@k"), ("pass", "pass@k"))):
            judge = " (judge)" if arm == "grpo_plain" and strategy in ("best_of_n", "weighted") else ""
            ax.plot(res["ks"], [100 * x for x in res["strategies"][strategy]["mean"]], style, color=f"C{color}",
                    marker="o", ms=3, label=f"{label} {name}{judge}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per question)")
    ax.set_ylabel("held-out accuracy (%)")
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
