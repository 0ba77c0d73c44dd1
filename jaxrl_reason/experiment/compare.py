"""Arms over one config: `compare(base_config, arms, seeds, spec)` trains every (arm, seed) cell, shares a warm-up
between cells whose warm-up settings agree, evaluates each final checkpoint with an `EvalSpec` (cached by
checkpoint and spec), and reports per-arm medians over seeds, per-seed paired differences against a baseline arm
with bootstrap intervals, their pooled mean over seeds, and held-out accuracy at matched training tokens, with the
curves drawn by `experiment.plots`. `experiments/compare.py` is its command line.

An arm is a name and config overrides (`Arm.parse("rlv:method.name=rlv,method.extra.verify_weight=0.3")`); a grid
(`{"method.extra.verify_weight": ["0.3", "1"]}`) turns every arm but the baseline into one arm per value. A cell
trains in <out>/runs/<arm>/seed<seed> through `experiment.pipeline.run`, so a killed compare reruns only the cells
that did not finish (a finished one is read, a stopped one resumes from its checkpoints).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import shutil
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from jaxrl_reason.experiment.config import read_run_config, run_config_dict
from jaxrl_reason.experiment.evaluation import EvalSpec, evaluate_run
from jaxrl_reason.inference.self_check import matched_budgets

__all__ = ["Arm", "apply_overrides", "compare", "expand_grid", "markdown_report", "paired_differences",
           "warmup_key"]

_KEY = r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*"
# An override list splits at a comma only where the next override starts ("key=..."), so a value may hold commas.
_SPLIT = re.compile(rf",(?={_KEY}=)")
_NAME = re.compile(r"^[\w.+-]+(?:\[[\w.=,+-]+\])?$")
# The RL loop's knobs that the warm-ups read (the verification and own-attempt stages sample at them); every
# other section but `method` and `workdir` shapes the warm-up whole.
WARMUP_RL_KNOBS = ("max_new_tokens", "temperature")


@dataclasses.dataclass(frozen=True)
class Arm:
    """A name and the config overrides ("section.knob=value") that make this arm differ from the base config."""

    name: str
    overrides: tuple = ()

    @classmethod
    def parse(cls, text: str) -> "Arm":
        """"name:key=value,key=value" (or "name" alone: the base config as it is)."""
        name, _, rest = text.partition(":")
        overrides = tuple(o.strip() for o in _SPLIT.split(rest)) if rest.strip() else ()
        arm = cls(name.strip(), overrides)
        arm.check()
        return arm

    def check(self) -> None:
        if not self.name or not _NAME.match(self.name):
            raise ValueError(f"arm {self.name!r}: a name is letters, digits and . _ + - (e.g. rlv); write the arm as "
                             "name:key=value,key=value")
        for o in self.overrides:
            if not re.match(rf"^{_KEY}=", o):
                raise ValueError(f"arm {self.name!r}: override {o!r} is not section.knob=value (e.g. method.name=rlv)")


def expand_grid(arms: Sequence[Arm], grid: Optional[Mapping[str, Sequence]], baseline: str) -> list:
    """Every arm but the baseline once per point of the grid (the product of its value lists), named
    "arm[knob=value,...]" by the last part of each key; the baseline stays as it is."""
    if not grid:
        return list(arms)
    keys = list(grid)
    for k in keys:
        if not re.match(rf"^{_KEY}$", k) or not list(grid[k]):
            raise ValueError(f"grid {k!r}: give section.knob=v1,v2,... with at least one value")
    out = []
    for arm in arms:
        if arm.name == baseline:
            out.append(arm)
            continue
        for values in itertools.product(*(grid[k] for k in keys)):
            label = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, values))
            out.append(Arm(f"{arm.name}[{label}]", arm.overrides + tuple(f"{k}={v}" for k, v in zip(keys, values))))
    return out


def apply_overrides(cfg, overrides: Sequence[str]):
    """A copy of the ConfigDict `cfg` with "key=value" overrides parsed as experiments/train.py parses
    `--config.key=value` (ml_collections' flags). A key new to an open section (method.extra.*,
    method.estimator_kwargs.*) is added with its value read as a Python literal (else as a string); an unknown key
    elsewhere is refused later by the typed config, naming it and the valid ones. A section given a dict literal
    ("method.extra={}") is replaced by it."""
    import ast

    import ml_collections
    from absl import flags
    from ml_collections import config_flags

    cfg = ml_collections.ConfigDict(cfg.to_dict())
    argv = ["compare"]
    for o in overrides:
        key, _, value = o.partition("=")
        parent, *_ = key.rsplit(".", 1) if "." in key else ("",)
        node = cfg
        for part in parent.split(".") if parent else []:
            if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
                raise ValueError(f"override {o!r}: the config has no section {parent!r}; the top-level sections are "
                                 f"{', '.join(sorted(cfg.keys()))}")
            node = node[part]
        leaf = key.rsplit(".", 1)[-1]
        if leaf in node and isinstance(node[leaf], ml_collections.ConfigDict):
            # a whole open section, e.g. method.extra={} (a GRPO arm of a CURE preset drops CURE's knobs)
            try:
                literal = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                literal = None
            if not isinstance(literal, dict):
                raise ValueError(f"override {o!r}: {key} is a section; give it a dict ({key}={{}} empties it) or set "
                                 f"one knob ({key}.KNOB=VALUE)")
            with node.unlocked():
                node[leaf] = ml_collections.ConfigDict(literal)
            continue
        if leaf not in node:
            try:
                literal = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                literal = value
            with node.unlocked():
                node[leaf] = literal
            continue
        argv.append(f"--config.{o}")
    if len(argv) > 1:
        values = flags.FlagValues()
        config_flags.DEFINE_config_dict("config", cfg, flag_values=values, sys_argv=argv)
        values(argv)
        cfg = values.config
    return cfg


def warmup_key(rc) -> str:
    """A digest of the settings that determine a run's tokenizer and warm-up: every section but `method`, the
    workdir and the RL loop (less the RL knobs the warm-ups sample at, WARMUP_RL_KNOBS), with the seed the warm-up
    is trained at (`warmup_seed`, else `seed`). Runs with one key start RL from one warm-up."""
    d = run_config_dict(rc)
    d.pop("workdir")
    d.pop("method")
    d["seed"] = rc.setup_seed  # runs of several seeds with one warmup_seed share its warm-up
    d.pop("warmup_seed")
    d["rl"] = {k: d["rl"][k] for k in WARMUP_RL_KNOBS}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _slug(name: str) -> str:
    return re.sub(r"[^\w.=+-]+", "_", name)


def plan(base_config, arms: Sequence[Arm], seeds: Sequence[int], baseline: str, out_dir: str) -> dict:
    """{(arm name, seed): ConfigDict} of every cell, each checked as a run checks itself at start-up
    (`pipeline.start`), before anything trains. Refuses a duplicate arm name, a baseline that is no arm, a repeated
    seed and any override the run config refuses, each naming the arm and the fix."""
    from jaxrl_reason.experiment.pipeline import start

    names = [a.name for a in arms]
    if not arms:
        raise ValueError("compare: no arms; give at least two, e.g. --arm grpo:method.name=grpo --arm "
                         "rlv:method.name=rlv")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"arm names must differ: {dup} given twice; rename one (name:overrides)")
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not an arm (arms: {', '.join(names)}); pass --baseline with one "
                         "of them")
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct integers, at least one; got {seeds}")
    cells = {}
    for arm in arms:
        arm.check()
        for seed in seeds:
            try:
                cfg = apply_overrides(base_config, list(arm.overrides) + [f"seed={seed}"])
                with cfg.unlocked():
                    cfg.workdir = os.path.join(os.path.abspath(out_dir), "runs", _slug(arm.name), f"seed{seed}")
                start(cfg)
            except Exception as e:  # noqa: BLE001 -- every refusal is re-raised naming the arm
                raise ValueError(f"arm {arm.name!r} (overrides {list(arm.overrides)}), seed {seed}: {e}") from e
            cells[arm.name, seed] = cfg
    return cells


def _trained(cfg) -> bool:
    path = os.path.join(cfg.workdir, "results.json")
    if not os.path.exists(os.path.join(cfg.workdir, "final", "config.json")) or not os.path.exists(path):
        return False
    results = json.load(open(path))
    return "after" in results and results.get("rl_steps") == cfg.rl.steps


WARMUP_REPORT = ("sft_seconds", "own_attempts", "check_warmup", "verify_warmup")


def _share_warmup(cfg, cache: str) -> bool:
    """Starts the cell from the cached warm-up (tokenizer, warmed-up model, its report); -> whether there was one."""
    if os.path.exists(os.path.join(cfg.workdir, "results.json")):  # the cell has begun: it resumes its own
        return False
    if not os.path.exists(os.path.join(cache, "done.json")):
        return False
    os.makedirs(cfg.workdir, exist_ok=True)
    for name in ("tokenizer", "sft_model"):
        if os.path.isdir(os.path.join(cache, name)) and not os.path.exists(os.path.join(cfg.workdir, name)):
            shutil.copytree(os.path.join(cache, name), os.path.join(cfg.workdir, name))
    json.dump(json.load(open(os.path.join(cache, "done.json")))["report"],
              open(os.path.join(cfg.workdir, "results.json"), "w"), indent=2)
    return True


def _keep_warmup(cfg, cache: str) -> None:
    """Saves a finished cell's tokenizer and warmed-up model as the warm-up of its key (written aside, then moved,
    so a killed compare leaves no half cache)."""
    if os.path.exists(os.path.join(cache, "done.json")):
        return
    tmp = cache + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in ("tokenizer", "sft_model"):
        if os.path.isdir(os.path.join(cfg.workdir, name)):
            shutil.copytree(os.path.join(cfg.workdir, name), os.path.join(tmp, name))
    results = json.load(open(os.path.join(cfg.workdir, "results.json")))
    json.dump({"from": cfg.workdir, "report": {k: results[k] for k in WARMUP_REPORT if k in results}},
              open(os.path.join(tmp, "done.json"), "w"), indent=2)
    shutil.rmtree(cache, ignore_errors=True)
    os.rename(tmp, cache)


def token_curve(workdir: str, rollouts_per_step: int) -> dict:
    """Held-out greedy accuracy against generated training tokens (every rollout token plus a method's extra
    generation: VinePPO's continuations) and against steps, from a finished run's metrics and results.json:
    {"x": tokens, "y": accuracy, "steps", "total_tokens"}; x = 0 is the accuracy before RL."""
    from jaxrl_reason.experiment.plots import read_records

    records = read_records(os.path.join(workdir, "logs", "metrics.jsonl"))
    results = json.load(open(os.path.join(workdir, "results.json")))
    spent, xs, ys, steps, at = 0.0, [0.0], [results["before"]["accuracy"]], 0, [0]
    for r in sorted(records, key=lambda r: r["step"]):
        if "length/mean" in r:
            spent += (r["length/mean"] * rollouts_per_step + r.get("vine/extra_tokens", 0.0)
                      + r.get("generate/extra_tokens", 0.0))
            steps = max(steps, int(r["step"]))
        if "eval/accuracy" in r:
            xs.append(spent)
            ys.append(r["eval/accuracy"])
            at.append(int(r["step"]))
    if xs[-1] < spent:
        xs.append(spent)
        ys.append(results["after"]["accuracy"])
        at.append(steps)
    return {"x": xs, "y": ys, "step": at, "steps": steps, "total_tokens": spent}


def _checkpoint_digest(path: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            h.update(name.encode())
            with open(full, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def resolve_spec(spec: EvalSpec, rc) -> EvalSpec:
    """The spec's run-own fields (None, `evaluation.RUN_OWN`) filled from the run: its completion budget,
    temperature, seed, the check its verifier writes (data.check_tokens when data.verify_format writes one, else 0)
    and its guided layout, critique and correction formats and prompt wording; and, when the spec leaves them
    None, the critique and correction budgets its method trained at (`method.extra`; 0 there: the response
    budget)."""
    from jaxrl_reason.data.testbed import CHECK_FORMATS

    fill = {"max_new_tokens": rc.rl.max_new_tokens, "temperature": rc.rl.temperature, "seed": rc.seed,
            "check_tokens": rc.data.check_tokens if rc.data.verify_format in CHECK_FORMATS else 0,
            "guided_layout": rc.data.guided_layout, "critique_format": rc.data.critique_format,
            "correction_format": rc.data.correction_format, "prompt_wording": rc.data.prompt_wording,
            "tools": dataclasses.asdict(rc.tools) if rc.tools.enabled else {}}
    # A critique or correction budget the run trained at (its method's knob; 0 there = the response budget, as
    # None here) caps those generations at test time too: a critique cut at the solve budget is not well-formed.
    knobs = dict(rc.method.extra)
    for name in ("critique_max_new_tokens", "correction_max_new_tokens"):
        if knobs.get(name):
            fill[name] = int(knobs[name])
    return dataclasses.replace(spec, **{k: v for k, v in fill.items() if getattr(spec, k) is None})


def per_question(results: dict) -> dict:
    """{metric: [one value per question]} of an evaluation's pool at k = n: pass@1, maj@n, BoN@n and weighted@n
    (self-verification), the arrays paired differences resample."""
    from jaxrl_reason.inference import estimators as est

    n, rows, out = results["n"], results["samples"], {}
    out["pass@1"] = [float(np.mean(r["correct"])) for r in rows]
    out[f"maj@{n}"] = [est.majority_at_k(r["classes"], r["correct"], n).mean for r in rows]
    if all("self" in r.get("scores", {}) for r in rows):
        out[f"bon@{n}"] = [est.best_of_k(r["scores"]["self"], r["correct"], n) for r in rows]
        out[f"weighted@{n}"] = [est.weighted_at_k(r["classes"], r["scores"]["self"], r["correct"], n).mean
                                for r in rows]
    return out


def strategy_scalars(results: dict) -> dict:
    """The token-spending strategies' headline numbers of an evaluation, one scalar each: self-refinement's accuracy
    per round, its round 0 -> 1 gain, round-1 strict verdict F1 and well-formed share; self-correction's accuracy per
    round and round-1 fix and break rates."""
    out = {}
    if "refinement" in results:
        rows = results["refinement"]["rows"]
        out.update({f"refine_round{r['round']}_acc": r["acc"] for r in rows})
        if len(rows) > 1:
            out.update(refine_gain=rows[1]["acc"] - rows[0]["acc"], refine_f1_strict=rows[1].get("verdict_f1_strict"),
                       refine_well_formed=rows[1].get("well_formed"))
    if "correction" in results:
        c = results["correction"]
        out.update({f"correct_round{r['round']}_acc": r["acc"] for r in c["rows"]})
        out.update(correct_fix_rate=c.get("correct/round1/fix_rate"),
                   correct_break_rate=c.get("correct/round1/break_rate"))
    return {k: (None if v is None or v != v else float(v)) for k, v in out.items()}  # nan: none to fix or break


def _spec_key(spec: EvalSpec) -> dict:
    """The spec as its cache key: progress bars do not change a result, and a spec without tools keys as it did
    before the field existed (earlier evaluations stay cached)."""
    d = dict(dataclasses.asdict(spec), progress=None)
    if not d.get("tools"):
        d.pop("tools", None)
    return d


def tool_scalars(results: dict) -> dict:
    """A tool pool's headline numbers (`evaluation.evaluate_with_tools`): calls per question, their success rate,
    turns and environment tokens per conversation; none for a single-turn pool."""
    t = results.get("tools")
    if not t:
        return {}
    return {"tool_calls_per_question": t["calls_per_question"], "tool_call_success": t["call_success"],
            "tool_turns": t["turns_mean"], "env_tokens_per_question": t["env_tokens_per_question"]}


def evaluate_cell(cfg, spec: EvalSpec, cache_dir: str, evaluate: Callable = evaluate_run) -> dict:
    """The evaluation of a cell's final checkpoint on its held-out split under `spec`, cached in `cache_dir` by
    (checkpoint bytes, held-out file, resolved spec, the run's data section and answer instruction): a second call
    with the same reads the cache."""
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    rc = read_run_config(cfg)
    spec = dataclasses.replace(resolve_spec(spec, rc), keep_samples=True)
    final, heldout = os.path.join(cfg.workdir, "final"), os.path.join(cfg.workdir, "heldout.jsonl")
    extra = cfg.method.get("extra") or {}
    answer_instruction = extra.get("answer_instruction")
    # what grades and prompts the evaluation (the task, a CIPO run's answer instruction) is part of its key too
    key = hashlib.sha256("|".join([_checkpoint_digest(final), open(heldout).read(),
                                   json.dumps(_spec_key(spec), sort_keys=True),
                                   json.dumps(run_config_dict(rc)["data"], sort_keys=True, default=str),
                                   str(answer_instruction)]).encode()).hexdigest()[:20]
    path = os.path.join(cache_dir, f"{key}.json")
    if os.path.exists(path):
        return json.load(open(path))
    task = build_data(rc.data, rc.setup_seed)
    res = evaluate(load_pretrained(final), Tokenizer.from_pretrained(final), load_examples(heldout), spec,
                   reward_fn=task.reward_fn, prompt_fn=task.prompt_fn, answer_instruction=answer_instruction)
    res["per_question"] = per_question(res)  # the samples stay: a budget table is recomputed from them (`compare`)
    os.makedirs(cache_dir, exist_ok=True)
    json.dump(res, open(path + ".tmp", "w"))
    os.replace(path + ".tmp", path)
    return res


def paired_differences(base: Sequence, arm: Sequence, *, draws: int = 2000, seed: int = 0) -> dict:
    """`arm` minus `base` on the same questions, per seed (one array of per-question values per seed each): each
    seed's mean difference with a 95% interval from resampling its questions with replacement (one draw serves both
    arms, which answered the same questions), and the pooled mean over seeds with its interval from resampling
    every seed's questions in each draw. The intervals hold the evaluation's noise; the seeds are the units of the
    training noise. -> {"per_seed": [{"diff", "95"}], "pooled": {"diff", "95"}, "questions"}."""
    if len(base) != len(arm) or not base:
        raise ValueError(f"paired_differences: {len(base)} baseline and {len(arm)} arm seeds; give one array per "
                         "seed for each, in the same seed order")
    diffs = []
    for i, (b, a) in enumerate(zip(base, arm)):
        b, a = np.asarray(b, np.float64), np.asarray(a, np.float64)
        if b.shape != a.shape or b.ndim != 1 or not len(b):
            raise ValueError(f"paired_differences: seed {i}: {b.shape} baseline values against {a.shape}; the arms "
                             "must be evaluated on the same questions")
        diffs.append(a - b)
    rng = np.random.default_rng(seed)
    boots = [d[rng.integers(0, len(d), (draws, len(d)))].mean(axis=1) for d in diffs]

    def summary(point, draws_):
        lo, hi = np.percentile(draws_, [2.5, 97.5])
        return {"diff": float(point), "95": [float(lo), float(hi)]}

    return {"per_seed": [summary(d.mean(), bt) for d, bt in zip(diffs, boots)],
            "pooled": summary(np.mean([d.mean() for d in diffs]), np.mean(boots, axis=0)),
            "questions": int(sum(len(d) for d in diffs))}


def _median(values):
    values = [v for v in values if v is not None and v == v]
    return float(np.median(values)) if values else None


def compare(base_config, arms: Sequence, seeds: Sequence[int], spec: Optional[EvalSpec] = None, *,
            baseline: Optional[str] = None, out_dir: str = "runs/compare", grid: Optional[Mapping] = None,
            train: Optional[Callable] = None, evaluate: Callable = evaluate_run, draws: int = 2000,
            plot: bool = True) -> dict:
    """Trains every arm for every seed, evaluates each final checkpoint with `spec` (None: training metrics only)
    and reports them (module docstring). base_config: a run's ConfigDict (a preset's get_config(), or
    `configs.load_config_file(path)` as experiments/compare.py loads it); arms: `Arm`s or their
    "name:key=value,..." strings; baseline: the arm the others are compared with (default: the first); grid:
    {key: [values]} applied to every arm but the baseline; train: what trains one cell (`pipeline.run`).
    Writes <out_dir>/summary.json, summary.md and curves.png (and tools.png, the tool arms' reward, calls per sample
    and call success per RL step); returns the summary."""
    from jaxrl_reason.experiment.pipeline import run

    train = train or run
    arms = [a if isinstance(a, Arm) else Arm.parse(a) for a in arms]
    baseline = baseline or (arms[0].name if arms else "")
    arms = expand_grid(arms, grid, baseline)
    out_dir = os.path.abspath(out_dir)
    cells = plan(base_config, arms, seeds, baseline, out_dir)
    warmups = {"trained": 0, "shared": 0}
    results = {}
    for (name, seed), cfg in cells.items():
        rc = read_run_config(cfg)
        cache = os.path.join(out_dir, "warmups", warmup_key(rc))
        if not _trained(cfg):
            had = os.path.exists(os.path.join(cfg.workdir, "sft_model", "config.json"))
            shared = _share_warmup(cfg, cache) if rc.sft.steps > 0 else False
            if rc.sft.steps > 0 and not had:  # a stopped cell that kept its warm-up resumes from it
                warmups["shared" if shared else "trained"] += 1
            print(f"== {name} seed {seed}: training in {cfg.workdir}" + (" (shared warm-up)" if shared else ""),
                  flush=True)
            train(cfg)
        if rc.sft.steps > 0:
            _keep_warmup(cfg, cache)
        run_results = json.load(open(os.path.join(cfg.workdir, "results.json")))
        cell = {"arm": name, "seed": seed, "workdir": cfg.workdir, "warmup": warmup_key(rc),
                "before": run_results["before"]["accuracy"], "after": run_results["after"]["accuracy"],
                "curve": token_curve(cfg.workdir, rc.rl.prompts_per_step * rc.rl.samples_per_prompt)}
        if spec is not None:
            e = evaluate_cell(cfg, spec, os.path.join(out_dir, "evals"), evaluate)
            n = e["n"]
            cell["eval"] = {k: float(np.mean(v)) for k, v in e["per_question"].items()}
            verifier = e["verifier"].get("self")  # a tool pool has no verifier scores
            if verifier is not None:
                cell["eval"].update({"verifier_balanced_accuracy": verifier["balanced_accuracy"],
                                     "verifier_within_question_auroc": verifier.get("within_question_auroc")})
            cell["eval"]["mean_completion_tokens"] = e["mean_completion_tokens"]
            cell["eval"].update(tool_scalars(e))
            cell["eval"].update(strategy_scalars(e))
            cell["per_question"] = e["per_question"]
            cell["n"] = n
            if "budgets" in e:  # the current rule's table, also for a cached evaluation (it kept its samples)
                cell["budgets"] = (matched_budgets(e, e["budgets"]["multiples"]) if "samples" in e
                                   else e["budgets"])
        results[name, seed] = cell
    summary = summarize(results, [a.name for a in arms], [int(s) for s in seeds], baseline, draws=draws)
    summary.update(warmups=warmups, arms={a.name: list(a.overrides) for a in arms},
                   spec=dataclasses.asdict(spec) if spec is not None else None, out_dir=out_dir)
    os.makedirs(out_dir, exist_ok=True)
    json.dump(summary, open(os.path.join(out_dir, "summary.json"), "w"), indent=2)
    open(os.path.join(out_dir, "summary.md"), "w").write(markdown_report(summary))
    if plot and summary.get("budgets"):
        from jaxrl_reason.experiment.plots import strategy_budget_curves

        strategy_budget_curves(summary["budgets"]["table"], path=os.path.join(out_dir, "strategies.png"))
    if plot:
        from jaxrl_reason.experiment.plots import budget_curves

        budget_curves({a: [{"x": c["x"], "y": c["y"]} for c in summary["curves"][a]] for a in summary["curves"]},
                      path=os.path.join(out_dir, "curves.png"),
                      title=f"held-out accuracy, seeds {','.join(map(str, seeds))}")
        tool_arms = {a.name: [os.path.join(results[a.name, s]["workdir"], "logs", "metrics.jsonl") for s in seeds]
                     for a in arms if read_run_config(cells[a.name, seeds[0]]).tools.enabled}
        if tool_arms:  # how the policy uses its tools during RL: calls per sample and their success rate
            from jaxrl_reason.experiment.plots import sweep_curves

            sweep_curves(tool_arms, ["reward/mean", "tools/calls_per_sample", "tools/call_success"],
                         path=os.path.join(out_dir, "tools.png"))
    return summary


def summarize(cells: Mapping, arms: Sequence[str], seeds: Sequence[int], baseline: str, *, draws: int = 2000) -> dict:
    """The report of finished cells {(arm, seed): cell}: per-arm medians over seeds (with the per-seed values), the
    matched-token accuracy, and paired differences against `baseline` (module docstring)."""
    budget = min(c["curve"]["total_tokens"] for c in cells.values())
    metrics = ["before", "after", "at_budget"]
    for c in cells.values():
        c["at_budget"] = float(np.interp(budget, c["curve"]["x"], c["curve"]["y"]))
        for k in c.get("eval", {}):
            if k not in metrics:
                metrics.append(k)
    rows = []
    for arm in arms:
        per_seed = [cells[arm, s] for s in seeds]
        row = {"arm": arm}
        for m in metrics:
            values = [c.get(m, c.get("eval", {}).get(m)) for c in per_seed]
            row[m] = {"median": _median(values), "seeds": values}
        rows.append(row)
    paired = {}
    for arm in arms:
        if arm == baseline:
            continue
        base, this = [cells[baseline, s] for s in seeds], [cells[arm, s] for s in seeds]
        entry = {}
        for m in metrics:
            if all(m in c.get("per_question", {}) for c in base + this):
                entry[m] = paired_differences([b["per_question"][m] for b in base],
                                              [t["per_question"][m] for t in this], draws=draws)
                continue
            value = lambda c: c.get(m, c.get("eval", {}).get(m))  # noqa: E731
            d = [None if value(t) is None or value(b) is None else value(t) - value(b) for t, b in zip(this, base)]
            known = [x for x in d if x is not None]
            entry[m] = {"per_seed": [{"diff": x, "95": None} for x in d],
                        "pooled": {"diff": float(np.mean(known)) if known else None, "95": None}}
        paired[arm] = entry
    curves = {arm: [dict(cells[arm, s]["curve"], seed=s, workdir=cells[arm, s].get("workdir")) for s in seeds]
              for arm in arms}
    out = {"baseline": baseline, "seeds": list(seeds), "budget_tokens": budget, "metrics": metrics, "rows": rows,
           "paired": paired, "curves": curves}
    strategies = strategy_budgets(cells, arms, seeds, baseline, draws=draws)
    if strategies:
        out["budgets"] = strategies
    return out


def strategy_budgets(cells: Mapping, arms: Sequence[str], seeds: Sequence[int], baseline: str, *,
                     draws: int = 2000) -> Optional[dict]:
    """Every test-time strategy at matched budgets (`inference.self_check.matched_budgets`, one table per cell):
    per arm and (strategy, budget) the median accuracy over seeds with each seed's value and matched tokens, and
    against `baseline` the per-seed paired differences on the same questions (`paired_differences`). A budget is a
    multiple of each cell's own mean tokens per sample. None when no cell has a table."""
    if not any("budgets" in c for c in cells.values()):
        return None
    multiples = next(c["budgets"]["multiples"] for c in cells.values() if "budgets" in c)
    names: list = []
    for c in cells.values():
        for name in c.get("budgets", {}).get("table", {}):
            if name not in names:
                names.append(name)

    def entry(c, name, m):
        cells_ = c.get("budgets", {}).get("table", {}).get(name)
        hit = [x for x in cells_ or [] if x["multiple"] == m]
        return hit[0] if hit else None

    table = {}
    for arm in arms:
        table[arm] = {}
        for name in names:
            pts = []
            for m in multiples:
                got = [entry(cells[arm, s], name, m) for s in seeds]
                accs = [None if g is None else g["acc"] for g in got]
                toks = [None if g is None else g["tokens"] for g in got]
                pts.append({"multiple": m, "acc": _median(accs), "seeds": accs, "tokens": _median(toks)})
            if any(p["acc"] is not None for p in pts):
                table[arm][name] = pts
    def seed_values(who, name, m):  # per seed, the per-question values of (strategy, budget); None where absent
        return [cells[who, s].get("budgets", {}).get("per_question", {}).get(name, {}).get(str(m)) for s in seeds]

    paired = {}
    for arm in arms:
        if arm == baseline:
            continue
        paired[arm] = {}
        for name in names:
            for m in multiples:
                values = [seed_values(who, name, m) for who in (baseline, arm)]
                if any(v is None for v in values[0] + values[1]):
                    continue
                paired[arm].setdefault(name, {})[str(m)] = paired_differences(values[0], values[1], draws=draws)
    best = best_strategies(table, multiples)
    paired_best = {}
    for arm in arms:
        if arm == baseline or baseline not in best or arm not in best:
            continue
        for base_pick, pick in zip(best[baseline], best[arm]):
            if base_pick["strategy"] is None or pick["strategy"] is None:
                continue
            m = str(pick["multiple"])
            values = [seed_values(who, p["strategy"], m) for who, p in ((baseline, base_pick), (arm, pick))]
            if not any(v is None for v in values[0] + values[1]):
                paired_best.setdefault(arm, {})[m] = paired_differences(values[0], values[1], draws=draws)
    return {"multiples": multiples, "strategies": names, "table": table, "paired": paired, "best": best,
            "paired_best": paired_best}


