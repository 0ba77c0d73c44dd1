"""The embedded CPU default: a tiny Qwen2-architecture model trained from scratch on built-in arithmetic with
worked solutions (SFT warm-up), then GRPO; no download of any kind. ~7 minutes on 2 CPU cores.

    python experiments/train.py --config experiments/configs/tiny_default.py [--config.rl.steps=50 ...]
"""
import ml_collections


def get_config():
    c = ml_collections.ConfigDict()
    c.workdir = "runs/tiny_default"  # checkpoints, logs, plots, final HF checkpoint; an existing run resumes
    c.seed = 0  # seeds model init, data order and sampling

    c.model = ml_collections.ConfigDict()
    c.model.hf_path = ""  # an HF Qwen2/Qwen2.5/Qwen3/Llama directory; empty = the tiny model below, from scratch
    c.model.gguf_path = ""  # a llama.cpp .gguf file (model + tokenizer), instead of hf_path
    c.model.dtype = "float32"  # parameter storage dtype
    c.model.compute_dtype = ""  # activation/matmul dtype; empty = same as dtype
    c.model.hidden_size = 96  # tiny model width
    c.model.num_hidden_layers = 3  # tiny model depth
    c.model.num_attention_heads = 4  # query heads
    c.model.num_key_value_heads = 2  # KV heads (grouped-query attention)
    c.model.intermediate_size = 288  # SwiGLU hidden size
    c.model.max_position_embeddings = 512  # context length
    c.model.tie_word_embeddings = True  # share embedding and output matrices
    c.model.remat = False  # recompute each layer in the backward pass (less activation memory, ~1/3 more compute)

    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.path = ""  # a local HF tokenizer directory; empty = train a small BPE on the task's text
    c.tokenizer.vocab_size = 384  # size of the trained BPE (only when path is empty)

    c.data = ml_collections.ConfigDict()
    c.data.source = "arithmetic"  # arithmetic | reasoning_gym | file
    c.data.train_size = 20000  # generated training problems (arithmetic / reasoning_gym)
    c.data.heldout_size = 256  # held-out problems for before/after accuracy (disjoint questions)
    c.data.min_digits = 1  # arithmetic: digits per operand, lower bound
    c.data.max_digits = 1  # arithmetic: digits per operand, upper bound
    c.data.min_operands = 5  # arithmetic: operands per expression, lower bound
    c.data.max_operands = 5  # arithmetic: operands per expression, upper bound
    c.data.operations = "+"  # arithmetic: operators to draw from
    c.data.solution_style = "compact"  # arithmetic worked solutions: compact (a op b = r lines) | columns (digit by digit)
    c.data.reward = "answer"  # arithmetic: answer (boxed answer only) | answer_and_steps (also every compact step)
    c.data.answer_extraction = "boxed"  # boxed (strict) | boxed_or_last_number (no box: grade the last number)
    c.data.task = ""  # reasoning_gym task name (source=reasoning_gym)
    c.data.path = ""  # JSONL/Parquet/HF-datasets directory (source=file)
    c.data.heldout_path = ""  # optional separate held-out file (source=file); else split off train
    c.data.question_field = "question"  # field names for source=file
    c.data.answer_field = "answer"

    c.sft = ml_collections.ConfigDict()
    # Supervised warm-up steps on worked solutions (0 = none). 450 leaves the policy at ~50% held-out with faithful
    # chains; 350 steps on 3,000 examples left it miscopying operands (1% faithful chains), where RL only swung.
    c.sft.steps = 450
    c.sft.batch_size = 16
    c.sft.lr = 3e-3
    c.sft.warmup_steps = 10
    c.sft.examples = 6000  # how many training problems the warm-up sees (the rest are left for RL)
    # Self-labelled verification warm-up after SFT (RL^V's cold start: the policy samples, the reward labels,
    # it learns "Yes"/"No" on verify prompts; see jaxrl_reason/train/verify_warmup.py). 0 = none.
    c.sft.verify_steps = 0
    c.sft.verify_questions = 512  # warm-up questions sampled for it (taken from the SFT slice)
    c.sft.verify_samples = 4  # samples per question, each labelled by the task reward (0: contrast pairs only)
    c.sft.verify_batch_size = 32  # verification rows per step
    c.sft.verify_solve_rows = 8  # worked-solution rows per step alongside them (keeps the solving skill)
    c.sft.verify_lr = 1e-3
    c.sft.verify_balance = "subsample"  # subsample: class balance over all rows | per_question: within each question
    # none | slips: also train on each warm-up question's worked solution ("Yes") beside a copy with one slip ("No")
    c.sft.verify_contrast = "none"

    c.method = ml_collections.ConfigDict()
    c.method.name = "grpo"  # grpo | rlv | cure
    c.method.estimator = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp | grpo_batch_std
    c.method.estimator_kwargs = ml_collections.ConfigDict()  # e.g. {"ddof": 0}
    c.method.aggregation = "seq_mean_token_mean"  # token_mean | seq_mean_token_mean | seq_mean_token_sum_norm
    c.method.max_len = 0  # fixed length for seq_mean_token_sum_norm (0 = rl.max_new_tokens)
    c.method.eps_low = 0.2  # PPO clip below 1
    c.method.eps_high = 0.2  # PPO clip above 1 (clip-higher when > eps_low)
    c.method.dual_clip = 0.0  # dual-clip constant for negative advantages (0 = off)
    c.method.beta = 0.0  # KL-to-reference coefficient (0 = no reference model at all)
    c.method.kl_estimator = "k3"  # k1 | k2 | k3
    c.method.tis = "off"  # truncated importance sampling min(pi_old / q, tis_cap) for top-p/top-k: off | token | sequence
    c.method.tis_cap = 2.0  # the cap C of the TIS weight
    c.method.overlong_buffer = 0  # DAPO overlong shaping: linear penalty over the last this-many tokens (0 = off)
    c.method.overlong_penalty = 1.0  # DAPO overlong shaping: the penalty at the generation limit
    c.method.overlong_filter = False  # DAPO overlong filtering: truncated samples masked out of the loss
    c.method.extra = ml_collections.ConfigDict()  # method-specific knobs (e.g. rlv's verify_weight)

    c.rl = ml_collections.ConfigDict()
    c.rl.steps = 300  # RL steps (held-out accuracy plateaued after ~200 in the measured run)
    c.rl.prompts_per_step = 8  # Q
    c.rl.samples_per_prompt = 8  # G
    c.rl.max_new_tokens = 64  # completion budget (a compact 5-operand solution is ~45 tokens)
    c.rl.temperature = 0.7
    c.rl.top_p = 1.0
    c.rl.top_k = 0
    c.rl.num_iterations = 1  # PPO epochs over each rollout batch
    c.rl.num_mini_batches = 1  # optimizer steps per epoch (the batch's rows split into this many mini-batches)
    c.rl.micro_batches = 1
    c.rl.share_prompts = True  # the update runs each group's shared prompt through the model once (one device)
    c.rl.update_matmuls = "auto"  # XLA:CPU matmul kernels of the update: auto (eigen on CPU) | eigen | ynn
    c.rl.lr = 2e-5  # 3e-5 and up made held-out accuracy swing by 10 points between evaluations; 1e-4 degraded it
    c.rl.warmup_steps = 5  # learning-rate warm-up, in optimizer steps
    c.rl.schedule = "constant"
    c.rl.weight_decay = 0.0
    c.rl.clip_norm = 1.0
    c.rl.dynamic_sampling = False  # DAPO dynamic sampling
    c.rl.dynamic_sampling_max_rounds = 4
    c.rl.checkpoint_every = 0
    c.rl.eval_every = 100  # periodic held-out eval during RL (0 = only before/after)
    c.rl.eval_batch_size = 128
    c.rl.progress = True

    c.parallel = ml_collections.ConfigDict()
    c.parallel.mesh_shape = {"data": 1, "fsdp": 1, "tp": 1}  # devices per axis, -1 = the rest; all 1 = one device
    c.parallel.distributed = False  # join processes with jax.distributed (JAX_COORDINATOR_ADDRESS... or auto)
    c.parallel.device_memory_gb = 0  # per-device memory the launch config was planned for (0 = not planned)
    return c
