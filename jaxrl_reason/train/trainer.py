"""The RL loop: sample -> reward -> method (advantages, task rows) -> num_iterations fused updates -> metrics ->
checkpoint. Host code orchestrates; everything numeric runs in jitted functions with explicit state and keys.

Resumption is exact: the checkpoint holds params, optimizer state, step, PRNG key and the data position, and
every random choice of a step derives from the key saved before it.

On a mesh (`mesh=parallel.make_mesh(...)`) the same loop runs SPMD: params and optimizer state live in their
partition-rule shardings, the sampler and the fused update split rows over data x fsdp, checkpoints are sharded
Orbax saves that restore onto any mesh shape, and in a multi-process run every process executes this code with
the same data order, scores only its share of the completions, and only process 0 writes metrics.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import time
import zlib
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_reason.data.datasets import DataIterator
from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.methods.base import (Context, Method, Rollouts, RowFormats, check_tool_rows, generate_rollouts,
                                      tool_rollouts)
from jaxrl_reason.rollout.multiturn import ToolConfig, multi_turn_sample
from jaxrl_reason.models import lora as lora_lib
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.parallel import mesh as pmesh
from jaxrl_reason.parallel import rules as prules
from jaxrl_reason.rl import advantages as adv_lib
from jaxrl_reason.rl.batch import build_token_batch, pack_rows, pad_rows_to, scored_size, split_mini_batches
from jaxrl_reason.rl.losses import needs_reference, nonfinite_terms, scoring_temperatures, sft_spec, value_task_ids
from jaxrl_reason.rl.prefix import SharedPrefixBatch, share_prefixes
from jaxrl_reason.sampling.sampler import sample
from jaxrl_reason.train.checkpoint import Checkpointer, LoopCheckpoints
from jaxrl_reason.progress import progress_bar
from jaxrl_reason.train.metrics import MetricsWriter
from jaxrl_reason.train.state import TrainState, init_state, make_optimizer, replicated_value
from jaxrl_reason.rl.scoring import reference_scorer
from jaxrl_reason.train.update import start_training

# fold_in tag of the step's sampling key that gives the LoRA adapters' dropout keys (a stream of its own)
_DROPOUT_STREAM = 0x6C6F7261


class NonFiniteLossError(FloatingPointError):
    pass


@dataclasses.dataclass
class TrainerConfig:
    """Knobs of the RL loop (methods carry their own loss knobs)."""

    steps: int = 100  # RL steps (each: one batch of prompts, num_iterations optimizer updates)
    prompts_per_step: int = 8  # Q: questions per step
    samples_per_prompt: int = 8  # G: group size
    max_new_tokens: int = 128  # generation limit of a rollout (tokens after the prompt)
    temperature: float = 1.0  # sampling temperature T (> 0); pi_old and pi_theta are scored at it
    top_p: float = 1.0  # nucleus sampling (1 = off); see PolicyLossConfig.tis for the correction
    top_k: int = 0  # top-k sampling (0 = off)
    num_iterations: int = 1  # PPO epochs over each batch (1 with one mini-batch = on-policy, ratio == 1)
    num_mini_batches: int = 1  # optimizer steps per epoch: the batch's rows split into this many mini-batches
    shuffle_mini_batches: bool = True  # rows go to mini-batches at random (seeded by the step's key), once a step
    micro_batches: int = 1  # gradient accumulation inside the jitted update (per mini-batch)
    lr: float = 1e-6  # AdamW peak learning rate
    warmup_steps: int = 0  # learning-rate warm-up, in optimizer steps
    schedule: str = "constant"  # constant | cosine (over steps x num_iterations x num_mini_batches optimizer steps)
    weight_decay: float = 0.0  # AdamW decoupled weight decay (matrices only)
    clip_norm: float = 1.0  # global gradient-norm clip (<= 0 = off)
    dynamic_sampling: bool = False  # DAPO: drop zero-signal groups and refill from new prompts
    dynamic_sampling_max_rounds: int = 4  # extra sampling rounds per step before training on what there is
    logprob_chunk: Optional[int] = None  # time chunk for log-probs from hidden states (memory for big vocabs)
    head_at_trained_only: bool = True  # update: LM head only at trained positions (same loss, less compute)
    share_prompts: bool = True  # update: a prompt shared by a group's rows goes through the model once (rows not split over devices)
    update_matmuls: str = "auto"  # XLA:CPU matmul kernels of the one-device update: auto | eigen | ynn (see update.py)
    seed: int = 0  # data order, sampling and every host-side choice
    log_every: int = 1  # write metrics every this many steps
    checkpoint_every: int = 50  # 0 = only at the end
    keep_checkpoints: int = 2  # checkpoints kept on disk
    eval_every: int = 0  # 0 = no periodic eval
    eval_max_new_tokens: Optional[int] = None  # default: max_new_tokens
    eval_batch_size: int = 64  # questions per held-out sampling call
    progress: bool = True  # progress bars

    def __post_init__(self):
        for f in ("steps", "prompts_per_step", "samples_per_prompt", "max_new_tokens", "num_iterations",
                  "num_mini_batches", "micro_batches"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"TrainerConfig.{f} must be >= 1, got {getattr(self, f)}")
        if self.temperature <= 0:
            raise ValueError(f"TrainerConfig.temperature must be > 0 for RL rollouts (a policy gradient needs "
                             f"sampled completions and the tempered policy's log-probs), got {self.temperature}")
        if self.dynamic_sampling and self.samples_per_prompt < 2:
            raise ValueError("TrainerConfig.dynamic_sampling needs samples_per_prompt >= 2 (a group of one has no "
                             "variance to select on)")


def optimizer_steps(config: TrainerConfig) -> int:
    """Optimizer updates over a whole run: what a learning-rate schedule counts."""
    return config.steps * config.num_iterations * config.num_mini_batches


def render_solve_prompts(tokenizer, questions: Sequence[str], prompt_fn: Callable[[str], str] = solve_prompt
                         ) -> list[list[int]]:
    """Token ids of `prompt_fn(question)` rendered through the chat template (math: solve_prompt; code:
    code_solve_prompt)."""
    return [tokenizer.encode(tokenizer.render_prompt(prompt_fn(q))) for q in questions]


def score_rows(reward_fn, texts: Sequence[str], examples: Sequence[Any]) -> tuple[np.ndarray, list]:
    """reward_fn over rows -> (float32 scores [rows], details). With several processes each scores its own
    `process_share` of the rows (graders are host CPU work) and every process receives all results."""
    if jax.process_count() == 1:
        res = reward_fn(texts, examples)
        return np.asarray(res.scores, np.float32), list(res.details)
    share = pmesh.process_share(len(texts))
    res = reward_fn(list(texts[share]), list(examples[share]))
    scores = pmesh.allgather_objects(np.asarray(res.scores, np.float32).tolist())
    return np.asarray(scores, np.float32), pmesh.allgather_objects(list(res.details))


def evaluate_accuracy(model, params, tokenizer, examples, reward_fn, *, max_new_tokens: int, batch_size: int = 64,
                      key=None, temperature: float = 0.0, progress: bool = False,
                      prompt_fn: Callable[[str], str] = solve_prompt, mesh=None) -> dict:
    """Greedy (default) held-out accuracy: one completion per question, scored by `reward_fn`.
    mesh: the mesh `params` are sharded on (None: the one-device mesh)."""
    key = jax.random.PRNGKey(0) if key is None else key
    correct, lengths, finished = [], [], []
    bar = progress_bar(len(examples), "eval", disable=not progress or not pmesh.is_main_process())
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        prompts = render_solve_prompts(tokenizer, [e.question for e in chunk], prompt_fn)
        out = sample(model, prompts, jax.random.fold_in(key, start), max_new_tokens=max_new_tokens,
                     temperature=temperature, stop_token_ids=tokenizer.stop_ids, pad_id=tokenizer.pad_id,
                     state=params, mesh=mesh)
        texts = tokenizer.batch_decode(out.tokens, lengths=out.lengths, skip_special_tokens=True)
        scores, _ = score_rows(reward_fn, texts, chunk)
        correct.extend(scores > 0.5)
        lengths.extend(out.lengths.tolist())
        finished.extend(f != "length" for f in out.finish_names())
        bar.update(len(chunk))
    bar.close()
    return {"accuracy": float(np.mean(correct)), "mean_length": float(np.mean(lengths)),
            "finished_frac": float(np.mean(finished)), "num_examples": len(examples)}


def evaluate_tool_accuracy(model, params, tokenizer, examples, reward_fn, make_env, tools: ToolConfig, *,
                           max_new_tokens: int, batch_size: int = 64, key=None, temperature: float = 0.0,
                           mesh=None) -> dict:
    """Held-out accuracy of a tool-using policy: one multi-turn conversation per question (greedy by default) with
    its tools, graded on the model's turns; also tool calls per question, their success rate and tokens per turn
    (model and environment)."""
    key = jax.random.PRNGKey(0) if key is None else key
    correct, calls, ok, turns, model_tok, env_tok, lengths, finished = [], [], [], [], [], [], [], []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        out = multi_turn_sample(model, tokenizer, chunk, make_env, jax.random.fold_in(key, start), config=tools,
                                max_tokens=max_new_tokens, temperature=temperature, state=params, mesh=mesh)
        scores, _ = score_rows(reward_fn, out.texts, chunk)
        scores = np.where(np.isnan(out.env_rewards), scores, out.env_rewards)
        correct.extend(scores > 0.5)
        calls.extend(out.calls.tolist())
        ok.extend(out.calls_ok.tolist())
        turns.extend(len(t) for t in out.turns)
        model_tok.extend(m for t in out.turns for m, _ in t)
        env_tok.extend(e for t in out.turns for _, e in t if e)
        lengths.extend(len(c) for c in out.completions)
        finished.extend(f == "eos" for f in out.finish)
    return {"accuracy": float(np.mean(correct)), "calls_per_question": float(np.mean(calls)),
            "call_success": float(np.sum(ok) / max(np.sum(calls), 1)), "turns_mean": float(np.mean(turns)),
            "model_tokens_per_turn": float(np.mean(model_tok)),
            "env_tokens_per_turn": float(np.mean(env_tok)) if env_tok else 0.0, "num_examples": len(examples),
            # the run's before/after table reads these, as for single-turn rows: tokens after the prompt (model and
            # environment) and the share of conversations that ended their reply
            "mean_length": float(np.mean(lengths)), "finished_frac": float(np.mean(finished))}


class Trainer:
    def __init__(self, model, tokenizer, method: Method, train_examples: Sequence[Any], reward_fn: Callable,
                 config: TrainerConfig, workdir: str, *, eval_examples: Optional[Sequence[Any]] = None,
                 prompt_fn: Callable[[str], str] = solve_prompt, mesh=None,
                 rules: prules.Rules = prules.DEFAULT_RULES, formats: RowFormats = RowFormats(),
                 tools: Optional[ToolConfig] = None, lora: lora_lib.LoraConfig = lora_lib.LoraConfig()):
        """reward_fn(texts, examples) -> RewardResult. The model's own params are the initial policy.
        prompt_fn: question -> user message (solve_prompt for math, code_solve_prompt for code).
        formats: how the data writes verify rows, critiques and corrections (methods read `Context.formats`;
        `experiment.data.row_formats` builds it from the data section); the default is the papers' formats.
        mesh: a `parallel.make_mesh` mesh to train on (None: the one-device mesh); `rules` lay out the params
        and optimizer state on it. A model already loaded into those shardings is used without a copy.
        tools: with tools named, rollouts are multi-turn conversations with them (`rollout.multiturn`), within a
        total budget of `config.max_new_tokens` tokens after the prompt; environment tokens are never trained.
        lora: adapters attached to the model in place (`models.lora.attach_lora`, seeded by `config.seed`); with
        them (or on a model that already has adapters) only the adapters train, and a KL term's reference is the
        base with the adapters off, read from the policy's own frozen weights (no copy)."""
        self.prompt_fn, self.formats = prompt_fn, formats
        self.tools = tools if tools is not None and tools.enabled else None
        check_tool_rows(method, () if self.tools is None else self.tools.tools)
        self._make_env = None if self.tools is None else self.tools.make_env(prompt_fn)
        self._tool_metrics: dict = {}
        self.model, self.tokenizer, self.method, self.reward_fn = model, tokenizer, method, reward_fn
        self.cfg, self.workdir = config, workdir
        self.eval_examples = list(eval_examples or [])
        # What the method trains beside the policy joins the model's param tree here (PPO's critic), so that one
        # update, one checkpoint and one sharding serve both.
        method.prepare(model, config.seed)
        critic = method.critic
        lora_lib.attach_lora(model, lora, seed=config.seed)
        self.lora = bool(lora_lib.adapted(model))
        self.lora_dropout = self.lora and lora.dropout > 0
        self.graphdef = nnx.graphdef(model)
        self.terms = method.terms()
        if config.dynamic_sampling and method.uses_zero_signal_groups:
            raise ValueError(f"TrainerConfig.dynamic_sampling drops groups whose rewards are all equal, and method "
                             f"{method.name!r} trains on them (CURE replays guided solutions into zero-pass groups); "
                             "set dynamic_sampling=False")
        self.optimizer = make_optimizer(config.lr, total_steps=optimizer_steps(config),
                                        warmup_steps=config.warmup_steps,
                                        schedule=config.schedule, weight_decay=config.weight_decay,
                                        clip_norm=config.clip_norm,
                                        critic_lr_scale=(method.critic_lr_scale if critic == "separate" else None))
        ref_temps = scoring_temperatures(self.terms, self._scoring_temperature())
        tr = start_training(model, self.optimizer, self.terms, mesh, rules=rules, micro_batches=config.micro_batches,
                            logprob_chunk=config.logprob_chunk, temperature=self._scoring_temperature(),
                            matmuls=config.update_matmuls, trainable=lora_lib.TRAINABLE if self.lora else None)
        self.mesh, self.update = tr.mesh, tr.update
        self._needs_reference = needs_reference(self.terms)
        # The KL reference: a frozen copy of the initial policy, or, for a LoRA policy, its base with the adapters
        # off (`reference_params`), which needs no copy: the base weights never change.
        self.ref_params = (jax.tree.map(jnp.copy, tr.params) if self._needs_reference and not self.lora else None)
        ref_graphdef = lora_lib.base_graphdef(model) if self.lora else self.graphdef
        self._value_tasks = list(value_task_ids(self.terms))  # rows of PPO's value term (no LM head in the update)
        self.state = init_state(tr.params, tr.opt_state, config.seed, self.mesh)
        # Rows per update: whole micro-batches, each split evenly over the mesh's batch shards.
        self._row_groups = pmesh.batch_shards(self.mesh)
        self._row_multiple = config.micro_batches * self._row_groups
        # Pinned to the batch layout so the update's row-split input sharding matches without a reshard; the LM
        # head runs where the KL term reads it, each row group gathering its own positions as the update does.
        self._ref_logprobs = reference_scorer(ref_graphdef, self.mesh, chunk_size=config.logprob_chunk,
                                              temperature=ref_temps, micro_batches=config.micro_batches)
        self.data = DataIterator(list(train_examples), config.prompts_per_step, seed=config.seed)
        self.ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=config.keep_checkpoints)
        self.writer = MetricsWriter(os.path.join(workdir, "logs"), enabled=pmesh.is_main_process())
        self._prompt_cache: dict[str, list[int]] = {}
        if self.ckpt.latest_step() is not None:
            self.state, extra = self.ckpt.restore(self.state)
            self.data.restore(extra["data"])
            method.load_state_dict(extra.get("method", {}))
            self.writer.forget(int(self.state.step))  # the steps after the save are trained (and logged) again
            if pmesh.is_main_process():
                print(f"resumed from step {int(self.state.step)} in {self.ckpt.directory}")

    def _scoring_temperature(self) -> float:
        """The temperature pi_old and pi_theta are scored at: the rollouts' (docs/methods/grpo.md#spec-temperature)."""
        return float(self.cfg.temperature)

    # ------------------------------------------------------------------------------------------ rollouts

    def _prompts(self, examples) -> list[list[int]]:
        out = []
        for e in examples:
            if e.question not in self._prompt_cache:
                self._prompt_cache[e.question] = render_solve_prompts(self.tokenizer, [e.question],
                                                                      self.prompt_fn)[0]
            out.append(self._prompt_cache[e.question])
        return out

    def _sample(self, prompts, key, num_samples, **kw):
        c = self.cfg
        kw.setdefault("max_new_tokens", c.max_new_tokens)
        return sample(self.model, prompts, key, temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                      num_samples=num_samples, stop_token_ids=self.tokenizer.stop_ids, pad_id=self.tokenizer.pad_id,
                      state=self.state.params, mesh=self.mesh, **kw)

    def rollouts(self, examples, key) -> Rollouts:
        if self.tools is not None:
            c = self.cfg
            out = multi_turn_sample(self.model, self.tokenizer, examples, self._make_env, key, config=self.tools,
                                    max_tokens=c.max_new_tokens, num_samples=c.samples_per_prompt,
                                    temperature=c.temperature, top_p=c.top_p, top_k=c.top_k,
                                    state=self.state.params, mesh=self.mesh)
            ro, self._tool_metrics = tool_rollouts(out, examples, reward=self._reward)
            return ro
        return generate_rollouts(lambda p, **kw: self._sample(p, key, **kw), self.tokenizer, self._prompts(examples),
                                 examples, num_samples=self.cfg.samples_per_prompt, reward=self._reward)

    def _reward(self, texts, examples) -> RewardResult:
        """The reward function, each process scoring its share of the rows (`score_rows`)."""
        return RewardResult(*score_rows(self.reward_fn, texts, examples))

    def _dynamic_rollouts(self, key) -> tuple[Rollouts, dict]:
        """DAPO dynamic sampling: keep only groups with reward variance, drawing more prompts until Q are kept."""
        q = self.cfg.prompts_per_step
        kept: list[Rollouts] = []
        n_kept, drawn, rounds = 0, 0, 0
        while n_kept < q and rounds <= self.cfg.dynamic_sampling_max_rounds:
            r = self.rollouts(next(self.data), jax.random.fold_in(key, rounds))
            drawn += len(r.examples)
            keep = ~np.asarray(adv_lib.zero_signal_groups(r.rewards))
            if keep.any():
                kept.append(_select_groups(r, np.nonzero(keep)[0][:q - n_kept]))
                n_kept += int(min(keep.sum(), q - n_kept))
            rounds += 1
        if not kept:  # nothing informative: train on the last batch (all-zero advantages, a no-op update)
            kept = [r]
        merged = _concat_rollouts(kept)
        return merged, {"dynamic_sampling/rounds": rounds, "dynamic_sampling/kept_frac": n_kept / max(drawn, 1),
                        "dynamic_sampling/filled_frac": n_kept / q}

    # ------------------------------------------------------------------------------------------ loop

    def train_step(self) -> dict:
        c = self.cfg
        t0 = time.perf_counter()
        key, k_sample, k_method = jax.random.split(self.state.key, 3)
        extra_metrics = {}
        if c.dynamic_sampling:
            ro, extra_metrics = self._dynamic_rollouts(k_sample)
        else:
            ro = self.rollouts(next(self.data), k_sample)
        t_sample = time.perf_counter()
        host_rng = np.random.default_rng(np.asarray(jax.device_get(k_method)).tolist())
        # Each generation a method asks for in this step (CURE: critiques, then guided solutions) gets its own
        # key; one shared key would make the second call reuse the first call's uniforms row by row.
        def sampler(key):
            calls = itertools.count(1)
            return lambda p, **kw: self._sample(p, jax.random.fold_in(key, next(calls)), **kw)

        # A union's parts each sample from their own stream (methods.base.part_context), under fold_in(k_method,
        # 0), a key the default stream (calls 1, 2, ...) never draws.
        part_keys = jax.random.fold_in(k_method, 0)
        streams = lambda part: sampler(jax.random.fold_in(part_keys, zlib.crc32(part.encode()) % 2**31))
        ctx = Context(self.tokenizer, sampler(k_method), self._reward, host_rng, self.tokenizer.pad_id, self.model,
                      self.state.params, temperature=self._scoring_temperature(), max_new_tokens=c.max_new_tokens,
                      formats=self.formats, streams=streams)
        batch, method_metrics = self.method.build(ro, ctx)
        if c.num_mini_batches == 1:
            minis = [batch]
        else:
            order_rng = np.random.default_rng(np.asarray(jax.device_get(k_sample)).tolist())
            minis = split_mini_batches(batch, c.num_mini_batches, rng=order_rng if c.shuffle_mini_batches else None,
                                       multiple=self._row_multiple)
        # Prepared once and reused by every epoch: the layout and the reference log-probs do not change.
        prepared = [self._prepare(mb) for mb in minis]
        t_build = time.perf_counter()
        params, opt_state = self.state.params, self.state.opt_state
        step = int(self.state.step) + 1
        per_update = []
        # LoRA dropout: each update of the step its own key, derived from the step's key (resumes bit-exactly).
        k_dropout = jax.random.fold_in(k_sample, _DROPOUT_STREAM) if self.lora_dropout else None
        for it in range(c.num_iterations):
            for j, (mb, scored) in enumerate(prepared):
                k_update = None if k_dropout is None else jax.random.fold_in(k_dropout, it * len(prepared) + j)
                out = self.update(params, opt_state, mb, scored=scored, key=k_update)
                if refused(out):
                    # The update was not applied (the jitted step keeps the old params); nothing is checkpointed.
                    self.state = TrainState(self.state.step, out.params, out.opt_state, self.state.key)
                    raise_refused(out, f"step {step} (epoch {it + 1}/{c.num_iterations}, mini-batch {j + 1}/"
                                  f"{len(prepared)})", scored=scored, terms=self.terms,
                                  after=f"the last good checkpoint (step {self.ckpt.latest_step()}) is intact. Lower "
                                  "the learning rate or check the rewards/advantages of this batch")
                params, opt_state = out.params, out.opt_state
                per_update.append(out.metrics)
        jax.block_until_ready(params)
        update_metrics = epoch_metrics(jax.device_get(per_update), c.num_iterations)
        shared = [isinstance(b, SharedPrefixBatch) for b, _ in prepared]
        update_tokens = sum(b.tokens_through_model() if isinstance(b, SharedPrefixBatch) else b.tokens.size
                            for b, _ in prepared)
        t_update = time.perf_counter()
        step_arr = jnp.asarray(step, jnp.int32)
        self.state = TrainState(replicated_value(step_arr, self.mesh), params, opt_state, key)
        lengths = np.array([len(x) for x in ro.completions])
        metrics = {**update_metrics, **method_metrics, **extra_metrics, **self._tool_metrics,
                   "reward/mean": float(ro.rewards.mean()), "reward/accuracy": float((ro.rewards > 0.5).mean()),
                   "length/mean": float(lengths.mean()), "length/max": float(lengths.max()),
                   "length/clipped_frac": float(np.mean([f == "length" for f in ro.finish])),
                   "time/sample_and_reward": t_sample - t0, "time/build": t_build - t_sample,
                   "time/update": t_update - t_build, "time/step": t_update - t0,
                   "update/shared_prompts": float(np.mean(shared)), "update/tokens": float(update_tokens),
                   "throughput/completion_tokens_per_s": float(lengths.sum() / (t_update - t0))}
        return metrics

    def _prepare(self, batch):
        """A host TokenBatch -> (what the update takes, its static `scored`): split by rows over the mesh's batch
        shards, each group's shared prompt stored once when the rows are not split (a shared prompt would cross
        shards), and the reference log-probs attached when a KL term reads them."""
        c = self.cfg
        batch = pad_rows_to(batch, self._row_multiple, bucket=True)
        if c.share_prompts and self._row_groups == 1:
            batch = share_prefixes(batch, c.micro_batches) or batch
        rows = batch.rows if isinstance(batch, SharedPrefixBatch) else batch
        scored = scored_size(rows, c.micro_batches, self._row_groups) if c.head_at_trained_only else None
        ref_scored = scored  # the reference forward scores every trained position, value rows included
        if scored is not None and self._value_tasks:
            # The update's LM head skips value rows (they train only the value head): size it without them.
            policy = ~np.isin(np.asarray(rows.task_id), self._value_tasks)[:, None]
            scored = scored_size(rows._replace(loss_mask=np.asarray(rows.loss_mask) * policy), c.micro_batches,
                                 self._row_groups)
        batch = prules.shard_batch(batch, self.mesh)
        if self._needs_reference:  # the reference forward shares the prompts too
            ref = self._ref_logprobs(self.reference_params(), batch, ref_scored)
            batch = (batch._replace(rows=batch.rows._replace(ref_logprobs=ref))
                     if isinstance(batch, SharedPrefixBatch) else batch._replace(ref_logprobs=ref))
        return batch, scored

    def reference_params(self):
        """The KL reference's params: the frozen copy, or a LoRA policy's own base weights (the same arrays)."""
        return lora_lib.base_state(self.state.params) if self.lora else self.ref_params

    def save(self):
        self.ckpt.save(self.state, {"data": self.data.state(), "method": self.method.state_dict()})

    def evaluate(self, *, progress: bool = False) -> dict:
        return evaluate_accuracy(self.model, self.state.params, self.tokenizer, self.eval_examples, self.reward_fn,
                                 max_new_tokens=self.cfg.eval_max_new_tokens or self.cfg.max_new_tokens,
                                 batch_size=self.cfg.eval_batch_size, progress=progress, prompt_fn=self.prompt_fn,
                                 mesh=self.mesh)

    def run(self, *, stop_after: Optional[int] = None) -> list[dict]:
        """Train until `config.steps` (or until `stop_after` more steps, for tests of interruption)."""
        c = self.cfg
        start = int(self.state.step)
        end = c.steps if stop_after is None else min(c.steps, start + stop_after)
        history = []
        bar = progress_bar(c.steps, "rl", initial=start, disable=not c.progress or not pmesh.is_main_process())
        for _ in range(start, end):
            m = self.train_step()
            step = int(self.state.step)
            if c.eval_every and step % c.eval_every == 0 and self.eval_examples:
                m.update({f"eval/{k}": v for k, v in self.evaluate().items()})
            if step % c.log_every == 0 or step == end:
                m = self.writer.write(step, m)
            history.append(m)
            if (c.checkpoint_every and step % c.checkpoint_every == 0) or step == end:
                self.save()
            bar.set_postfix(reward=f"{m['reward/mean']:.3f}", len=f"{m['length/mean']:.0f}",
                            s_step=f"{m['time/step']:.2f}")
            bar.update(1)
        bar.close()
        nnx.update(self.model, self.state.params)
        return history

    def close(self):
        self.writer.close()
        self.ckpt.close()


