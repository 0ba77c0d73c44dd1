"""Does a calculator help a tiny policy? 3-digit x 3-digit multiplication, which a tiny model trained from scratch
cannot compute in its head but can hand to `<calculator>a * b</calculator>` and copy back.

Two arms, the same model shape, data, SFT steps, RL steps and learning rates, per seed:
- no_tool: SFT on `a * b = r` then the boxed answer; GRPO with single-turn rollouts;
- tool:    SFT on the demonstration `<calculator>a * b</calculator>` [tool turn: r] `The answer is \\boxed{r}.`
           (the tool turn masked from the loss); GRPO with multi-turn rollouts and the calculator.
Greedy held-out accuracy before and after RL (the tool arm with its tool); per RL step, tool calls per sample and
their success rate. Writes <out>/<arm>_seed<k>.json; `--plot` draws the comparison from those files.

    python experiments/research/tool_arithmetic.py --arm tool --seeds 0 1 2
    python experiments/research/tool_arithmetic.py --arm no_tool --seeds 0 1 2
    python experiments/research/tool_arithmetic.py --plot
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import tempfile
import time

import numpy as np

ARITH = dict(min_digits=3, max_digits=3, operations=("*",), min_operands=2, max_operands=2,
             solution_style="compact")
MAX_NEW = 96  # tokens after the prompt, tool turns included (a tool answer is ~50), the same for both arms


def boxed_reward(texts, examples):
    from jaxrl_reason.rewards.base import RewardResult

    scores = []
    for t, e in zip(texts, examples):
        found = re.findall(r"\\boxed\{([^{}]*)\}", t)
        scores.append(float(bool(found) and found[-1].strip() == e.answer))
    return RewardResult(np.asarray(scores, np.float32), [{} for _ in texts])


def run_seed(arm: str, seed: int, args) -> dict:
    import jax
    from flax import nnx

    from jaxrl_reason.data.arithmetic import ArithmeticConfig, arithmetic_examples
    from jaxrl_reason.data.prompts import solve_prompt
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
    from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
    from jaxrl_reason.models.qwen2 import ModelConfig, init_model
    from jaxrl_reason.rollout import ToolConfig
    from jaxrl_reason.rollout.multiturn import demo_solution
    from jaxrl_reason.train.trainer import (Trainer, TrainerConfig, evaluate_accuracy, evaluate_tool_accuracy,
                                            sft_train)

    cfg = ArithmeticConfig(**ARITH)
    train = arithmetic_examples(args.train_size, seed=0, config=cfg)
    seen = {e.question for e in train}
    heldout = [e for e in arithmetic_examples(args.heldout + 64, seed=1, config=cfg) if e.question not in seen]
    heldout = heldout[:args.heldout]
    tools = ToolConfig(tools=("calculator",), max_turns=3, max_turn_tokens=32, max_obs_tokens=24)
    env = tools.make_env(solve_prompt)()
    tool_prompt = env.first_message

    tmp = tempfile.mkdtemp()
    # one tokenizer for both arms: trained on both arms' prompts and solutions, and the tool turn's template
    from jaxrl_reason.tokenization import Tokenizer  # noqa: F401  (render_env_turn needs a template; see below)
    base = [solve_prompt(e.question) for e in train[:400]] + [e.solution for e in train[:400]]
    base += [tool_prompt(e.question) + f"<calculator>{e.meta['expression']}</calculator>" for e in train[:400]]
    tok = train_tiny_tokenizer(base, os.path.join(tmp, "tok"), vocab_size=384)

    def demo(e):
        text, spans = demo_solution([f"<calculator>{e.meta['expression']}</calculator>", e.answer,
                                     f"The answer is \\boxed{{{e.answer}}}."], tok, tools.observation_role)
        return dataclasses.replace(e, solution=text, meta={**e.meta, "spans": spans})

    sft_examples = train[:args.sft_examples]
    rl_examples = train[args.sft_examples:]
    mcfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=288, max_position_embeddings=512,
                       tie_word_embeddings=True, rope_theta=10000.0)
    model = init_model(mcfg, seed=seed)
    t0 = time.time()
    if arm == "tool":
        sft_train(model, tok, [demo(e) for e in sft_examples], steps=args.sft_steps, batch_size=16, lr=3e-3,
                  seed=seed, warmup_steps=10, progress=False, prompt_fn=tool_prompt,
                  span_weights=lambda e: e.meta["spans"])
    else:
        sft_train(model, tok, sft_examples, steps=args.sft_steps, batch_size=16, lr=3e-3, seed=seed,
                  warmup_steps=10, progress=False, prompt_fn=solve_prompt)
    t_sft = time.time() - t0

    def evaluate(params):
        if arm == "tool":
            return evaluate_tool_accuracy(model, params, tok, heldout, boxed_reward, tools.make_env(solve_prompt),
                                          tools, max_new_tokens=MAX_NEW)
        return evaluate_accuracy(model, params, tok, heldout, boxed_reward, max_new_tokens=MAX_NEW,
                                 prompt_fn=solve_prompt)

    before = evaluate(nnx.state(model))
    rl = TrainerConfig(steps=args.rl_steps, prompts_per_step=8, samples_per_prompt=4, max_new_tokens=MAX_NEW,
                       temperature=1.0, lr=args.rl_lr, checkpoint_every=0, progress=False, seed=seed)
    trainer = Trainer(model, tok, GRPO("grpo", PolicyLossConfig()), rl_examples, boxed_reward, rl,
                      os.path.join(tmp, "rl"), prompt_fn=solve_prompt, tools=tools if arm == "tool" else None)
    t1 = time.time()
    history = trainer.run()
    t_rl = time.time() - t1
    after = evaluate(trainer.state.params)
    trainer.close()
    keep = ("reward/mean", "tools/calls_per_sample", "tools/call_success", "tools/turns_mean", "length/mean")
    return {"arm": arm, "seed": seed, "before": before, "after": after, "sft_seconds": t_sft, "rl_seconds": t_rl,
            "steps": [{k: h[k] for k in keep if k in h} for h in history], "args": vars(args),
            "jax": jax.__version__}


def plot(out_dir: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.load(open(os.path.join(out_dir, f))) for f in sorted(os.listdir(out_dir)) if f.endswith(".json")]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    for r in runs:
        colour = "C0" if r["arm"] == "tool" else "C1"
        steps = np.arange(1, len(r["steps"]) + 1)
        ax[0].plot(steps, [s["reward/mean"] for s in r["steps"]], colour, alpha=0.7,
                   label=f"{r['arm']} seed {r['seed']}")
        if r["arm"] == "tool":
            ax[1].plot(steps, [s["tools/calls_per_sample"] for s in r["steps"]], colour, alpha=0.7)
            ax[2].plot(steps, [s["tools/call_success"] for s in r["steps"]], colour, alpha=0.7)
    ax[0].set(title="train reward (RL step)", xlabel="RL step")
    ax[1].set(title="tool calls per sample", xlabel="RL step")
    ax[2].set(title="tool call success rate", xlabel="RL step", ylim=(0, 1.05))
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "tool_arithmetic.png"), dpi=110)
    print("| arm | seed | held-out before RL | after RL | calls / question | call success |")
    for r in sorted(runs, key=lambda r: (r["arm"], r["seed"])):
        a = r["after"]
        print(f"| {r['arm']} | {r['seed']} | {r['before']['accuracy']:.1%} | {a['accuracy']:.1%} | "
              f"{a.get('calls_per_question', 0):.2f} | {a.get('call_success', float('nan')):.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", choices=("tool", "no_tool"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--train-size", type=int, default=4000)
    ap.add_argument("--sft-examples", type=int, default=3000)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--rl-steps", type=int, default=20)
    ap.add_argument("--rl-lr", type=float, default=2e-5)
    ap.add_argument("--heldout", type=int, default=128)
    ap.add_argument("--out", default="runs/tool_arithmetic")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    if args.plot:
        return plot(args.out)
    os.makedirs(args.out, exist_ok=True)
    for seed in args.seeds:
        res = run_seed(args.arm, seed, args)
        json.dump(res, open(os.path.join(args.out, f"{args.arm}_seed{seed}.json"), "w"), indent=1)
        print(json.dumps({k: res[k] for k in ("arm", "seed", "before", "after", "sft_seconds", "rl_seconds")}))


if __name__ == "__main__":
    main()
