"""Where does one self-refinement round gain or lose? A probe of a saved testbed model's critique + guided re-solve.

    python experiments/research/refine_probe.py --config experiments/configs/testbed_latin_cure_check.py \
        --run runs/bench_cure_check_s0/seed0/grpo --model sft_model [--questions 128] \
        [--repair-steps 150 --repair-guided 2000 --repair-critique 2000]

One round of `inference.refine.self_refine` (verdict generated, temperature `rl.temperature`) from one sample per
question, then the round's outcome split by the first sample's correctness and the verdict: wrong attempts
re-solved and how many of those came out right (fixed), right attempts re-solved and how many stayed right (kept).
Beside it the baseline a guided re-solve has to beat: one fresh, unguided sample of the same wrongly-answered
questions. With `--repair-steps`, first a short SFT stage on the model (guided re-solve rows and worked-check
critique rows of the config's formats, `data.testbed.auxiliary_rows`, plus as many worked solutions), to see
whether a skill the warm-up lost comes back. Prints a table; writes nothing.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from against_grpo import load_arm  # noqa: E402
from bench_cure import critique_budget  # noqa: E402
from jaxrl_reason.configs import load_config_file  # noqa: E402


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


def probe(cfg, model, tokenizer, examples, task, *, seed: int = 0, generate=None) -> dict:
    """One refinement round and a fresh-sample baseline -> counts (see the module docstring). `generate`
    (`inference.refine.Generate`) replaces the model's sampler, for a scripted test."""
    from jaxrl_reason.inference.refine import VERDICT_NO_ERROR, decode_ids, graded_right, make_generate, self_refine

    temp = cfg.rl.temperature
    r = self_refine(model, tokenizer, examples, task.reward_fn, rounds=1, max_new_tokens=cfg.rl.max_new_tokens,
                    critique_max_new_tokens=critique_budget(cfg),
                    temperature=temp, seed=seed, guided_layout=cfg.data.guided_layout,
                    critique_format=cfg.data.critique_format, generate=generate)
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
    return {"questions": len(examples), "round0": float(right.mean()), "round1": float(after.mean()),
            "wrong_redone": len(wrong_redo), "fixed": int(after[wrong_redo].sum()),
            "fresh_fixed": fresh_right, "wrong_kept": int((~right & ~redo).sum()),
            "right_redone": int((right & redo).sum()), "right_stayed": int((right & redo & after).sum()),
            "right_kept": int((right & ~redo).sum()), "well_formed": float(r.well_formed[0].mean())}


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
    args = ap.parse_args(argv)
    cfg = load_config_file(args.config)
    cfg.workdir = args.run
    model, tok, examples, task = load_arm(cfg, args.questions, model=args.model, tokenizer="tokenizer")
    if args.repair_steps:
        repair(cfg, model, tok, task, steps=args.repair_steps, guided=args.repair_guided,
               critique=args.repair_critique)
    c = probe(cfg, model, tok, examples, task, seed=args.seed)
    print(f"| model | round 0 | round 1 | wrong re-solved: fixed / fresh sample right | wrong not re-solved | "
          f"right re-solved: stayed right | right kept | well-formed |\n|---|---|---|---|---|---|---|---|\n"
          f"| {args.model}{f' + {args.repair_steps} repair steps' if args.repair_steps else ''} | "
          f"{c['round0']:.3f} | {c['round1']:.3f} | {c['wrong_redone']}: {c['fixed']} / {c['fresh_fixed']} | "
          f"{c['wrong_kept']} | {c['right_redone']}: {c['right_stayed']} | {c['right_kept']} | "
          f"{c['well_formed']:.3f} |")
    return c


if __name__ == "__main__":
    main()