def best_strategies(table: Mapping, multiples: Sequence) -> dict:
    """Per arm and budget, the strategy with the highest median accuracy over seeds (the first listed on a tie;
    None where no strategy fits the budget). The pick is made on the questions it is then scored on, for every
    arm alike: an arm with more strategies gets more picks (a union's headroom is partly that)."""
    out = {}
    for arm, rows in table.items():
        picks = []
        for i, m in enumerate(multiples):
            scored = [(name, pts[i]) for name, pts in rows.items() if pts[i]["acc"] is not None]
            name, pt = max(scored, key=lambda x: x[1]["acc"]) if scored else (None, None)
            picks.append({"multiple": m, "strategy": name, "acc": None if pt is None else pt["acc"],
                          "seeds": None if pt is None else pt["seeds"]})
        out[arm] = picks
    return out


def _fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def _interval(x: dict) -> str:
    return f"{_fmt(x['diff'])} [{_fmt(x['95'][0])}, {_fmt(x['95'][1])}]"


def curve_tables(summary: dict) -> list:
    """Markdown lines: each arm's held-out accuracy at every evaluation during RL (step, generated training tokens,
    accuracy: medians over the seeds that evaluated at that step, then each seed's accuracy)."""
    lines = []
    for arm, runs in summary["curves"].items():
        steps = sorted({s for r in runs for s in r.get("step", [])})
        if len(steps) < 2:
            continue
        lines += ["", f"## {arm}: held-out accuracy during RL", "", "| step | training tokens | accuracy | per seed |",
                  "|---|---|---|---|"]
        for step in steps:
            at = [(r["x"][r["step"].index(step)], r["y"][r["step"].index(step)]) for r in runs if step in r["step"]]
            lines.append(f"| {step} | {np.median([t for t, _ in at]):.0f} | **{_fmt(_median([a for _, a in at]))}** | "
                         + " / ".join(_fmt(a) for _, a in at) + " |")
    return lines


