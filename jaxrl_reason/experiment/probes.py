"""What the research probes under experiments/research/ compute (refine_probe, own_vs_injected, testbed_probe),
here so that tests call it and the scripts hold only their command lines. Each function's docstring says what it
measures; the pages in docs/results/ that quote the probes say what was found."""
from __future__ import annotations

import collections
import os

import numpy as np




# ---- a finished run's checkpoint, held-out questions and task
def load_arm(cfg, questions: int, model: str = "final", tokenizer: str = "final"):
    """(model, tokenizer, the first `questions` held-out examples, the run's TaskData) of a finished arm; `model`
    and `tokenizer` name the run's subdirectories to load (its warm-up: "sft_model", "tokenizer")."""
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    examples = load_examples(os.path.join(cfg.workdir, "heldout.jsonl"))[:questions]
    return (load_pretrained(os.path.join(cfg.workdir, model)),
            Tokenizer.from_pretrained(os.path.join(cfg.workdir, tokenizer)), examples,
            build_data(cfg.data, read_run_config(cfg).setup_seed))



# ---- a finished run's checkpoint, held-out questions and task
def critique_budget(cfg) -> int:
    """The test-time critique budget: the CURE run's, plus data.check_tokens when the critic writes the check."""
    return int(cfg.method.extra.critique_max_new_tokens) + (
        int(cfg.data.check_tokens) if cfg.data.critique_format == "worked_check" else 0)



# ---- one self-refinement round of a saved testbed model, split by attempt and verdict (refine_probe.py)
def repair(cfg, model, tokenizer, task, *, steps: int, guided: int, critique: int, seed: int = 7) -> None:
    """`steps` SFT steps on `guided` guided re-solve rows and `critique` critique rows (the config's layouts and
    formats) built from the first warm-up questions, with as many worked solutions; updates `model` in place."""
    from jaxrl_reason.data.prompts import whole_turn_prompt_fn
    from jaxrl_reason.data.testbed import auxiliary_rows
    from jaxrl_reason.experiment.warmup import task_of
    from jaxrl_reason.train.trainer import sft_train

    n = max(guided, critique)
    base = list(task.train[:2 * n])
    rows = auxiliary_rows(task_of(cfg.data.source), base[:n], verify=0, critique=critique, correct=0,
                          guided=guided, seed=seed, guided_layout=cfg.data.guided_layout,
                          critique_format=cfg.data.critique_format)
    sft_train(model, tokenizer, rows + base[n:2 * n], steps=steps, batch_size=cfg.sft.batch_size,
              lr=cfg.sft.own_attempt_lr, warmup_steps=cfg.sft.warmup_steps, seed=seed, progress=False,
              pack=cfg.sft.pack, prompt_fn=whole_turn_prompt_fn(rows, task.prompt_fn))


CHECK_OUTCOMES = ("exact", "lines", "copy", "mark")


def check_outcome(true_check: str, critique: str) -> str:
    """How a worked-check critique's check compares with the task's check of the same attempt, line by line (each
    line: what it copies, then its mark as the last word): "exact"; else the first fault, in line order -- "lines"
    (a line missing, extra or out of place), "copy" (a copied cell differs), "mark" (the copy right, the mark
    not)."""
    want = true_check.split("\n")
    got = critique.split("\n")[:len(want)]
    if got == want:
        return "exact"
    for w, g in zip(want, got + [""] * (len(want) - len(got))):
        if w == g:
            continue
        w_head, g_head = w.split(":", 1)[0], g.split(":", 1)[0]
        if w_head != g_head:
            return "lines"
        return "copy" if w.rpartition(" ")[0] != g.rpartition(" ")[0] else "mark"
    return "lines"


def attempts_of(cfg, model, tokenizer, examples, task, *, seed: int = 0) -> tuple[list, list]:
    """(texts, generated token counts): one sample per question from `model` at the run's temperature -- the
    round 0 `self_refine` draws with the same seed."""
    from jaxrl_reason.inference.refine import decode_ids, make_generate

    generate = make_generate(model, tokenizer, temperature=cfg.rl.temperature, seed=seed)
    ids = generate(tokenizer.encode_ragged([tokenizer.render_prompt(task.prompt_fn(e.question)) for e in examples]),
                   max_new_tokens=cfg.rl.max_new_tokens)
    return decode_ids(tokenizer, ids), [len(x) for x in ids]


