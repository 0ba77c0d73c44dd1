"""Does a warmed-up testbed model solve under CURE's hint-guided prompt? Greedy, on a run's held-out questions:

    python experiments/research/guided_probe.py --run runs/cure_first_own_s0 [--model sft_model] [--questions 256] \
        [--layout first]

1. plain: the solve prompt (the round-0 attempt);
2. guided, the task's hint of a right answer: every question under `guided_prompt(question, hint)` with the hint a
   critique of its worked solution gives (a strategy, no error named) -- the cost of the prompt itself;
3. guided, the true hint of its own wrong attempt: on the questions the plain attempt got wrong (of a critiqued
   kind), the hint of the task's own critique of that attempt -- the best a critic could hand the re-solve.
Prints and writes <run>/guided_probe.json.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a run directory holding the model, tokenizer/ and heldout.jsonl")
    p.add_argument("--model", default="sft_model", help="the model directory inside --run")
    p.add_argument("--questions", type=int, default=256)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--layout", default="after", help="where the hint stands in the guided prompt: after | first")
    args = p.parse_args(argv)

    import jax
    import numpy as np
    from flax import nnx

    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.data.prompts import guided_prompt, solve_prompt
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer
    from jaxrl_reason.train.trainer import evaluate_accuracy
    from jaxrl_reason.train.verify_warmup import sample_labelled_solutions

    examples = load_examples(os.path.join(args.run, "heldout.jsonl"))[:args.questions]
    source = examples[0].meta.get("source")
    if source not in testbed.TASK_MODULES:
        raise SystemExit(f"{args.run}/heldout.jsonl: a testbed task's questions are needed, got source {source!r}")
    task = testbed.task_of(source)
    model = load_pretrained(os.path.join(args.run, args.model))
    tok = Tokenizer.from_pretrained(os.path.join(args.run, "tokenizer"))
    params = nnx.state(model)
    reward = functools.partial(testbed.reward, task)

    _, texts, right = sample_labelled_solutions(model, tok, examples, reward, samples_per_question=1,
                                                max_new_tokens=args.max_new_tokens, temperature=0.0,
                                                key=jax.random.PRNGKey(0), prompt_fn=solve_prompt)  # the testbed sources pose with it
    generic = {e.question: testbed.critique_hint(task, e.question, task.parse(e.solution), None) for e in examples}
    wrong, own = [], {}
    for e, text, ok in zip(examples, texts, right):
        answer = task.parse(text)
        kind = task.error_kind(e.question, answer)
        if not ok and kind in task.inject_weights:
            wrong.append(e)
            own[e.question] = testbed.critique_hint(task, e.question, answer, kind)

    def guided_acc(exs, hints) -> float:
        return evaluate_accuracy(model, params, tok, exs, reward, max_new_tokens=args.max_new_tokens,
                                 prompt_fn=lambda q: guided_prompt(q, hints[q], args.layout))["accuracy"]

    out = {"questions": len(examples), "plain": float(np.mean(right)),
           "guided_generic_hint": guided_acc(examples, generic),
           "wrong_critiqued": len(wrong), "guided_true_hint_on_wrong": guided_acc(wrong, own) if wrong else None,
           "layout": args.layout,
           "example_prompt": guided_prompt(wrong[0].question, own[wrong[0].question], args.layout) if wrong else None}
    print(json.dumps(out, indent=1))
    name = "guided_probe.json" if args.layout == "after" else f"guided_probe_{args.layout}.json"
    json.dump(out, open(os.path.join(args.run, name), "w"), indent=1)
    return out


if __name__ == "__main__":
    main()