def budget_tables(summary: dict) -> list:
    """Markdown lines: per arm a strategy x budget table (median accuracy over seeds, then each seed's), then every
    arm against the baseline for each (strategy, budget), paired by seed."""
    b = summary.get("budgets")
    if not b:
        return []
    ms = b["multiples"]
    lines = ["", "## Test-time strategies at matched budgets", "",
             "A budget is m x the mean generated tokens of one sample of that cell; a strategy's setting there is the "
             "one with the most mean tokens per question within it ('-': none fits). Median over seeds (each seed).",
             ""]
    for arm, rows in b["table"].items():
        lines += [f"### {arm}", "", "| strategy | " + " | ".join(f"{m}x" for m in ms) + " |",
                  "|---|" + "---|" * len(ms)]
        for name, pts in rows.items():
            lines.append(f"| {name} | " + " | ".join(
                "-" if p["acc"] is None else f"**{_fmt(p['acc'])}** ({' / '.join(_fmt(v) for v in p['seeds'])})"
                for p in pts) + " |")
        lines.append("")
    if b.get("best"):
        lines += ["### Each arm's best strategy at each budget", "",
                  "The strategy with the highest median accuracy at that budget (picked on the same questions), its "
                  "median (each seed).", "", "| arm | " + " | ".join(f"{m}x" for m in ms) + " |",
                  "|---|" + "---|" * len(ms)]
        for arm, picks in b["best"].items():
            lines.append(f"| {arm} | " + " | ".join(
                "-" if p["strategy"] is None else
                f"{p['strategy']}: **{_fmt(p['acc'])}** ({' / '.join(_fmt(v) for v in p['seeds'])})" for p in picks)
                + " |")
        lines.append("")
    if b.get("paired_best"):
        lines += [f"### Best against best: each arm's best strategy minus {summary['baseline']}'s, paired by seed", "",
                  "| arm | budget | per seed | pooled |", "|---|---|---|---|"]
        for arm, by_m in b["paired_best"].items():
            for m, d in by_m.items():
                lines.append(f"| {arm} | {m}x | {' / '.join(_interval(x) for x in d['per_seed'])} | "
                             f"{_interval(d['pooled'])} |")
        lines.append("")
    if any(b["paired"].values()):
        lines += [f"### Against {summary['baseline']} at matched budgets (arm minus baseline, paired by seed)", "",
                  "Per seed [95% interval from resampling the held-out questions], then the pooled mean over seeds.",
                  "", "| arm | strategy | budget | per seed | pooled |", "|---|---|---|---|---|"]
        for arm, by_name in b["paired"].items():
            for name, by_m in by_name.items():
                for m, d in by_m.items():
                    def one(x):
                        return f"{_fmt(x['diff'])} [{_fmt(x['95'][0])}, {_fmt(x['95'][1])}]"

                    lines.append(f"| {arm} | {name} | {m}x | {' / '.join(one(x) for x in d['per_seed'])} | "
                                 f"{one(d['pooled'])} |")
    return lines


