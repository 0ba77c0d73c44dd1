"""Train a reasoner with RL from verifiable rewards.

    python experiments/train.py                                            # the embedded CPU default
    python experiments/train.py --config experiments/configs/grpo.py --config.rl.steps=20
    python experiments/train.py --config experiments/configs/tiny_default.py --config.workdir=/tmp/run

Phases: (tokenizer) -> (model) -> optional SFT warm-up -> held-out accuracy -> RL -> held-out accuracy,
then a table, a reward/accuracy plot and the final checkpoint in Hugging Face format (`<workdir>/final`).
A workdir that already holds a run resumes it.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time

from absl import app, logging
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny_default.py"),
    "Path to an ml_collections config file (get_config()).")


def split_heldout(pool, n: int, salt: str = "heldout"):
    """-> (train, held-out): exactly `n` distinct held-out questions, those with the lowest hash score, and every
    copy of them removed from train. A plain hash split (`split_train_heldout`) is only `n` in expectation and may
    repeat a question, which on a small question space left far fewer distinct held-out problems than asked."""
    from jaxrl_reason.data.datasets import dedupe, heldout_score, question_key

    distinct = dedupe(pool)
    if len(distinct) <= n:
        raise ValueError(f"config data.heldout_size={n} needs more distinct questions than the {len(distinct)} "
                         "generated; lower heldout_size or raise data.train_size / the task's difficulty")
    heldout = sorted(distinct, key=lambda e: heldout_score(e.question, salt))[:n]
    keys = {question_key(e.question) for e in heldout}
    return [e for e in pool if question_key(e.question) not in keys], heldout


def build_data(cfg):
    """-> (train examples, held-out examples, reward_fn(texts, examples) -> RewardResult, prompt_fn)."""
    from jaxrl_reason.data.prompts import code_solve_prompt, solve_prompt
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.rewards.math import math_reward

    d = cfg.data
    extraction = d.get("answer_extraction", "boxed")

    def math_fn(texts, examples):
        return math_reward(texts, [e.answer for e in examples], extraction=extraction)
    if d.source == "arithmetic":
        from jaxrl_reason.data.arithmetic import ArithmeticConfig, arithmetic_examples

        acfg = ArithmeticConfig(min_digits=d.min_digits, max_digits=d.max_digits, min_operands=d.min_operands,
                                max_operands=d.max_operands, operations=tuple(d.operations),
                                solution_style=d.get("solution_style", "columns"))
        pool = arithmetic_examples(d.train_size + 4 * d.heldout_size, seed=cfg.seed, config=acfg)
        train, heldout = split_heldout(pool, d.heldout_size)
        if d.get("reward", "answer") == "answer_and_steps":
            from jaxrl_reason.data.arithmetic import arithmetic_process_reward

            if acfg.solution_style != "compact":
                raise ValueError("config data.reward='answer_and_steps' checks compact steps; set "
                                 "data.solution_style='compact'")
            return train, heldout, arithmetic_process_reward, solve_prompt
        return train, heldout, math_fn, solve_prompt
    if d.source == "code":
        from jaxrl_reason.data.code_datasets import (as_examples, code_example_reward, generate_function_tasks,
                                                     load_code_jsonl, load_humaneval)

        if d.path == "humaneval":
            problems = load_humaneval()
        elif d.path:
            problems = load_code_jsonl(d.path)
        else:
            problems = generate_function_tasks(d.train_size + 4 * d.heldout_size, seed=cfg.seed)
        train, heldout = split_heldout(as_examples(problems), d.heldout_size)
        return train, heldout, code_example_reward, code_solve_prompt
    if d.source == "reasoning_gym":
        from jaxrl_reason.data.procedural import reasoning_gym_examples, reasoning_gym_reward

        if not d.task:
            raise ValueError("config data.task must name a reasoning_gym task when data.source=reasoning_gym")
        pool = reasoning_gym_examples(d.task, d.train_size + 4 * d.heldout_size, seed=cfg.seed)
        train, heldout = split_heldout(pool, d.heldout_size)
        return train, heldout, lambda t, e: reasoning_gym_reward(t, e), solve_prompt
    if d.source == "file":
        if not d.path:
            raise ValueError("config data.path must be set when data.source=file")
        fields = dict(question_field=d.question_field, answer_field=d.answer_field)
        train = load_examples(d.path, **fields)
        if d.heldout_path:
            heldout = load_examples(d.heldout_path, **fields)[:d.heldout_size]
        else:
            train, heldout = split_heldout(train, d.heldout_size)
        return train, heldout, math_fn, solve_prompt
    raise ValueError(f"config data.source={d.source!r} is unknown; use arithmetic | reasoning_gym | file | code")


def build_tokenizer(cfg, train, workdir, prompt_fn):
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
    from jaxrl_reason.tokenization import Tokenizer

    if cfg.tokenizer.path:
        return Tokenizer.from_pretrained(cfg.tokenizer.path)
    if cfg.model.get("gguf_path"):
        from jaxrl_reason.models.gguf_port import load_gguf_tokenizer

        return load_gguf_tokenizer(cfg.model.gguf_path)
    path = os.path.join(workdir, "tokenizer")
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return Tokenizer.from_pretrained(path)
    # Task text only. Prompts of other methods (the RL^V verify prompt) still encode, byte-level, and the words
    # they must produce as single tokens ("Yes", "No") are forced into the vocabulary; adding their text here
    # changed the vocabulary size, hence the model's initialisation, and moved the default's SFT accuracy from
    # 33.6% to 9.8% -- the tiny model's warm-up is that sensitive to its initial draw.
    texts = []
    for e in train[:5000]:
        texts.append(prompt_fn(e.question))
        texts.append(e.solution or e.answer)
    return train_tiny_tokenizer(texts, path, vocab_size=cfg.tokenizer.vocab_size)


def build_mesh(cfg):
    """The device mesh of `cfg.parallel` (None: one device). First joins the other processes of a multi-host run:
    those named by JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, or, with `parallel.distributed`,
    the ones JAX detects itself (TPU pods, SLURM). So it must run before anything else touches JAX devices."""
    from jaxrl_reason.parallel.mesh import initialize_distributed, optional_mesh

    p = cfg.get("parallel")
    if p is None:
        return None
    initialize_distributed(auto=bool(p.get("distributed", False)))
    return optional_mesh(p)


def load_hf(path, cfg, mesh=None):
    """An HF checkpoint, each tensor placed straight into its shardings when there is a mesh."""
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.parallel.rules import load_pretrained_sharded

    kw = dict(dtype=cfg.model.dtype, compute_dtype=cfg.model.compute_dtype or None)
    model = load_pretrained(path, **kw) if mesh is None else load_pretrained_sharded(path, mesh, **kw)
    return with_runtime_flags(model, cfg)


def with_runtime_flags(model, cfg):
    """Config knobs that change how the model runs, not what it computes (not stored in checkpoints)."""
    if cfg.model.get("remat"):
        import dataclasses

        model.config = dataclasses.replace(model.config, remat=True)
    return model


def save_hf(model, path, **kw):
    """`save_pretrained` from process 0; a model sharded over several processes is gathered first (every
    process joins the gather)."""
    import jax
    from flax import nnx

    from jaxrl_reason.models.hf_port import save_pretrained
    from jaxrl_reason.parallel.mesh import is_main_process, to_host

    if jax.process_count() > 1:
        graphdef, state = nnx.split(model)
        model = nnx.merge(graphdef, jax.tree.map(to_host, state))
    if is_main_process():
        save_pretrained(model, path, **kw)


def build_model(cfg, tokenizer, workdir, mesh=None):
    from jaxrl_reason.models.qwen2 import ModelConfig, init_model

    m = cfg.model
    if m.get("gguf_path"):
        from jaxrl_reason.models.gguf_port import load_gguf
        from jaxrl_reason.parallel.rules import shard_model

        model = with_runtime_flags(load_gguf(m.gguf_path, dtype=m.dtype, compute_dtype=m.compute_dtype or None)[0],
                                   cfg)
        return model if mesh is None else shard_model(model, mesh)
    if m.hf_path:
        return load_hf(m.hf_path, cfg, mesh)
    mc = ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=m.hidden_size,
                     intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
                     num_attention_heads=m.num_attention_heads, num_key_value_heads=m.num_key_value_heads,
                     max_position_embeddings=m.max_position_embeddings, tie_word_embeddings=m.tie_word_embeddings,
                     rope_theta=10000.0, param_dtype=m.dtype, dtype=m.compute_dtype or m.dtype,
                     remat=bool(m.get("remat")))
    if mesh is not None:
        from jaxrl_reason.parallel.rules import init_sharded

        return init_sharded(mc, mesh, seed=cfg.seed)
    return init_model(mc, seed=cfg.seed)


def trainer_config(cfg):
    from jaxrl_reason.train.trainer import TrainerConfig

    r = cfg.rl
    return TrainerConfig(
        steps=r.steps, prompts_per_step=r.prompts_per_step, samples_per_prompt=r.samples_per_prompt,
        max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
        num_iterations=r.num_iterations, num_mini_batches=r.get("num_mini_batches", 1),
        micro_batches=r.micro_batches, lr=r.lr, warmup_steps=r.warmup_steps,
        schedule=r.schedule, weight_decay=r.weight_decay, clip_norm=r.clip_norm,
        dynamic_sampling=r.dynamic_sampling, dynamic_sampling_max_rounds=r.dynamic_sampling_max_rounds,
        seed=cfg.seed, checkpoint_every=r.checkpoint_every, eval_every=r.eval_every,
        eval_batch_size=r.eval_batch_size, progress=r.progress,
        logprob_chunk=r.get("logprob_chunk") or None,  # time chunk of the logits (large vocabularies)
        share_prompts=r.get("share_prompts", True), update_matmuls=r.get("update_matmuls", "auto"))


def plot_curves(history_path, out_png, before, after):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxrl_reason.train.metrics import read_metrics

    rows = [r for r in read_metrics(history_path) if "reward/mean" in r]
    if not rows:
        return
    steps = np.array([r["step"] for r in rows])
    reward = np.array([r["reward/mean"] for r in rows])
    k = max(1, len(rows) // 20)
    smooth = np.convolve(reward, np.ones(k) / k, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, reward, alpha=0.3, label="train reward (per step)")
    ax.plot(steps[k - 1:], smooth, label=f"train reward ({k}-step mean)")
    ax.axhline(before, color="gray", ls="--", label=f"held-out acc. before RL ({before:.1%})")
    ax.axhline(after, color="green", ls="--", label=f"held-out acc. after RL ({after:.1%})")
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    if evals:
        ax.plot(*zip(*evals), "o-", label="held-out accuracy")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)


def check_verify_warmup(cfg) -> None:
    """Fails before any training when the verification warm-up is asked for but cannot run."""
    s = cfg.sft
    if s.get("verify_steps", 0) <= 0:
        return
    if s.steps <= 0:
        raise ValueError("config sft.verify_steps > 0 needs the SFT warm-up (sft.steps > 0): the verification "
                         "warm-up runs right after it, on its questions")
    contrast = verify_contrast_fn(cfg)  # raises on an unknown or unusable sft.verify_contrast
    if s.verify_samples < 0 or (s.verify_samples == 0 and contrast is None):
        raise ValueError(f"config sft.verify_samples={s.verify_samples} must be >= 1 (self-labelled rows), or 0 "
                         "with sft.verify_contrast='slips' (contrast pairs only)")
    if not 0 < s.verify_questions <= s.examples:
        raise ValueError(f"config sft.verify_questions={s.verify_questions} must be in [1, sft.examples={s.examples}]; "
                         "the verification warm-up samples on warm-up questions only (RL's are kept unseen)")


def verify_contrast_fn(cfg, contrast: str = ""):
    """`sft.verify_contrast` (or `contrast`) as the warm-up's `contrast_fn`: None for "none", the data source's
    one-slip copies of worked solutions for "slips" (arithmetic only)."""
    contrast = contrast or cfg.sft.get("verify_contrast", "none")
    if contrast == "none":
        return None
    if contrast != "slips":
        raise ValueError(f"config sft.verify_contrast={contrast!r} is unknown; use none | slips")
    if cfg.data.source != "arithmetic":
        raise ValueError(f"config sft.verify_contrast='slips' needs data.source='arithmetic' (its worked solutions "
                         f"get one slip each), got {cfg.data.source!r}; set sft.verify_contrast='none'")
    style = cfg.data.get("solution_style", "columns")
    if style not in ("compact", "rewrite"):
        raise ValueError(f"config sft.verify_contrast='slips' needs data.solution_style 'compact' or 'rewrite', got "
                         f"{style!r}")
    from jaxrl_reason.data.arithmetic import slipped_example_solution

    return functools.partial(slipped_example_solution, style=style)


def run_verify_warmup(cfg, model, tokenizer, train, reward_fn, prompt_fn, workdir) -> dict:
    """The self-labelled verification warm-up (`train/verify_warmup.py`) on the SFT slice's first questions."""
    from jaxrl_reason.parallel.mesh import is_main_process
    from jaxrl_reason.train.metrics import MetricsWriter
    from jaxrl_reason.train.verify_warmup import verify_warmup

    s = cfg.sft
    writer = MetricsWriter(os.path.join(workdir, "logs_verify_warmup"), enabled=is_main_process())
    t = time.time()
    res = verify_warmup(model, tokenizer, train[:s.verify_questions], reward_fn, steps=s.verify_steps,
                        batch_size=s.verify_batch_size, solve_batch_size=s.verify_solve_rows, lr=s.verify_lr,
                        samples_per_question=s.verify_samples, max_new_tokens=cfg.rl.max_new_tokens,
                        balance=s.get("verify_balance", "subsample"), contrast_fn=verify_contrast_fn(cfg),
                        temperature=cfg.rl.temperature, seed=cfg.seed, progress=cfg.rl.progress, writer=writer,
                        prompt_fn=prompt_fn)
    writer.close()
    res.pop("history")
    res["seconds"] = time.time() - t
    b, a = res["before"]["balanced_acc"], res["after"]["balanced_acc"]
    print(f"verification warm-up: {res['rows']} self-labelled + {res['contrast_rows']} contrast rows; held-out balanced accuracy {b:.1%} -> {a:.1%}")
    return res


