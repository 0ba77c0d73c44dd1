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
import collections
import json
import os
import sys
import time

# the repository root, so the script runs from a checkout without the editable install
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.configs import PRESET_DIR  # noqa: E402
from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

CONFIGS = PRESET_DIR


def sample_error_kind(source: str):
    """The testbed source's `(question, completion text) -> error kind or None` (None: a right answer)."""
    import importlib

    mod = importlib.import_module(f"jaxrl_reason.data.{source}")
    return mod.text_error_kind


def error_counts(examples, samples, source: str = "graph_path") -> dict:
    """Counts of the task's error kind over every wrong sample ({kind: count})."""
    kind_of = sample_error_kind(source)
    c = collections.Counter()
    for e, row in zip(examples, samples):
        for text in row["completions"]:
            kind = kind_of(e.question, text)
            if kind is not None:
                c[kind] += 1
    return dict(c)


def measure(model, tokenizer, heldout, rc, args, reward_fn):
    from jaxrl_reason.inference.test_time import evaluate

    check_tokens = args.check_tokens if args.verify_format != "verdict" else 0
    return evaluate(model, tokenizer, heldout[:args.vote_questions], n=args.vote_n,
                    max_new_tokens=rc.rl.max_new_tokens, temperature=rc.rl.temperature, seed=rc.seed, progress=False,
                    reward_fn=reward_fn, keep_samples=True, check_tokens=check_tokens)


def own_check_rows(source: str, examples, texts, labels, seed: int, fmt: str = "worked_check") -> list:
    """Worked-check verify rows of the policy's *own* attempts (`texts[i]` answers `examples[i]`, `labels[i]` its
    grade): each distinct wrong attempt and as many distinct right ones (drawn with `seed`), the target the task's
    check of that very answer then the verdict. Injected wrong answers are not the policy's (a rewritten given is
    its commonest error after the check SFT, docs/results/testbed.md run 13); these rows show the verifier its own."""
    import numpy as np

    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.datasets import Example
    from jaxrl_reason.data.prompts import verify_prompt

    task, seen, right, wrong = testbed.task_of(source), set(), [], []
    for e, text, ok in zip(examples, texts, labels):
        if (e.question, text) not in seen:
            seen.add((e.question, text))
            (right if ok else wrong).append((e, text))
    n = min(len(right), len(wrong))
    rng = np.random.default_rng(seed)
    chosen = [wrong[i] for i in sorted(rng.permutation(len(wrong))[:n])] + \
        [right[i] for i in sorted(rng.permutation(len(right))[:n])]
    return [Example(verify_prompt(e.question, text), "", f"{e.id}/own_check{i}",
                    testbed.verify_target(task, e.question, text, fmt),
                    {"format": "verify", "question": e.question, "solution": text, "attempt": "own"})
            for i, (e, text) in enumerate(chosen)]


RARE_MARKS = ("repeat", "changed")


def rare_mark_spans(weight: float, span: str = "mark"):
    """Span weights (`train.trainer.sft_rows`) for worked-check rows: on each line whose mark is not `ok`, the
    mark word (`span="mark"`) or the line's copied cells and its mark (`span="line"`) weigh `weight`; other rows
    (worked solutions) and other tokens are untouched. Non-ok lines are ~12% of the check lines and the only ones
    that decide the verdict (what the weights did: docs/results/testbed.md, runs 15-16)."""
    import re

    if span not in ("mark", "line"):
        raise ValueError(f"rare_mark_spans span={span!r} is unknown; use 'mark' or 'line'")
    pattern = re.compile(r"^(?:Row|Col) \d+:(?: (.*))? (%s)$" % "|".join(RARE_MARKS), re.M)

    def spans(e):
        if e.meta.get("format") != "verify":
            return []
        # a mark_check line has no copied cells: its "line" is its mark
        return [((m.start(2) if span == "mark" or m.group(1) is None else m.start(1)), m.end(2), weight)
                for m in pattern.finditer(e.solution)]
    return spans


def grade_check_lines(true_checks, written_checks) -> dict:
    """A written worked check against the true one, line by line (lines paired in order, a missing line graded
    as wrong): `line_copied`, the share whose first segment (the line without its mark, up to the first " | ") is
    exact; `flag_right`, per true token of the later segments (a symbol, or a flag such as - or !), the share written
    right at its position; `mark_right`, per true mark (the line's last word), the share written right;
    `mark_by_copy`, per true mark, [share of lines whose whole body was copied exactly, share of marks right on
    those, share of marks on the miscopied ones that are right *for the line as written*] -- which tells a copy
    error (the line rewritten, then marked consistently) from a decision error (copied, then marked wrong), and
    the line count. {name: [share, count]} for the other keyed ones. A mark_check line copies nothing, so its copy
    shares are 1 by construction and only `mark_right` says anything."""
    import numpy as np

    copies, flags, marks = [], collections.defaultdict(list), collections.defaultdict(list)
    by_copy = collections.defaultdict(lambda: ([], [], []))
    for true, got in zip(true_checks, written_checks):
        got_lines = got.strip().split("\n")
        for i, line in enumerate(true.split("\n")):
            w = got_lines[i].strip() if i < len(got_lines) else ""
            (t_body, mark), (w_body, w_mark) = line.rsplit(" ", 1), (w.rsplit(" ", 1) + [""])[:2]
            marks[mark].append(w_mark == mark)
            copied, (n_copied, right_copied, own_miscopied) = w_body == t_body, by_copy[mark]
            n_copied.append(copied)
            (right_copied if copied else own_miscopied).append(w_mark == (mark if copied else _line_mark(w_body)))
            t_segs, w_segs = t_body.split(" | "), w_body.split(" | ")
            copies.append(w_segs[0] == t_segs[0])
            for k, seg in enumerate(t_segs[1:], start=1):
                t_tok = seg.split()
                w_tok = w_segs[k].split() if k < len(w_segs) else []
                for j, tok in enumerate(t_tok):
                    flags["-" if tok == "-" else "symbol" if tok.isupper() else tok].append(
                        j < len(w_tok) and w_tok[j] == tok)
    share = lambda d: {m: [float(np.mean(v)), len(v)] for m, v in sorted(d.items())}  # noqa: E731
    mean = lambda v: float(np.mean(v)) if v else float("nan")  # noqa: E731
    return {"line_copied": float(np.mean(copies)) if copies else float("nan"), "flag_right": share(flags),
            "mark_right": share(marks),
            "mark_by_copy": {m: [mean(a), mean(b), mean(c), len(a)] for m, (a, b, c) in sorted(by_copy.items())}}