def epoch_metrics(per_update: Sequence[dict], epochs: int) -> dict:
    """One step's metrics from its updates (epoch-major, the same number of mini-batches each).

    Every metric is its mean over all updates, and with several epochs also per epoch as `epoch{e}/{name}`
    (e from 1), so the clip fractions and ratios of later epochs are seen. Two kinds differ: token and sequence
    counts (`*/tokens`, `*/sequences`) are summed over one epoch's mini-batches (the whole batch), and the
    sampler/trainer gap `logprob_gap/*` is the first update's, the only one scored before the params move."""
    n = len(per_update)
    per_epoch = n // epochs
    count = lambda k: k.endswith("/tokens") or k.endswith("/sequences")
    out = {}
    for k in per_update[0]:
        vals = np.asarray([float(m[k]) for m in per_update])
        if k.startswith("logprob_gap/"):
            out[k] = vals[0]
        elif count(k):
            out[k] = vals[:per_epoch].sum()
        else:
            out[k] = vals.mean()
            if epochs > 1:
                for e in range(epochs):
                    out[f"epoch{e + 1}/{k}"] = vals[e * per_epoch:(e + 1) * per_epoch].mean()
    return out


def _select_groups(r: Rollouts, idx) -> Rollouts:
    g = r.group_size
    rows = [q * g + j for q in idx for j in range(g)]
    pick = lambda xs: [xs[i] for i in rows]
    return Rollouts([r.examples[i] for i in idx], [r.prompts[i] for i in idx], pick(r.completions),
                    pick(r.logprobs), pick(r.texts), r.rewards[np.asarray(idx)], pick(r.finish), pick(r.details),
                    None if r.sampling_logprobs is None else pick(r.sampling_logprobs),
                    None if r.token_masks is None else pick(r.token_masks))


