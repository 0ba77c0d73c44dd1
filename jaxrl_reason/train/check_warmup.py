"""Worked-check warm-up: teach a fine-tuned policy to write the task's check of a solution, then the verdict.

A verifier with a written check (data.verify_format "worked_check" / "mark_check", testbed tasks) copies what each
constraint compares and marks it before it says Yes or No; the verdict then reads the marks it wrote. The warm-up
trains that on contrast pairs (`data.testbed.check_pairs`: each question's worked solution and a wrong one in the
policy's error mix, the target the true check then the verdict), with worked-solution rows mixed in so the solver
keeps its skill. Run after the SFT warm-up, before RL (config `sft.check_steps`); on the 4 x 256 Latin-square
policy it is what took the verifier on the policy's own samples to within-question AUROC 0.93
(docs/results/testbed.md, run 19).

With `rows_as="critique"` the pairs are CURE critiques that open with the check (data.critique_format
"worked_check": the check, then the four fields, the verdict first among them), so the critic's verdict reads the
marks it wrote -- the same skill, under the prompt CURE trains and self-refinement asks. With
`rows_as="correction"` they are CIPO corrections that open with the check of the attempt (data.correction_format
"worked_check"), then the worked solution: the right attempt kept, the wrong one corrected.

The held-out slice is the pairs of the first 10% of the questions (at most 100), never trained on; the verifier's
balanced accuracy on it, read after the check it writes (for critiques: the verdict the greedy critique writes),
is reported before and after.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example
from jaxrl_reason.data.prompts import (VERIFY_YES, critique_verdict_prefix, parse_critique, solve_prompt,
                                       whole_turn_prompt_fn)
from jaxrl_reason.data.testbed import TestbedTask, check, check_pairs
from jaxrl_reason.inference.verifier import verifier_accuracy
from jaxrl_reason.train.metrics import MetricsWriter
from jaxrl_reason.train.trainer import sft_train


def heldout_questions(n: int) -> int:
    """How many of `n` warm-up questions the check warm-up holds out: 10%, at least 1, at most 100."""
    return min(100, max(1, n // 10))


def heldout_check_rows(task: TestbedTask, examples: Sequence[Example], *, seed: int, verify_format: str,
                       inject_extent: str = "minimal", rows_as: str = "verify") -> list[Example]:
    """The held-out pairs `check_warmup` measures on (drawn with `seed + 1`, apart from the trained pairs)."""
    return check_pairs(task, examples[:heldout_questions(len(examples))], seed=seed + 1, verify_format=verify_format,
                       inject_extent=inject_extent, rows_as=rows_as)


def critique_verdict_accuracy(model, tokenizer, rows: Sequence[Example], check_tokens: int,
                              batch_size: int = 64) -> dict:
    """Critique rows (`check_pairs(rows_as="critique")`): the greedy critique, written up to its verdict line
    (<= check_tokens, then the verdict's own tokens), scored like `verifier_accuracy` ("no error" on a right
    solution and "error" on a wrong one); an unparsed verdict counts as the wrong call."""
    from jaxrl_reason.inference.refine import make_generate

    labels = np.asarray([r.meta["right"] for r in rows], bool)
    budget = check_tokens + len(tokenizer.encode(critique_verdict_prefix(False))) + 2
    generate = make_generate(model, tokenizer, batch_size=batch_size)
    ids = generate(tokenizer.encode_ragged([tokenizer.render_prompt(r.question) for r in rows]), max_new_tokens=budget)
    found = [parse_critique(tokenizer.decode(list(x), skip_special_tokens=True)).error_found for x in ids]
    says_right = np.asarray([f is False for f in found])
    says_wrong = np.asarray([f is True for f in found])
    pos = float(says_right[labels].mean()) if labels.any() else float("nan")
    neg = float(says_wrong[~labels].mean()) if (~labels).any() else float("nan")
    return {"acc_positive": pos, "acc_negative": neg, "balanced_acc": 0.5 * (pos + neg),
            "parsed": float(np.mean([f is not None for f in found])) if found else 0.0, "rows": int(len(labels))}


def correction_accuracy(model, tokenizer, task: TestbedTask, rows: Sequence[Example], check_tokens: int,
                        batch_size: int = 64) -> dict:
    """Correction rows (`check_pairs(rows_as="correction")`): the greedy correction (its check, then a solution:
    <= check_tokens plus the worked solution's length and a margin), graded by the task's checker on the row's
    question: acc_positive = right attempts kept right, acc_negative = wrong attempts corrected."""
    from jaxrl_reason.inference.refine import make_generate

    labels = np.asarray([r.meta["right"] for r in rows], bool)
    budget = check_tokens + max(len(tokenizer.encode(r.solution.split("\n")[-1])) for r in rows) + 8
    generate = make_generate(model, tokenizer, batch_size=batch_size)
    ids = generate(tokenizer.encode_ragged([tokenizer.render_prompt(r.question) for r in rows]), max_new_tokens=budget)
    texts = [tokenizer.decode(list(x), skip_special_tokens=True) for x in ids]
    ok = np.asarray([check(task, r.meta["question"], t) for r, t in zip(rows, texts)])
    pos = float(ok[labels].mean()) if labels.any() else float("nan")
    neg = float(ok[~labels].mean()) if (~labels).any() else float("nan")
    return {"acc_positive": pos, "acc_negative": neg, "balanced_acc": 0.5 * (pos + neg), "rows": int(len(labels))}


def check_accuracy(model, tokenizer, rows: Sequence[Example], check_tokens: int,
                   task: Optional[TestbedTask] = None) -> dict:
    """How well the model judges check rows after writing its check (<= check_tokens): `verifier_accuracy` of
    verify rows (the verdict read after the check), `critique_verdict_accuracy` of critique rows,
    `correction_accuracy` of correction rows (graded by `task`'s checker)."""
    if rows and rows[0].meta["format"] == "critique":
        return critique_verdict_accuracy(model, tokenizer, rows, check_tokens)
    if rows and rows[0].meta["format"] == "correction":
        return correction_accuracy(model, tokenizer, task, rows, check_tokens)
    labels = [r.solution.endswith(VERIFY_YES) for r in rows]
    return verifier_accuracy(model, tokenizer, [r.meta["question"] for r in rows], [r.meta["solution"] for r in rows],
                             labels, check_tokens=check_tokens)


def check_warmup(model, tokenizer, task: TestbedTask, examples: Sequence[Example], solve_examples: Sequence[Example],
                 *, steps: int, check_tokens: int, batch_size: int, lr: float, warmup_steps: int,
                 solve_share: float, verify_format: str, inject_extent: str, rows_as: str, pack: bool,
                 target: float, max_rounds: int, seed: int = 0, extra_rows: Sequence[Example] = (),
                 span_weights=None, checkpoint_dir: Optional[str] = None, checkpoint_every: int = 0,
                 prompt_fn: Callable[[str], str] = solve_prompt, writer: Optional[MetricsWriter] = None,
                 progress: bool = True, mesh=None) -> dict:
    """The worked-check warm-up (module docstring); updates `model` in place. The knobs a run config owns have
    no default here: their one default is the `sft` section's (`sft.check_*`, `sft.warmup_steps`, `sft.pack`) or
    the `data` section's (`verify_format`, `inject_extent`, `check_tokens`), passed by
    `experiment.warmup.run_check_warmup`.

    examples: the questions whose contrast pairs it trains on (the first `heldout_questions(len(examples))` held
    out); solve_examples: the worked solutions mixed in, `solve_share` per check row (at least one);
    rows_as: the pairs as verify rows or as critiques that open with the check (`data.testbed.check_pairs`);
    extra_rows: more rows to train on beside the pairs, each question its whole user turn (checks of the
    policy's own attempts; CURE's guided re-solves, which the stage would otherwise erase);
    span_weights: per-token loss weights on the rows' target spans (`trainer.sft_rows`); pack, checkpoint_dir,
    checkpoint_every: `sft_train`'s (a stopped warm-up resumes from its checkpoint; `before` is measured on the
    model passed in, which must then be the one it started from).
    target, max_rounds: while the held-out balanced accuracy is below `target` after a round of `steps` steps,
    another round follows (a fresh schedule, the rows in a new order: seed + round), at most `max_rounds` in all --
    a warm-up that ends when its verifier reads rather than after a fixed count (seeds of one recipe left it at
    78.5-94%, docs/results/rlv_testbed.md). The held-out pairs then select the model as well as measure it.
    Returns {"rows", "extra_rows", "solve_rows", "heldout_rows", "before", "after", "first_nll", "last_nll",
    "rounds", "after_rounds"}: before / after are `check_accuracy` on the held-out pairs (after_rounds: each
    round's balanced accuracy)."""
    if steps < 1:
        raise ValueError(f"check_warmup steps must be >= 1, got {steps}")
    if len(examples) < 2:
        raise ValueError(f"check_warmup needs >= 2 questions (one is held out), got {len(examples)}")
    if solve_share < 0:
        raise ValueError(f"check_warmup solve_share must be >= 0, got {solve_share}")
    if not 0.0 <= target < 1.0 or max_rounds < 1:
        raise ValueError(f"check_warmup needs 0 <= target < 1 and max_rounds >= 1, got {target}, {max_rounds}")
    held = heldout_check_rows(task, examples, seed=seed, verify_format=verify_format, inject_extent=inject_extent,
                              rows_as=rows_as)
    before = check_accuracy(model, tokenizer, held, check_tokens, task)
    rows = check_pairs(task, examples[heldout_questions(len(examples)):], seed=seed, verify_format=verify_format,
                       inject_extent=inject_extent, rows_as=rows_as) + list(extra_rows)
    solve = list(solve_examples[:max(1, int(len(rows) * solve_share))]) if solve_share > 0 else []
    row_prompt_fn = whole_turn_prompt_fn(rows, prompt_fn)
    hist, rounds = [], []
    for r in range(max_rounds):
        ck = None if checkpoint_dir is None else checkpoint_dir + (f"_round{r + 1}" if r else "")
        hist += sft_train(model, tokenizer, rows + solve, steps=steps, batch_size=batch_size, lr=lr,
                          warmup_steps=warmup_steps, seed=seed + r, progress=progress, writer=writer, mesh=mesh,
                          prompt_fn=row_prompt_fn, span_weights=span_weights,
                          pack=pack, checkpoint_dir=ck, checkpoint_every=checkpoint_every, log_offset=r * steps)
        after = check_accuracy(model, tokenizer, held, check_tokens, task)
        rounds.append(after["balanced_acc"])
        if writer is not None:  # a long stage's rounds, readable while it runs
            writer.write((r + 1) * steps, {"check_warmup/heldout_balanced_acc": after["balanced_acc"]})
        if after["balanced_acc"] >= target:
            break
    return {"rows": len(rows) - len(extra_rows), "extra_rows": len(extra_rows), "solve_rows": len(solve),
            "heldout_rows": len(held), "before": before, "after": after,
            "first_nll": hist[0]["sft/nll"], "last_nll": hist[-1]["sft/nll"], "rounds": len(rounds),
            "after_rounds": rounds}