def markdown_report(summary: dict) -> str:
    """summary.md: the per-arm table (median over seeds, then each seed), then each arm against the baseline."""
    m = summary["metrics"]
    labels = {"before": "held-out before RL", "after": "held-out after RL",
              "at_budget": f"held-out at {summary['budget_tokens'] / 1e6:.3f}M training tokens"}
    lines = [f"# compare: {len(summary['rows'])} arms, seeds {', '.join(map(str, summary['seeds']))}", "",
             "Each cell: the median over seeds, then every seed's value (in seed order).", "",
             "| arm | " + " | ".join(labels.get(k, k) for k in m) + " |", "|---|" + "---|" * len(m)]
    for row in summary["rows"]:
        lines.append(f"| {row['arm']} | " + " | ".join(
            f"**{_fmt(row[k]['median'])}** ({' / '.join(_fmt(v) for v in row[k]['seeds'])})" for k in m) + " |")
    lines += curve_tables(summary) + budget_tables(summary)
    if not summary["paired"]:
        return "\n".join(lines) + "\n"
    lines += ["", f"## Against {summary['baseline']} (arm minus baseline, paired by seed)", "",
              "Per seed, then the pooled mean over seeds; [95% interval] from resampling the held-out questions "
              "(where per-question values exist: the sampled pool's pass@1, maj@n, BoN@n, weighted@n).", "",
              "| arm | metric | per seed | pooled |", "|---|---|---|---|"]
    for arm, entry in summary["paired"].items():
        for k, d in entry.items():
            def one(x):
                return _fmt(x["diff"]) + ("" if not x["95"] else f" [{_fmt(x['95'][0])}, {_fmt(x['95'][1])}]")

            lines.append(f"| {arm} | {labels.get(k, k)} | {' / '.join(one(x) for x in d['per_seed'])} | "
                         f"{one(d['pooled'])} |")
    return "\n".join(lines) + "\n"