def _concat_rollouts(rs: Sequence[Rollouts]) -> Rollouts:
    if len(rs) == 1:
        return rs[0]
    cat = lambda f: [x for r in rs for x in getattr(r, f)]
    sampling = None if any(r.sampling_logprobs is None for r in rs) else cat("sampling_logprobs")
    masks = None if any(r.token_masks is None for r in rs) else cat("token_masks")
    return Rollouts(cat("examples"), cat("prompts"), cat("completions"), cat("logprobs"), cat("texts"),
                    np.concatenate([r.rewards for r in rs]), cat("finish"), cat("details"), sampling, masks)


# ---------------------------------------------------------------------------------------------- SFT warm-up

# (example) -> [(start, end, weight)]: character spans of `example.solution` whose tokens get that loss weight.
SpanWeights = Callable[[Any], Sequence[tuple[int, int, float]]]


def span_token_weights(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, float]]) -> list[float]:
    """Per token, the weight of the last span its characters overlap (1.0 outside every span). A weight of 0
    leaves a token untrained; the loss is the weighted token mean (weights normalise it, `rl.losses.aggregate`)."""
    out = [1.0] * len(offsets)
    for start, end, w in spans:
        if not (0 <= start < end) or not np.isfinite(w) or w < 0:
            raise ValueError(f"span weight ({start}, {end}, {w}) is invalid; give 0 <= start < end and a finite "
                             "weight >= 0")
        for t, (a, b) in enumerate(offsets):
            if a < end and b > start:
                out[t] = float(w)
    return out


