"""One training run, start to end: (config check) -> (mesh) -> data -> tokenizer -> policy and its warm-ups ->
held-out accuracy -> RL -> held-out accuracy -> final HF checkpoint, plot and table. A workdir that already holds a
run resumes it."""
from __future__ import annotations

import json
import os
import time

from jaxrl_reason.experiment.config import read_run_config
from jaxrl_reason.experiment.data import build_data, row_formats
from jaxrl_reason.experiment.model import build_mesh, build_tokenizer, save_hf
from jaxrl_reason.experiment.report import plot_curves, results_table
from jaxrl_reason.experiment.warmup import check_verify_warmup, tokenizer_corpus, warmed_up_policy


def start(cfg):
    """Everything a run checks before it touches a device or the workdir: -> (RunConfig, method). Raises on an
    unknown key in any section (naming it and the valid ones), an unknown method / estimator or one of their
    knobs, a method that cannot train on the tools' multi-turn rows, and a warm-up that cannot run."""
    from jaxrl_reason.methods import make_method
    from jaxrl_reason.methods.base import check_tool_rows

    rc = read_run_config(cfg)
    method = make_method(rc.method)
    check_tool_rows(method, rc.tools.tools)
    check_verify_warmup(rc)
    return rc, method


def check_solution_budget(rc, tokenizer, task) -> None:
    """Fails before any training when a testbed task's worked solutions take more tokens than the policy may
    generate (`rl.max_new_tokens`): every sample would be cut before its answer and score 0."""
    from jaxrl_reason.data.testbed import TASK_MODULES

    if rc.data.source not in TASK_MODULES:
        return
    need = max((len(tokenizer.encode(e.solution)) for e in task.train[:64]), default=0)
    if need > rc.rl.max_new_tokens:
        raise ValueError(f"config rl.max_new_tokens={rc.rl.max_new_tokens} is shorter than a {rc.data.source} "
                         f"worked solution under this tokenizer (up to {need} tokens): the policy's answers would "
                         f"be cut before their box; set it to at least {need}")


def run(cfg) -> dict:
    """Trains the run `cfg` describes (a ConfigDict, mapping or RunConfig) and returns its results.json."""
    rc, method = start(cfg)
    mesh = build_mesh(rc.parallel)  # before any other use of JAX devices: it may join other processes
    from flax import nnx

    from jaxrl_reason.data.datasets import write_jsonl
    from jaxrl_reason.parallel.mesh import is_main_process
    from jaxrl_reason.train.trainer import Trainer, evaluate_accuracy, evaluate_tool_accuracy

    t_start = time.time()
    workdir = os.path.abspath(rc.workdir)
    os.makedirs(workdir, exist_ok=True)
    results_path = os.path.join(workdir, "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    results["mesh"] = dict(mesh.shape)

    def dump_results():
        if is_main_process():
            json.dump(results, open(results_path, "w"), indent=2)

    task = build_data(rc.data, rc.setup_seed)
    corpus, corpus_prompt_fn = tokenizer_corpus(rc, task)
    tokenizer = build_tokenizer(rc, corpus, workdir, corpus_prompt_fn)
    if is_main_process():
        # The exact held-out problems, so that `experiments/evaluate.py --data <workdir>/heldout.jsonl` scores
        # test-time strategies on the same split the before/after table uses.
        write_jsonl(task.heldout, os.path.join(workdir, "heldout.jsonl"))
    print(f"data: {len(task.train)} train / {len(task.heldout)} held-out problems; vocab {tokenizer.vocab_size}")
    method.check(rc, task, tokenizer)  # each part checks itself: the method its budgets against the task's rows
    check_solution_budget(rc, tokenizer, task)

    model, warmup_report = warmed_up_policy(rc, tokenizer, task, workdir, mesh)
    results.update(warmup_report)
    rl_train = task.train[rc.sft.examples:] if rc.sft.steps > 0 else task.train

    def heldout_acc(params=None):
        if rc.tools.enabled:
            return evaluate_tool_accuracy(model, params if params is not None else nnx.state(model), tokenizer,
                                          task.heldout, task.reward_fn, rc.tools.make_env(task.prompt_fn), rc.tools,
                                          max_new_tokens=rc.rl.max_new_tokens, batch_size=rc.rl.eval_batch_size,
                                          mesh=mesh)
        return evaluate_accuracy(model, params if params is not None else nnx.state(model), tokenizer, task.heldout,
                                 task.reward_fn, max_new_tokens=rc.rl.max_new_tokens,
                                 batch_size=rc.rl.eval_batch_size, progress=rc.rl.progress,
                                 prompt_fn=task.prompt_fn, mesh=mesh)

    if "before" not in results:
        results["before"] = heldout_acc()
        dump_results()
    print(f"held-out accuracy before RL: {results['before']['accuracy']:.1%}")

    trainer = Trainer(model, tokenizer, method, rl_train, task.reward_fn, rc.rl, workdir,
                      eval_examples=task.heldout, prompt_fn=task.prompt_fn, mesh=mesh,
                      formats=row_formats(rc.data), tools=rc.tools, lora=rc.lora)
    t = time.time()
    trainer.run()
    results["rl_seconds"] = results.get("rl_seconds", 0.0) + time.time() - t
    results["rl_steps"] = rc.rl.steps
    results["after"] = heldout_acc(trainer.state.params)
    trainer.close()

    final = os.path.join(workdir, "final")
    # A LoRA policy is saved merged, with its PEFT adapter in final/adapter over the model RL started from.
    adapter_base = os.path.join(workdir, "sft_model") if rc.sft.steps > 0 else rc.model.hf_path
    save_hf(model, final, generation_config={"eos_token_id": list(tokenizer.stop_ids),
                                             "pad_token_id": tokenizer.pad_id},
            **({"adapter_base": adapter_base} if rc.lora.enabled else {}))
    results["total_seconds_this_run"] = time.time() - t_start
    plot = os.path.join(workdir, "rl_curve.png")
    if is_main_process():
        tokenizer.save_pretrained(final)
        plot_curves(os.path.join(workdir, "logs"), plot, results["before"]["accuracy"], results["after"]["accuracy"])
    dump_results()

    b, a = results["before"], results["after"]
    print()
    print(results_table(results, rc))
    print(f"\nchange: {100 * (a['accuracy'] - b['accuracy']):+.1f} points; RL {results['rl_seconds']:.0f} s; "
          f"final HF checkpoint: {final}; plot: {plot}")
    return results