def probe(cfg, model, tokenizer, examples, task, *, seed: int = 0, generate=None, initial=None,
          initial_tokens=None) -> dict:
    """One refinement round and a fresh-sample baseline -> counts (see the module docstring). `generate`
    (`inference.refine.Generate`) replaces the model's sampler, for a scripted test; `initial` / `initial_tokens`:
    round 0's attempts, already sampled (e.g. by another model, `attempts_of`)."""
    from jaxrl_reason.inference.refine import VERDICT_NO_ERROR, decode_ids, graded_right, make_generate, self_refine

    temp = cfg.rl.temperature
    r = self_refine(model, tokenizer, examples, task.reward_fn, rounds=1, max_new_tokens=cfg.rl.max_new_tokens,
                    critique_max_new_tokens=critique_budget(cfg),
                    temperature=temp, seed=seed, guided_layout=cfg.data.guided_layout,
                    critique_format=cfg.data.critique_format, generate=generate, initial=initial,
                    initial_tokens=initial_tokens)
    right, after = r.correct[0], r.correct[1]
    redo = r.verdicts[0] != VERDICT_NO_ERROR  # an unparsed verdict is re-solved too, as at test time
    wrong_redo = np.flatnonzero(~right & redo)
    fresh_right = 0
    if len(wrong_redo):
        if generate is None:
            generate = make_generate(model, tokenizer, temperature=temp, seed=seed + 1)
        ids = generate(tokenizer.encode_ragged([tokenizer.render_prompt(task.prompt_fn(examples[i].question))
                                                for i in wrong_redo]), max_new_tokens=cfg.rl.max_new_tokens)
        fresh = decode_ids(tokenizer, ids)
        fresh_right = int(graded_right(task.reward_fn, fresh, [examples[i] for i in wrong_redo]).sum())
    out = {"questions": len(examples), "round0": float(right.mean()), "round1": float(after.mean()),
           "wrong_redone": len(wrong_redo), "fixed": int(after[wrong_redo].sum()),
           "fresh_fixed": fresh_right, "wrong_kept": int((~right & ~redo).sum()),
           "right_redone": int((right & redo).sum()), "right_stayed": int((right & redo & after).sum()),
           "right_kept": int((right & ~redo).sum()), "well_formed": float(r.well_formed[0].mean())}
    if cfg.data.critique_format == "worked_check" and initial is not None:  # the attempts' texts are known
        from jaxrl_reason.data.testbed import critique_check, task_of

        testbed_task = task_of(cfg.data.source)
        kinds = np.array([check_outcome(critique_check(testbed_task, e.question, a), c)
                          for e, a, c in zip(examples, initial, r.critiques)])
        # [attempt right / wrong][re-solved or not] -> {outcome: count}: where a wrong verdict comes from
        out["checks"] = {f"{side}_{'redone' if flagged else 'kept'}":
                         {k: int(((right == is_right) & (redo == flagged) & (kinds == k)).sum())
                          for k in CHECK_OUTCOMES}
                         for side, is_right in (("right", True), ("wrong", False)) for flagged in (True, False)}
    return out



# ---- the policy's own wrong answers against injected ones (own_vs_injected.py)
def positions_off(gold, answer) -> int:
    """How many positions of `answer` differ from `gold` (a missing or extra position counts once); -1 when there
    is no answer to compare."""
    if not answer:
        return -1
    return sum(a != b for a, b in zip(gold, answer)) + abs(len(gold) - len(answer))


def describe(distances) -> str:
    """'median m (q25-q75), range lo-hi' of the non-negative distances ('none' when there are none)."""
    d = np.asarray([x for x in distances if x >= 0])
    if not d.size:
        return "none"
    q1, m, q3 = np.percentile(d, [25, 50, 75])
    return f"median {m:g} ({q1:g}-{q3:g}), range {d.min()}-{d.max()}"


def check_reading(task, question: str, attempt: str, reply: str) -> tuple[str, bool, bool]:
    """(how the reply's check compares with the task's check of `attempt` -- `check_outcome`, whether
    it flags a fault, whether the solution after it differs from the attempt) of a "worked_check" correction."""
    from jaxrl_reason.data.testbed import correction_parts

    wrote, solution = correction_parts(task, question, attempt, reply)
    flagged = any(line.rpartition(" ")[2] != "ok" for line in wrote.split("\n"))
    rewritten = task.parse(solution) != task.parse(attempt)
    return check_outcome(task.check_text(question, task.parse(attempt)), reply.strip()), flagged, rewritten


def reading_row(name: str, readings, fixed) -> str:
    """A markdown row of the wrong attempts' `check_reading`s and whether the correction fixed them."""
    n = len(readings)
    outcome = collections.Counter(r[0] for r in readings)
    flagged = [r[1] for r in readings]
    after_flag = [(r[2], f) for r, f in zip(readings, fixed) if r[1]]
    return (f"| {name} | {n} | " + " · ".join(f"{k} {outcome[k]}" for k in ("exact", "lines", "copy", "mark"))
            + f" | {sum(flagged)} | {sum(rw for rw, _ in after_flag)} | {sum(f for _, f in after_flag)} | "
            f"{int(np.sum(fixed))} |")



# ---- a testbed task's error kinds and a verifier trained on its checks (testbed_probe.py)
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
            key=jax.random.PRNGKey(rc.setup_seed + 2), prompt_fn=task.prompt_fn)
        extra = own_check_rows(rc.data.source, [e for e in train_qs for _ in range(args.check_own)], texts, graded,
                               rc.setup_seed + 2, args.verify_format)
        own = {"own_rows": len(extra), "own_right_frac_sampled": float(graded.mean()),
               "own_marks": dict(collections.Counter(ln.rsplit(" ", 1)[1] for r in extra
                                                     for ln in r.solution.split("\n")[:-1]))}
    res = check_warmup(model, tokenizer, tb, qs, task.train, steps=args.verify_steps, check_tokens=args.check_tokens,
                       batch_size=rc.sft.verify_batch_size + rc.sft.verify_solve_rows, lr=args.verify_lr,
                       warmup_steps=rc.sft.warmup_steps, solve_share=args.check_solve_share, seed=rc.setup_seed,
                       verify_format=args.verify_format, inject_extent=rc.data.inject_extent, extra_rows=extra,
                       span_weights=(rare_mark_spans(args.mark_weight, args.mark_span) if args.mark_weight != 1.0
                                     else None),
                       prompt_fn=task.prompt_fn, progress=False, rows_as="verify", pack=False, target=0.0,
                       max_rounds=1)
    held = heldout_check_rows(tb, qs, seed=rc.setup_seed, verify_format=args.verify_format,
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
