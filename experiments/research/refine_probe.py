"""Where does one self-refinement round gain or lose? A probe of a saved testbed model's critique + guided re-solve.

    python experiments/research/refine_probe.py --config jaxrl_reason/configs/testbed_latin_cure_check.py \
        --run runs/bench_cure_check_s0/seed0/grpo --model sft_model [--questions 128] \
        [--repair-steps 150 --repair-guided 2000 --repair-critique 2000] [--attempts RUN[:MODEL]]

One round of `inference.refine.self_refine` (verdict generated, temperature `rl.temperature`) from one sample per
question, then the round's outcome split by the first sample's correctness and the verdict: wrong attempts
re-solved and how many of those came out right (fixed), right attempts re-solved and how many stayed right (kept).
Beside it the baseline a guided re-solve has to beat: one fresh, unguided sample of the same wrongly-answered
questions. With `--repair-steps`, first a short SFT stage on the model (guided re-solve rows and worked-check
critique rows of the config's formats, `data.testbed.auxiliary_rows`, plus as many worked solutions), to see
whether a skill the warm-up lost comes back. With `--attempts`, round 0 is another run's model's sample (same
seed and temperature) and the probed model only critiques and re-solves: which of two models' critics is worse on
the same attempts. With a worked-check critique, each check is compared line by line with the task's check of the
attempt (`check_outcome`: exact, or the first kind of fault: a line missing or extra, a copied cell, a mark; with
`--attempts` only, which gives the probe round 0's texts -- name the probed run itself for its own attempts).
Prints a table; writes nothing.
"""
from __future__ import annotations

import argparse
import os

from jaxrl_reason.configs import load_config_file
from jaxrl_reason.experiment.probes import CHECK_OUTCOMES, attempts_of, load_arm, probe, repair


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the run's config file (its formats and layouts)")
    ap.add_argument("--run", required=True, help="the run's workdir (heldout.jsonl, tokenizer/, the model)")
    ap.add_argument("--model", default="final", help="the model's subdirectory of --run (final, sft_model, ...)")
    ap.add_argument("--questions", type=int, default=128, help="held-out questions probed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repair-steps", type=int, default=0, help="SFT steps of a repair stage first (0: none)")
    ap.add_argument("--repair-guided", type=int, default=2000, help="guided re-solve rows of the repair stage")
    ap.add_argument("--repair-critique", type=int, default=2000, help="critique rows of the repair stage")
    ap.add_argument("--attempts", default="", metavar="RUN[:MODEL]",
                    help="round 0 from this run's model (default subdirectory: final), on the same held-out questions")
    args = ap.parse_args(argv)
    cfg = load_config_file(args.config)
    cfg.workdir = args.run
    model, tok, examples, task = load_arm(cfg, args.questions, model=args.model, tokenizer="tokenizer")
    if args.repair_steps:
        repair(cfg, model, tok, task, steps=args.repair_steps, guided=args.repair_guided,
               critique=args.repair_critique)
    initial = initial_tokens = None
    if args.attempts:
        from jaxrl_reason.data.datasets import load_examples
        from jaxrl_reason.models.hf_port import load_pretrained
        from jaxrl_reason.tokenization import Tokenizer

        run, _, sub = args.attempts.partition(":")  # only its model, tokenizer and questions: no second task build
        a_model = load_pretrained(os.path.join(run, sub or "final"))
        a_tok = Tokenizer.from_pretrained(os.path.join(run, "tokenizer"))
        a_examples = load_examples(os.path.join(run, "heldout.jsonl"))[:args.questions]
        if [e.question for e in a_examples] != [e.question for e in examples]:
            raise ValueError(f"--attempts {run}: its heldout.jsonl holds other questions than --run {args.run}'s; "
                             "give two arms of one bench seed (they share the held-out set)")
        initial, initial_tokens = attempts_of(cfg, a_model, a_tok, examples, task, seed=args.seed)
    c = probe(cfg, model, tok, examples, task, seed=args.seed, initial=initial, initial_tokens=initial_tokens)
    print(f"| model | round 0 | round 1 | wrong re-solved: fixed / fresh sample right | wrong not re-solved | "
          f"right re-solved: stayed right | right kept | well-formed |\n|---|---|---|---|---|---|---|---|\n"
          f"| {args.model}{f' + {args.repair_steps} repair steps' if args.repair_steps else ''} | "
          f"{c['round0']:.3f} | {c['round1']:.3f} | {c['wrong_redone']}: {c['fixed']} / {c['fresh_fixed']} | "
          f"{c['wrong_kept']} | {c['right_redone']}: {c['right_stayed']} | {c['right_kept']} | "
          f"{c['well_formed']:.3f} |")
    if "checks" in c:
        print("\nThe critic's worked check against the task's, by attempt and verdict (exact / first fault: lines, "
              "copy, mark):\n\n| attempt | " + " | ".join(c["checks"]) + " |\n|---|" + "---|" * len(c["checks"]))
        print("| " + (args.attempts or args.run) + " | " + " | ".join(
            " / ".join(str(v[k]) for k in CHECK_OUTCOMES) for v in c["checks"].values()) + " |")
    return c


if __name__ == "__main__":
    main()