def run(cfg) -> dict:
    mesh = build_mesh(cfg)  # first: joining other processes must precede any other use of JAX devices
    from jaxrl_reason.methods import make_method
    from jaxrl_reason.parallel.mesh import is_main_process
    from jaxrl_reason.train.metrics import MetricsWriter
    from jaxrl_reason.train.trainer import Trainer, evaluate_accuracy, sft_train

    def dump_results():
        if is_main_process():
            json.dump(results, open(results_path, "w"), indent=2)

    t_start = time.time()
    workdir = os.path.abspath(cfg.workdir)
    os.makedirs(workdir, exist_ok=True)
    results_path = os.path.join(workdir, "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    if mesh is not None:
        results["mesh"] = dict(mesh.shape)

    check_verify_warmup(cfg)
    train, heldout, reward_fn, prompt_fn = build_data(cfg)
    tokenizer = build_tokenizer(cfg, train, workdir, prompt_fn)
    if is_main_process():
        # The exact held-out problems, so that `experiments/evaluate.py --data <workdir>/heldout.jsonl` scores
        # test-time strategies on the same split the before/after table uses.
        from jaxrl_reason.data.datasets import write_jsonl

        write_jsonl(heldout, os.path.join(workdir, "heldout.jsonl"))
    print(f"data: {len(train)} train / {len(heldout)} held-out problems; vocab {tokenizer.vocab_size}")

    sft_dir = os.path.join(workdir, "sft_model")
    if cfg.sft.steps > 0 and os.path.exists(os.path.join(sft_dir, "config.json")):
        model = load_hf(sft_dir, cfg, mesh)
    else:
        model = build_model(cfg, tokenizer, workdir, mesh)
        if cfg.sft.steps > 0:
            writer = MetricsWriter(os.path.join(workdir, "logs_sft"), enabled=is_main_process())
            t = time.time()
            sft_train(model, tokenizer, train[:cfg.sft.examples], steps=cfg.sft.steps, batch_size=cfg.sft.batch_size,
                      lr=cfg.sft.lr, warmup_steps=cfg.sft.warmup_steps, seed=cfg.seed, writer=writer,
                      progress=cfg.rl.progress, prompt_fn=prompt_fn, mesh=mesh)
            writer.close()
            results["sft_seconds"] = time.time() - t
            if cfg.sft.get("verify_steps", 0) > 0:
                results["verify_warmup"] = run_verify_warmup(cfg, model, tokenizer, train, reward_fn, prompt_fn,
                                                             workdir)
            save_hf(model, sft_dir)
    rl_train = train[cfg.sft.examples:] if cfg.sft.steps > 0 else train

    def heldout_acc(params=None):
        from flax import nnx
        return evaluate_accuracy(model, params if params is not None else nnx.state(model), tokenizer, heldout,
                                 reward_fn, max_new_tokens=cfg.rl.max_new_tokens,
                                 batch_size=cfg.rl.eval_batch_size, progress=cfg.rl.progress, prompt_fn=prompt_fn,
                                 mesh=mesh)

    if "before" not in results:
        results["before"] = heldout_acc()
        dump_results()
    print(f"held-out accuracy before RL: {results['before']['accuracy']:.1%}")

    method = make_method(cfg.method if cfg.method.max_len else {**cfg.method.to_dict(),
                                                                 "max_len": cfg.rl.max_new_tokens})
    trainer = Trainer(model, tokenizer, method, rl_train, reward_fn, trainer_config(cfg), workdir,
                      eval_examples=heldout, prompt_fn=prompt_fn, mesh=mesh)
    t = time.time()
    trainer.run()
    results["rl_seconds"] = results.get("rl_seconds", 0.0) + time.time() - t
    results["rl_steps"] = cfg.rl.steps
    results["after"] = heldout_acc(trainer.state.params)
    trainer.close()

    final = os.path.join(workdir, "final")
    save_hf(model, final, generation_config={"eos_token_id": list(tokenizer.stop_ids),
                                             "pad_token_id": tokenizer.pad_id})
    results["total_seconds_this_run"] = time.time() - t_start
    if is_main_process():
        tokenizer.save_pretrained(final)
        plot_curves(os.path.join(workdir, "logs"), os.path.join(workdir, "rl_curve.png"),
                    results["before"]["accuracy"], results["after"]["accuracy"])
    dump_results()

    b, a = results["before"], results["after"]
    print()
    print(f"| held-out ({b['num_examples']} problems) | accuracy | mean length | finished |")
    print("|---|---|---|---|")
    before_label = "before RL (after SFT warm-up)" if cfg.sft.steps > 0 else "before RL"
    print(f"| {before_label} | {b['accuracy']:.1%} | {b['mean_length']:.1f} | {b['finished_frac']:.0%} |")
    print(f"| after {cfg.rl.steps} RL steps ({cfg.method.name}/{cfg.method.estimator}) | {a['accuracy']:.1%} | "
          f"{a['mean_length']:.1f} | {a['finished_frac']:.0%} |")
    print(f"\nchange: {100 * (a['accuracy'] - b['accuracy']):+.1f} points; RL {results['rl_seconds']:.0f} s; "
          f"final HF checkpoint: {final}; plot: {os.path.join(workdir, 'rl_curve.png')}")
    return results


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
    run(_CONFIG.value)


if __name__ == "__main__":
    app.run(main)