def _line_mark(body: str) -> str:
    """The mark a Latin-square check line deserves as written (`Row r: given | cells` or `Col j: cells`)."""
    from jaxrl_reason.data.latin_square import line_mark

    cells = body.split(" | ")[-1].split(": ")[-1].split()
    return line_mark(cells, body.split(" | ")[0].split(": ")[-1].split() if " | " in body else None)


def train_worked_check(model, tokenizer, task, rc, args) -> dict:
    """The offline verifier of --verify-format worked_check / mark_check: the library's worked-check warm-up
    (`train.check_warmup`, the pipeline's `sft.check_steps` stage) on the first --verify-questions training
    questions, with --check-solve-share worked-solution rows per check row; --check-own adds the checks of the
    policy's own attempts, --mark-weight weighs the rare marks. The model is saved to <workdir>/verifier_model by
    the caller; the held-out pairs' written checks are graded line by line (`grade_check_lines`) after it."""
    from jaxrl_reason.data import testbed
    from jaxrl_reason.inference.verifier import verify_inputs, verify_prompts
    from jaxrl_reason.train.check_warmup import check_warmup, heldout_check_rows, heldout_questions

    tb = testbed.task_of(rc.data.source)
    qs = task.train[:args.verify_questions]
    own = {}
    extra = []
    if args.check_own:
        import jax

        from jaxrl_reason.train.verify_warmup import sample_labelled_solutions

        train_qs = list(qs[heldout_questions(len(qs)):])
        _, texts, graded = sample_labelled_solutions(
            model, tokenizer, train_qs, task.reward_fn, samples_per_question=args.check_own,
            max_new_tokens=rc.rl.max_new_tokens, temperature=rc.rl.temperature,
            key=jax.random.PRNGKey(rc.seed + 2), prompt_fn=task.prompt_fn)
        extra = own_check_rows(rc.data.source, [e for e in train_qs for _ in range(args.check_own)], texts, graded,
                               rc.seed + 2, args.verify_format)
        own = {"own_rows": len(extra), "own_right_frac_sampled": float(graded.mean()),
               "own_marks": dict(collections.Counter(ln.rsplit(" ", 1)[1] for r in extra
                                                     for ln in r.solution.split("\n")[:-1]))}
    res = check_warmup(model, tokenizer, tb, qs, task.train, steps=args.verify_steps, check_tokens=args.check_tokens,
                       batch_size=rc.sft.verify_batch_size + rc.sft.verify_solve_rows, lr=args.verify_lr,
                       warmup_steps=rc.sft.warmup_steps, solve_share=args.check_solve_share, seed=rc.seed,
                       verify_format=args.verify_format, inject_extent=rc.data.inject_extent, extra_rows=extra,
                       span_weights=(rare_mark_spans(args.mark_weight, args.mark_span) if args.mark_weight != 1.0
                                     else None),
                       prompt_fn=task.prompt_fn, progress=False, rows_as="verify", pack=False, target=0.0, max_rounds=1)
    held = heldout_check_rows(tb, qs, seed=rc.seed, verify_format=args.verify_format,
                              inject_extent=rc.data.inject_extent)
    qs_, sols = [r.meta["question"] for r in held], [r.meta["solution"] for r in held]
    inputs = verify_inputs(model, tokenizer, qs_, sols, check_tokens=args.check_tokens)
    written = [tokenizer.decode(x[len(p):], skip_special_tokens=True)
               for x, p in zip(inputs, verify_prompts(tokenizer, qs_, sols))]
    return {"rows": 0, "contrast_rows": res["rows"], **own, "solve_rows": res["solve_rows"],
            "heldout_rows": res["heldout_rows"], "before_bal_acc": res["before"]["balanced_acc"],
            "after_bal_acc": res["after"]["balanced_acc"],
            "heldout_check": {**grade_check_lines([r.solution.rsplit("\n", 1)[0] for r in held], written),
                              "example_check": written[1]},
            "first_nll": res["first_nll"], "last_nll": res["last_nll"]}


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
    task = build_data(rc.data, rc.seed)
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
