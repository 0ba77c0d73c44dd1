"""The typed run config: one dataclass per section of an `experiments/train.py` config, each knob written once,
with its default and its meaning. The defaults are the embedded CPU default run (`jaxrl_reason/configs/
tiny_default.py` only departs from TrainerConfig's RL defaults); the `rl` section is `TrainerConfig` itself and
the `method` section `methods.MethodConfig` and the `lora` section `models.lora.LoraConfig`.

`default_config()` is every knob as an ml_collections ConfigDict, so each is reachable as `--config.<section>.<knob>`;
`read_run_config(cfg)` turns a ConfigDict back into a RunConfig and refuses any key it does not know, naming it and
the valid ones (`knobs.UnknownKnobError`), before a run touches anything.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import ml_collections
from ml_collections.config_dict import placeholder

from jaxrl_reason.knobs import check_known, plain, read_section, section_dict
from jaxrl_reason.methods import MethodConfig, PolicyLossConfig, method_section, read_method_config
from jaxrl_reason.rollout.multiturn import ToolConfig
from jaxrl_reason.models.lora import LoraConfig
from jaxrl_reason.train.trainer import TrainerConfig


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """The policy: a checkpoint to load, else the shape of a model trained from scratch."""

    hf_path: str = ""  # an HF Qwen2/Qwen2.5/Qwen3/Llama directory; empty = the tiny model below, from scratch
    gguf_path: str = ""  # a llama.cpp .gguf file (model + tokenizer), instead of hf_path
    dtype: str = "float32"  # parameter storage dtype
    compute_dtype: str = ""  # activation/matmul dtype; empty = same as dtype
    hidden_size: int = 96  # tiny model width
    num_hidden_layers: int = 3  # tiny model depth
    num_attention_heads: int = 4  # query heads
    num_key_value_heads: int = 2  # KV heads (grouped-query attention)
    intermediate_size: int = 288  # SwiGLU hidden size
    max_position_embeddings: int = 512  # context length
    tie_word_embeddings: bool = True  # share embedding and output matrices
    remat: bool = False  # recompute each layer in the backward pass (less activation memory, ~1/3 more compute)
    # the sampler's layer weights on an fsdp mesh: "gathered" (the compiler's order: on TPU every layer gathered at
    # once in each step, all whole together) | "per_layer" (one layer gathered after another: about one layer whole
    # a chip, same tokens); models.qwen2.ModelConfig.decode_weights
    decode_weights: str = "gathered"

    def __post_init__(self):
        from jaxrl_reason.models.qwen2 import DECODE_WEIGHTS

        if self.decode_weights not in DECODE_WEIGHTS:
            raise ValueError(f"model.decode_weights={self.decode_weights!r} is not one of {DECODE_WEIGHTS}: "
                             "'gathered' holds every decode layer whole, 'per_layer' gathers one at a time")


@dataclasses.dataclass(frozen=True)
class TokenizerSection:
    path: str = ""  # a local HF tokenizer directory; empty = train a small BPE on the task's text
    vocab_size: int = 384  # size of the trained BPE (only when path is empty)
    # train that BPE on the warm-up's auxiliary-format rows too (sft.aux_*_share > 0), so that critique, correction
    # and check rows encode in ~2x fewer tokens; another vocabulary is another initialisation of a scratch model
    aux_corpus: bool = False


@dataclasses.dataclass(frozen=True)
class DataSection:
    """Where problems and their reward come from (`experiment.data.SOURCES`)."""

    source: str = "arithmetic"  # arithmetic | reasoning_gym | file | code | graph_path | graph_colour | latin_square
    train_size: int = 20000  # generated training problems (arithmetic / reasoning_gym / generated code)
    heldout_size: int = 256  # held-out problems for before/after accuracy (disjoint questions)
    min_digits: int = 1  # arithmetic: digits per operand, lower bound
    max_digits: int = 1  # arithmetic: digits per operand, upper bound
    min_operands: int = 5  # arithmetic: operands per expression, lower bound
    max_operands: int = 5  # arithmetic: operands per expression, upper bound
    operations: str = "+"  # arithmetic: operators to draw from
    solution_style: str = "compact"  # arithmetic worked solutions: compact (a op b = r lines) | columns | rewrite
    reward: str = "answer"  # arithmetic: answer (boxed answer only) | answer_and_steps (also every compact step)
    answer_extraction: str = "boxed"  # boxed (strict) | boxed_or_last_number (no box: grade the last number)
    task: str = ""  # reasoning_gym task name (source=reasoning_gym)
    path: str = ""  # source=file: JSONL/Parquet/HF-datasets directory; source=code: a JSONL, "humaneval" or ""
    heldout_path: str = ""  # optional separate held-out file (source=file); else split off train
    question_field: str = "question"  # question field name for source=file
    answer_field: str = "answer"  # answer field name for source=file
    graph_arms: int = 3  # source=graph_path: chains off the start node (the first hop is a 1-in-arms choice)
    graph_arm_len: int = 3  # source=graph_path: nodes per chain (the goal ends one chain)
    latin_blanks: int = 10  # source=latin_square: blank cells of the 16 (the difficulty knob, 1..10)
    # source=latin_square worked solutions: grid (the boxed grid alone) | deduction (a line per blank as singles
    # settle it, copying its row and column, then the grid; data/latin_square.deduction_text)
    latin_solution: str = "grid"
    # what a verify row's target is and what the verifier writes before its score: verdict (the one token,
    # docs/methods/rlv.md#spec-training) | worked_check (the task's check lines, each copying what it compares, then
    # the verdict; testbed tasks with a check, docs/tasks/testbed.md) | mark_check (the same lines with their marks
    # alone, no copies)
    verify_format: str = "verdict"
    check_tokens: int = 192  # worked_check / mark_check: the most tokens the verifier writes before its verdict is read
    # what a CURE critique writes: fields (the four fields, the verdict first, docs/methods/cure.md#spec-critique) |
    # worked_check (the task's check lines first, then the fields; testbed tasks with a check, docs/methods/cure.md)
    critique_format: str = "fields"
    # what a CIPO correction writes: solution (the corrected solution, docs/methods/cipo.md#spec-the-two-streams) |
    # worked_check (the task's check of the earlier attempt first, then the solution; testbed tasks with a check,
    # docs/methods/cipo.md)
    correction_format: str = "solution"
    # CURE's guided re-solve prompt, in the warm-up's rows, the method's RL and test-time refinement alike: after
    # (the paper's: problem, then guidance) | first (guidance, then the plain solve prompt), docs/methods/cure.md
    guided_layout: str = "after"
    # how CURE's critique and guided prompts are worded, read by the same three: short (this library's) | authors
    # (every instruction of the authors' templates, in our words: `data.prompts.PROMPT_WORDINGS`, docs/methods/cure.md)
    prompt_wording: str = "short"
    # testbed warm-up rows' wrong solutions: minimal (one error of a measured kind, 1-2 positions) | spread (off in
    # as many positions as the policy's own wrong answers; latin_square), docs/tasks/testbed.md
    inject_extent: str = "minimal"


@dataclasses.dataclass(frozen=True)
class SftSection:
    """The supervised warm-up on worked solutions, and the self-labelled verification warm-up after it (RL^V's
    cold start: the policy samples, the reward labels, it learns "Yes"/"No" on verify prompts;
    train/verify_warmup.py)."""

    # 450 leaves the tiny policy at ~50% held-out with faithful chains; 350 steps on 3,000 examples left it
    # miscopying operands (1% faithful chains), where RL only swung.
    steps: int = 450  # supervised warm-up steps on worked solutions (0 = none)
    batch_size: int = 16  # worked solutions per warm-up step
    lr: float = 3e-3  # warm-up learning rate (cosine schedule)
    warmup_steps: int = 10  # learning-rate warm-up steps of the SFT
    # pack each step's rows into fewer rows (rl.batch.pack_rows): the same loss, less padding where row lengths
    # differ (critique rows beside worked solutions); every SFT-style stage (SFT, own-attempt, worked-check)
    pack: bool = False
    # the warm-up stages (SFT, own-attempt, worked-check, verification) save every N steps to
    # <workdir>/warmup_checkpoints/ and a stopped run resumes there exactly (0 = none: a stopped stage starts again);
    # removed once sft_model is saved
    checkpoint_every: int = 100
    examples: int = 6000  # how many training problems the warm-up sees (the rest are left for RL)
    verify_steps: int = 0  # verification warm-up steps after SFT (0 = none)
    verify_questions: int = 512  # warm-up questions sampled for it (taken from the SFT slice)
    verify_samples: int = 4  # samples per question, each labelled by the task reward (0: contrast pairs only)
    verify_batch_size: int = 32  # verification rows per step
    verify_solve_rows: int = 8  # worked-solution rows per step alongside them (keeps the solving skill)
    verify_lr: float = 1e-3  # verification warm-up learning rate
    verify_balance: str = "subsample"  # subsample: class balance over all rows | per_question: within each question
    # none | slips: also train on each warm-up question's worked solution ("Yes") beside a copy with one slip ("No")
    verify_contrast: str = "none"
    # The worked-check warm-up after the SFT (data.verify_format worked_check / mark_check; train/check_warmup.py):
    # contrast pairs (a worked solution and an injected wrong one, the target the check then the verdict)
    check_steps: int = 0  # its SFT steps (0 = none)
    check_questions: int = 4096  # warm-up questions whose pairs it trains on (the first 10%, <= 100, held out)
    check_batch_size: int = 40  # rows per step, check and worked-solution rows mixed
    check_lr: float = 1e-3  # its learning rate (cosine schedule)
    check_solve_share: float = 1.0  # worked solutions mixed in per check row (keeps the solving skill)
    # CURE guided re-solve rows mixed in, per check question: the stage otherwise erases the re-solve
    # (docs/results/cure_testbed.md, worked-check critique); needs check_rows critique
    check_guided_share: float = 0.0
    # held-out balanced accuracy the stage must reach: below it after check_steps, another round of check_steps
    # follows (a fresh schedule), up to check_rounds in all (0 = one round, whatever it reaches)
    check_target: float = 0.0
    check_rounds: int = 3  # the most rounds of the stage when check_target > 0
    # the prompt the pairs' checks are written under: verify (data.verify_format) | critique (CURE's critique in
    # data.critique_format worked_check: the check, then the four fields) | correction (CIPO's correction in
    # data.correction_format worked_check: the check of the attempt, then the worked solution)
    check_rows: str = "verify"
    # Auxiliary formats mixed into the SFT warm-up (sources with AUX_FORMATS, e.g. graph_path), each as a share
    # of the sft.examples worked solutions: a from-scratch model has never seen these prompts (docs/tasks/testbed.md)
    aux_verify_share: float = 0.0  # RL^V verify rows (problem + right/wrong solution -> "Yes"/"No")
    aux_critique_share: float = 0.0  # CURE four-field critiques of right and wrong solutions
    aux_correct_share: float = 0.0  # CIPO corrections (wrong attempt -> worked solution)
    aux_guided_share: float = 0.0  # CURE guided re-solves (problem + a critique's hint -> worked solution)
    # Then rows built from the warmed-up policy's own attempts (data.testbed.own_attempt_rows): its wrong answers are
    # unlike injected ones (docs/tasks/testbed.md)
    own_attempt_steps: int = 0  # SFT steps on the own-attempt rows after the warm-up (0 = none)
    # aux: the formats above with a share > 0 | a comma list of critique, correct, guided, e.g. formats the SFT
    # rows left out
    own_attempt_formats: str = "aux"
    own_attempt_questions: int = 1024  # warm-up questions it samples attempts on (taken from the SFT slice)
    own_attempt_samples: int = 4  # attempts per question, at rl.temperature
    # 1e-3 with one solution per row cost the latin_square solver 4.7 greedy points; 5e-4 with three kept it
    own_attempt_lr: float = 5e-4  # its learning rate (cosine schedule)
    own_attempt_solve_share: float = 3.0  # worked solutions mixed in per own-attempt row (keeps the solving skill)
    # right attempts under review kept verbatim, per wrong-attempt correction row (without them every correction
    # row rewrites its attempt, so the warm-up learns to change right answers too)
    own_attempt_keep_share: float = 0.0
    # the order of the stages after the SFT (each runs when its steps are > 0): own_attempts, check (the worked-check
    # warm-up), verify; a stage trains its own formats only, so the last one's are the freshest
    stage_order: str = "own_attempts,check,verify"


@dataclasses.dataclass(frozen=True)
class PlanSection:
    """The batch a launch config's mesh was planned for (experiments/launch/preflight.py and the tests re-check
    the fit)."""

    train_rows: int = 0  # global rows of one update
    sample_rows: int = 0  # global rows decoded together
    context: int = 0  # tokens per row (prompt + completion)
    prompt_tokens: int = 0  # of which the prompt


@dataclasses.dataclass(frozen=True)
class ParallelSection:
    mesh_shape: Mapping = dataclasses.field(  # devices per axis, -1 = the rest; all 1 = one device
        default_factory=lambda: {"data": 1, "fsdp": 1, "tp": 1})
    distributed: bool = False  # join processes with jax.distributed (JAX_COORDINATOR_ADDRESS... or auto)
    device_memory_gb: float = 0  # per-device memory the launch config was planned for (0 = not planned)
    prompt_tokens: int = 256  # preflight without a plan: the prompt part of the context it plans for
    plan: Optional[PlanSection] = None  # the planned batch (launch configs only)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole run of experiments/train.py."""

    workdir: str = "runs/tiny_default"  # checkpoints, logs, plots, final HF checkpoint; an existing run resumes
    seed: int = 0  # seeds model init, data order and sampling (also the RL loop's seed)
    # seeds the data, the model init and every warm-up stage instead of `seed` (-1: `seed`), so that runs of
    # several seeds can start RL from one warm-up on one data split: `seed` then seeds the RL loop only
    warmup_seed: int = -1
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    tokenizer: TokenizerSection = dataclasses.field(default_factory=TokenizerSection)
    data: DataSection = dataclasses.field(default_factory=DataSection)
    sft: SftSection = dataclasses.field(default_factory=SftSection)
    method: MethodConfig = dataclasses.field(default_factory=MethodConfig)
    rl: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)  # the RL loop; its seed is `seed`
    parallel: ParallelSection = dataclasses.field(default_factory=ParallelSection)
    tools: ToolConfig = dataclasses.field(default_factory=ToolConfig)  # tool-using multi-turn rollouts (off: none)
    lora: LoraConfig = dataclasses.field(default_factory=LoraConfig)  # RL trains LoRA adapters (rank > 0), not all weights

    def __post_init__(self):
        if self.warmup_seed < -1:
            raise ValueError(f"config warmup_seed={self.warmup_seed}: give a seed >= 0, or -1 for the run's seed")

    @property
    def setup_seed(self) -> int:
        """The seed of the data, the tokenizer's corpus, the model init and the warm-ups."""
        return self.seed if self.warmup_seed == -1 else self.warmup_seed


