"""One GRPO step, end to end: generation + reward + update, through the real Trainer.

    python experiments/bench/train_step.py [--steps 5] [--vocab 4096] [--trl]

Workload (as in ../shared/peers/trl/bench_trl_grpo.py): the sampler benchmark's tiny Qwen2 (hidden 256,
4 layers, 4/2 heads, FFN 1024, tied embeddings, random weights), 8 prompts x 8 samples, 16-token prompts,
exactly 64 completion tokens (no stop token), temperature 1, beta = 0, one update per batch, AdamW, float32.
The reward is the math verifier on the decoded completions (a random model scores 0; compute is unchanged).
Reported: completion tokens per second of the whole step, the split between sampling+reward / batch
building / update, and the peak RSS. Steps 2..N are timed (step 1 includes compilation).
With `--trl` (after `pip install -e ".[bench]"`), TRL's GRPOTrainer runs the same workload in a fresh child
process of this run (after ours, on the same idle cores) and the ratio is printed; otherwise the TRL figure
recorded in ../shared/peers is shown for orientation only.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.experiment.perf import (bench_model, matmul_weights, sampler_floor,  # noqa: E402
                                          through_matmuls, time_runs)

PROMPT_LEN, NEW_TOKENS, Q, G = 16, 64, 8, 8
TRL_RECORDED = dict(step_s=3.36, gen_s=1.38, update_s=1.93, tok_s=1218.2)  # ../shared/peers/trl/results


class DigitTokenizer:
    """Stands in for a tokenizer on a random-weight model: a question maps to 16 fixed ids, a completion id
    sequence decodes to text the math verifier can read. No stop ids, so every completion has 64 tokens."""

    def __init__(self, vocab):
        self.vocab, self.pad_id, self.eos_id, self.stop_ids = vocab, 0, 0, ()

    def render_prompt(self, text, **kw):
        return text

    def encode(self, text):
        rng = np.random.default_rng(abs(hash(text)) % (2**32))
        return rng.integers(1, self.vocab, PROMPT_LEN).tolist()

    def batch_decode(self, tokens, lengths=None, skip_special_tokens=True):
        lengths = [len(t) for t in tokens] if lengths is None else lengths
        return [" ".join(str(int(i) % 100) for i in t[:n]) + f" \\boxed{{{int(t[0]) % 200}}}"
                for t, n in zip(tokens, lengths)]


def peak_rss_mib():
    # VmHWM, not ru_maxrss: a forked-and-exec'd child (the TRL run) inherits its parent's ru_maxrss.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_ours(vocab, steps, scan_layers=True, head_at_trained_only=True, scan_residuals="matmuls", mesh=None):
    from jaxrl_reason.data.datasets import Example
    from jaxrl_reason.methods.grpo import GRPO
    from jaxrl_reason.rewards.math import math_reward
    from jaxrl_reason.train.trainer import Trainer, TrainerConfig

    rng = np.random.default_rng(0)
    examples = []
    for i in range(Q * (steps + 1)):
        a, b = rng.integers(0, 100, 2)
        examples.append(Example(f"What is {a}+{b}? Put the answer in \\boxed{{}}.", str(a + b), str(i)))
    cfg = TrainerConfig(steps=steps, prompts_per_step=Q, samples_per_prompt=G, max_new_tokens=NEW_TOKENS, lr=1e-6,
                        checkpoint_every=0, progress=False, head_at_trained_only=head_at_trained_only)
    reward = lambda texts, ex: math_reward(texts, [e.answer for e in ex])
    with tempfile.TemporaryDirectory() as tmp:
        model = bench_model(vocab, scan_layers=scan_layers, scan_residuals=scan_residuals)
        trainer = Trainer(model, DigitTokenizer(vocab), GRPO("grpo"), examples,
                          reward, cfg, tmp, mesh=mesh)
        trainer.save = lambda: None  # checkpoint I/O is not part of a step
        hist = trainer.run()
        trainer.close()
    timed = hist[1:] or hist
    med = lambda k: statistics.median(h[k] for h in timed)
    return dict(step_s=med("time/step"), gen_s=med("time/sample_and_reward"), build_s=med("time/build"),
                update_s=med("time/update"), first_step_s=hist[0]["time/step"],
                tok_s=Q * G * NEW_TOKENS / med("time/step"), peak_rss_mib=peak_rss_mib())


def update_floor(cfg, repeats=3):
    """A lower bound on any trainer's update for this workload on this machine, measured with XLA: the gradient
    (w.r.t. every weight and the input) of the step's dense matmuls alone -- q/k/v, o, gate/up, down per layer over
    all Q x G x (prompt + completion) rows, and the LM head over the completion rows; no attention, norms,
    softmax or optimizer. The faster of XLA:CPU's two matmul kernel families (YNNPACK fusions, its own dots) counts.
    Every row carries its prompt here, as in TRL; with shared prompts (`rl.prefix`) ours does fewer matmuls."""
    import jax
    import jax.numpy as jnp

    from jaxrl_reason.train.update import training_compiler_options

    weights = matmul_weights(cfg)
    rows, t, h = Q * G, PROMPT_LEN + NEW_TOKENS, cfg.hidden_size
    x = jax.random.normal(jax.random.PRNGKey(1), (rows * t, h))

    def loss(w, x):
        layers, head = w
        x = through_matmuls(x, layers, cfg)
        completion = x.reshape(rows, t, h)[:, PROMPT_LEN:].reshape(rows * NEW_TOKENS, h)
        return jnp.sum(jnp.dot(completion, head))

    best = float("inf")
    for kernels in ("ynn", "eigen"):
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)), compiler_options=training_compiler_options(kernels))
        jax.block_until_ready(grad(weights, x))
        best = min(best, time_runs(lambda: jax.block_until_ready(grad(weights, x)), repeats))
    return best


def prepare_trl_inputs(vocab, tmp):
    """The random model (saved as an HF directory) and a small tokenizer for TRL, written by this process."""
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
    from jaxrl_reason.models.hf_port import save_pretrained

    save_pretrained(bench_model(vocab), os.path.join(tmp, "m"))
    texts = [f"What is {a}+{b}? {a + b}" for a, b in trl_questions()]
    train_tiny_tokenizer(texts * 20, os.path.join(tmp, "tok"), vocab_size=min(vocab, 512))


def trl_questions():
    return [tuple(map(int, ab)) for ab in np.random.default_rng(0).integers(0, 100, (64, 2))]


def bench_trl(tmp, steps):
    """TRL's GRPOTrainer on the same random model and settings. Runs in a fresh child process
    (`--trl-child`): in this process JAX's runtime threads would slow torch down and understate TRL."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--trl-child", tmp, "--steps", str(steps)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"TRL child failed (exit {out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def trl_child(tmp, steps):
    import json

    import torch
    import transformers
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from jaxrl_reason.rewards.math import math_reward

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(tmp, "m"))
    hf_tok = transformers.AutoTokenizer.from_pretrained(os.path.join(tmp, "tok"))
    rows = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in trl_questions()]

    def reward(prompts, completions, answer, **kw):
        return list(map(float, math_reward(completions, answer).scores))

    times = []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t)

    args = GRPOConfig(output_dir=os.path.join(tmp, "trl_out"), per_device_train_batch_size=Q * G,
                      gradient_accumulation_steps=1, num_generations=G, max_completion_length=NEW_TOKENS,
                      max_steps=steps, beta=0.0, learning_rate=1e-6, use_cpu=True, bf16=False, report_to=[],
                      logging_steps=1, generation_kwargs={"min_new_tokens": NEW_TOKENS},
                      gradient_checkpointing=False, save_strategy="no", disable_tqdm=True, log_level="error")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=hf_tok, callbacks=[Timer()])
    trainer.train()
    step = statistics.median(times[1:] or times)
    print(json.dumps(dict(step_s=step, tok_s=Q * G * NEW_TOKENS / step, peak_rss_mib=peak_rss_mib())))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--trl", action="store_true",
                    help="also run TRL's GRPOTrainer (needs `pip install -e .[bench]`), in a child process")
    ap.add_argument("--trl-child", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--scan-layers", type=int, default=1, choices=(0, 1),
                    help="1: the training forward scans over the stacked layers (the default); 0: unrolled")
    ap.add_argument("--floor", action="store_true",
                    help="also measure this machine's floor for the step (its matmuls alone: the sampler's as in "
                         "bench/sampler.py --floor, the update's gradient) and the largest ratio over TRL it allows")
    ap.add_argument("--head-at-trained-only", type=int, default=1, choices=(0, 1),
                    help="1: the update's LM head runs only at trained positions (the default); 0: at every one")
    ap.add_argument("--scan-residuals", default="matmuls", choices=("matmuls", "all"),
                    help="what the scanned layers keep for the backward (ModelConfig.scan_residuals)")
    ap.add_argument("--mesh", default="",
                    help="train on a mesh, e.g. data=8 or fsdp=8 (simulated CPU devices: "
                         "XLA_FLAGS=--xla_force_host_platform_device_count=8 NPROC=16); empty: one device")
    args = ap.parse_args()
    if args.trl_child:
        return trl_child(args.trl_child, args.steps)
    mesh = None
    if args.mesh:
        from jaxrl_reason.parallel.mesh import make_mesh

        mesh = make_mesh({k: int(v) for k, v in (kv.split("=") for kv in args.mesh.split(","))})
    ours = bench_ours(args.vocab, args.steps, bool(args.scan_layers), bool(args.head_at_trained_only),
                      args.scan_residuals, mesh)
    print(f"GRPO step: {Q} prompts x {G} samples, {PROMPT_LEN}-token prompts, {NEW_TOKENS} completion tokens, "
          f"vocab {args.vocab}; median of steps 2..{args.steps}" + (f"; mesh {args.mesh}" if args.mesh else ""))
    print(f"{'impl':<22}{'s/step':>8}{'gen+rew s':>10}{'build s':>9}{'update s':>9}{'tok/s':>9}{'peak RSS MiB':>14}")
    print(f"{'jaxrl_reason':<22}{ours['step_s']:8.2f}{ours['gen_s']:10.2f}{ours['build_s']:9.2f}"
          f"{ours['update_s']:9.2f}{ours['tok_s']:9.0f}{ours['peak_rss_mib']:14.0f}")
    print(f"(first step incl. compilation: {ours['first_step_s']:.1f} s)")
    trl = None
    if args.trl:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                prepare_trl_inputs(args.vocab, tmp)
                trl = bench_trl(tmp, args.steps)
        except Exception as e:  # noqa: BLE001 - the baseline is optional; say why it did not run
            print(f"TRL baseline did not run: {type(e).__name__}: {e}")
    if trl:
        print(f"{'trl.GRPOTrainer 1.16':<22}{trl['step_s']:8.2f}{'':>10}{'':>9}{'':>9}{trl['tok_s']:9.0f}"
              f"{trl['peak_rss_mib']:14.0f}")
        print(f"ratio (ours / TRL, same run): {ours['tok_s'] / trl['tok_s']:.2f}x")
    else:
        r = TRL_RECORDED
        print(f"{'TRL 1.16 (recorded)':<22}{r['step_s']:8.2f}{r['gen_s']:10.2f}{'':>9}{r['update_s']:9.2f}"
              f"{r['tok_s']:9.0f}   <- ../shared/peers/trl/results, another run: orientation only")
        print(f"ratio vs recorded TRL: {ours['tok_s'] / r['tok_s']:.2f}x (not measured in the same run)")
    if args.floor:
        cfg = bench_model(args.vocab).config
        fs = sampler_floor(cfg, Q * G, PROMPT_LEN, NEW_TOKENS, 3)
        fu = update_floor(cfg)
        floor = fs["floor_s"] + fu
        print(f"floor (matmuls alone, XLA, this machine): sampling {fs['floor_s']:.2f} s "
              f"(prefill {fs['prefill_mm_s']:.2f}, decode {fs['decode_mm_s']:.2f}, KV reads {fs['kv_read_s']:.2f}) "
              f"+ update {fu:.2f} s = {floor:.2f} s "
              f"per step; ours / floor {ours['step_s'] / floor:.2f}x"
              + (f"; the largest ratio over TRL this floor allows: {trl['step_s'] / floor:.2f}x" if trl else ""))


if __name__ == "__main__":
    main()