def sft_rows(tokenizer, examples, *, max_len: Optional[int] = None, prompt_fn: Callable[[str], str] = solve_prompt,
             span_weights: Optional[SpanWeights] = None):
    """Solve prompt + worked solution + end-of-turn token, trained by next-token NLL on the solution.
    span_weights: per example, character spans of its solution whose tokens weigh more (or less) in the loss --
    e.g. the rare decisive tokens of a worked check; None trains every target token alike."""
    prompts = render_solve_prompts(tokenizer, [e.question for e in examples], prompt_fn)
    targets, weights = [], []
    for i, e in enumerate(examples):
        if not e.solution:
            raise ValueError(f"SFT example {e.id!r} has no `solution`; SFT warm-up needs worked solutions")
        spans = list(span_weights(e)) if span_weights is not None else []
        if any(end > len(e.solution) for _, end, _ in spans):
            raise ValueError(f"SFT example {e.id!r}: a span weight ends past its {len(e.solution)}-character "
                             "solution; spans index `example.solution`")
        if spans:
            ids, offsets = tokenizer.encode_with_offsets(e.solution)
            weights.append(span_token_weights(offsets, spans) + [1.0])  # eos weighs 1
        else:
            ids = tokenizer.encode(e.solution)
            weights.append(1.0)  # a scalar: the row's every token
        ids = ids + [tokenizer.eos_id]
        if max_len and len(prompts[i]) + len(ids) > max_len:
            raise ValueError(f"SFT example {e.id!r}: prompt + solution is {len(prompts[i]) + len(ids)} tokens, "
                             f"over max_len={max_len}")
        targets.append(ids)
    return build_token_batch(prompts, targets, [0.0] * len(examples), None, "solve", pad_id=tokenizer.pad_id,
                             completion_masks=weights if span_weights is not None else None)