_SECTIONS = {"model": ModelSection, "tokenizer": TokenizerSection, "data": DataSection, "sft": SftSection,
             "parallel": ParallelSection, "tools": ToolConfig, "lora": LoraConfig}


def read_run_config(cfg) -> RunConfig:
    """A run's ConfigDict (or mapping, or a RunConfig, returned as it is) as a RunConfig. Refuses an unknown key
    in any section, an unknown method or estimator, and what TrainerConfig's own checks refuse; resolves
    `method.max_len=0` to `rl.max_new_tokens`."""
    if isinstance(cfg, RunConfig):
        return cfg
    values = plain(cfg)
    check_known("", values, [f.name for f in dataclasses.fields(RunConfig)])
    top = RunConfig()
    seed = values.get("seed", top.seed)
    sections = {name: read_section(cls, name, values.get(name)) for name, cls in _SECTIONS.items()}
    rl = read_section(TrainerConfig, "rl", values.get("rl"), seed=seed)
    method = read_method_config(values.get("method"))
    if method.loss.max_len is None:  # seq_mean_token_sum_norm's fixed length: the completion budget
        method = dataclasses.replace(method, loss=dataclasses.replace(method.loss, max_len=rl.max_new_tokens))
    return RunConfig(workdir=values.get("workdir", top.workdir), seed=seed,
                     warmup_seed=values.get("warmup_seed", top.warmup_seed), method=method, rl=rl, **sections)


def run_config_dict(rc: RunConfig) -> dict:
    """A RunConfig as the plain dict of its ml_collections config (`read_run_config`'s inverse)."""
    out = {"workdir": rc.workdir, "seed": rc.seed, "warmup_seed": rc.warmup_seed}
    out.update({name: section_dict(getattr(rc, name)) for name in _SECTIONS})
    out["rl"] = section_dict(rc.rl, skip=("seed",))
    out["method"] = method_section(rc.method)
    return out


def default_config() -> ml_collections.ConfigDict:
    """Every knob of a run at its default, as the ConfigDict a config file's get_config() starts from. The loss
    knobs of `method` are unset (None: the method's own loss, `methods.method_loss`), each a typed placeholder so
    that a config file or `--config.method.<knob>=v` can set it."""
    out = run_config_dict(RunConfig())
    typed = section_dict(PolicyLossConfig())
    out["method"].update({k: placeholder(type(v)) for k, v in typed.items()
                          if out["method"][k] is None and not isinstance(v, Mapping)})
    return ml_collections.ConfigDict(out)