def refused(out) -> list[str]:
    """The flags of an UpdateOutput that refused the step (empty when it was applied)."""
    return nonfinite_terms(out.finite)


def raise_refused(out, where: str, *, scored: Optional[int] = None, terms=(), after: str = "lower the lr"):
    """The one error for a refused update (the jitted update kept the old params): a ValueError for an undersized
    `scored`, else NonFiniteLossError naming `where`, the non-finite terms and what to do `after`."""
    bad = refused(out)
    if bad == ["scored_positions"]:
        raise ValueError(f"{where}: the update was given scored={scored}, fewer than the trained positions of some "
                         "row group; compute it with rl.batch.scored_size on the padded batch")
    names = f" (loss terms: {', '.join(t.name for t in terms)})" if terms else ""
    raise NonFiniteLossError(f"{where}: non-finite value in {', '.join(bad)}{names}; the update was not applied; "
                             f"{after}.")


def checked_update(update, params, opt_state, batch, *, where: str, scored: Optional[int] = None):
    """One supervised update; raises (`raise_refused`) naming `where` and the terms when it was refused."""
    out = update(params, opt_state, batch, scored=scored)
    if refused(out):
        raise_refused(out, where, scored=scored)
    return out


def sft_train(model, tokenizer, examples, *, steps: int, batch_size: int, lr: float, warmup_steps: int,
              seed: int = 0, schedule: str = "cosine", micro_batches: int = 1, progress: bool = True,
              writer: Optional[MetricsWriter] = None, prompt_fn: Callable[[str], str] = solve_prompt, mesh=None,
              rules: prules.Rules = prules.DEFAULT_RULES, span_weights: Optional[SpanWeights] = None,
              pack: bool = False, checkpoint_dir: Optional[str] = None, checkpoint_every: int = 100,
              stop_after: Optional[int] = None, log_offset: int = 0) -> list[dict]:
    """Supervised warm-up on worked solutions; updates `model` in place and returns per-step metrics.
    mesh: the mesh to train on (None: the one-device mesh): params and optimizer state laid out by `rules`, rows
    over data x fsdp. span_weights: per-token loss weights on spans of the solutions (`sft_rows`).
    pack: each step's rows packed into fewer rows of the same length (`rl.batch.pack_rows`; the same token-mean
    loss, less padding when row lengths differ), the row count bucketed so few shapes compile.
    checkpoint_dir: save params, optimizer state, data position and the metrics so far there every
    `checkpoint_every` steps and at the end, and resume from the latest save found there (exactly: the same
    batches, the same schedule); None = no checkpoints. stop_after: stop after this many steps of this call (a
    pre-emption, for tests); the model then holds the params reached. log_offset: added to the step numbers the
    writer logs (a stage of several calls logs one series)."""
    terms = (sft_spec(("solve",), name="sft", aggregation="token_mean"),)
    opt = make_optimizer(lr, total_steps=steps, warmup_steps=warmup_steps, schedule=schedule)
    tr = start_training(model, opt, terms, mesh, rules=rules, micro_batches=micro_batches)
    update, params, opt_state = tr.update, tr.params, tr.opt_state
    row_multiple = micro_batches * pmesh.batch_shards(tr.mesh)
    data = DataIterator(list(examples), batch_size, seed=seed)
    history: list[dict] = []
    ckpt = LoopCheckpoints(checkpoint_dir, checkpoint_every, tr.mesh, "SFT") if checkpoint_dir is not None else None
    start = 0
    resumed = (ckpt.restore(params, opt_state, {"steps": steps}, writer=writer, log_offset=log_offset)
               if ckpt is not None else None)
    if resumed is not None:
        start, params, opt_state, extra = resumed
        try:
            data.restore(extra["data"])
        except ValueError as e:
            raise ValueError(f"the SFT checkpoint in {ckpt.ckpt.directory} does not match these rows: {e} Delete "
                             "that directory to train from the start") from e
        history = list(extra["history"])
    end = steps if stop_after is None else min(steps, start + stop_after)
    bar = progress_bar(steps, "sft", initial=start, disable=not progress or not pmesh.is_main_process())
    for step in range(start + 1, end + 1):
        batch = sft_rows(tokenizer, next(data), prompt_fn=prompt_fn, span_weights=span_weights)
        batch = pad_rows_to(pack_rows(batch), row_multiple, bucket=True) if pack else pad_rows_to(batch, row_multiple)
        scored = scored_size(batch, micro_batches, row_multiple // micro_batches)
        batch = prules.shard_batch(batch, tr.mesh)
        out = checked_update(update, params, opt_state, batch, where=f"SFT step {step}", scored=scored)
        params, opt_state = out.params, out.opt_state
        m = {"sft/nll": float(out.metrics["solve/nll"]), "sft/grad_norm": float(out.metrics["grad_norm"])}
        if writer is not None:
            writer.write(log_offset + step, m, prefix="")
        history.append(m)
        if ckpt is not None:
            ckpt.save(step, steps, params, opt_state, {"data": data.state(), "history": history, "steps": steps})
        bar.set_postfix(nll=f"{m['sft/nll']:.3f}")
        bar.update(1)
    bar.close()
    if ckpt is not None:
        ckpt.close()
    nnx.update(model, params)
    return history
