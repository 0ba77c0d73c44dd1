"""What the method-against-GRPO benchmarks (bench_cure, bench_cipo) share: per seed, a GRPO arm that makes the
warm-up and the method's arm that starts from it, the same RL steps for both, and a finished arm loaded for
evaluation with its own held-out split and task, and the paired comparison of two arms' per-question results."""
from __future__ import annotations

import json
import os
import warnings
from typing import Callable, Sequence

import numpy as np

from bench_rlv import as_plain_grpo, share_warmup, trained
from jaxrl_reason.configs import load_config_file


def train_arms(config: str, root: str, seed: int, method: str, *, rl_steps: int = 0, progress: bool = True,
               overrides: tuple = ()) -> dict:
    """{"grpo": cfg, method: cfg}, both trained (a finished run is reused) under <root>/seed<seed>/<arm>:
    "grpo" is `config` (with its `--config.a.b=value` overrides) with its method forced to plain GRPO and its
    warm-up kept as configured (`bench_rlv.as_plain_grpo`); `method` is the same config as given, from the GRPO
    arm's tokenizer and SFT model."""
    from jaxrl_reason.experiment.pipeline import run

    cfgs = {}
    for arm in ("grpo", method):
        cfg = load_config_file(config, overrides)
        if arm == "grpo":
            as_plain_grpo(cfg, verify_warmup=True)
        cfg.seed = seed
        cfg.workdir = os.path.join(root, f"seed{seed}", arm)
        cfg.rl.progress = progress
        if rl_steps:
            cfg.rl.steps = rl_steps
        if arm == method:
            share_warmup(cfgs["grpo"].workdir, cfg.workdir)
        if not trained(cfg):
            print(f"== seed {seed} {arm}: {cfg.rl.steps} RL steps in {cfg.workdir}", flush=True)
            run(cfg)
        results = json.load(open(os.path.join(cfg.workdir, "results.json")))
        results.setdefault("rollouts_per_step", cfg.rl.prompts_per_step * cfg.rl.samples_per_prompt)
        json.dump(results, open(os.path.join(cfg.workdir, "results.json"), "w"), indent=2)
        cfgs[arm] = cfg
    return cfgs


def load_arm(cfg, questions: int, model: str = "final", tokenizer: str = "final"):
    """(model, tokenizer, the first `questions` held-out examples, the run's TaskData) of a finished arm; `model`
    and `tokenizer` name the run's subdirectories to load (its warm-up: "sft_model", "tokenizer")."""
    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    examples = load_examples(os.path.join(cfg.workdir, "heldout.jsonl"))[:questions]
    return (load_pretrained(os.path.join(cfg.workdir, model)),
            Tokenizer.from_pretrained(os.path.join(cfg.workdir, tokenizer)), examples, build_data(cfg.data, cfg.seed))


def paired_differences(scores: Callable[[object, np.ndarray], Sequence[float]], base, method, n: int, *,
                       names: Sequence[str], draws: int = 2000, seed: int = 0) -> dict:
    """`method` minus `base` on each score `scores(arm, question_indices)` returns, with a 95% interval from
    resampling the `n` held-out questions with replacement -- one draw for both arms, which answered the same
    questions (a rate over a subset the draw leaves empty is nan and skipped). {name: {"diff", "95"}, "questions"}."""
    return pooled_paired_differences(scores, [(base, method, n)], names=names, draws=draws, seed=seed)


def pooled_paired_differences(scores: Callable[[object, np.ndarray], Sequence[float]],
                              pairs: Sequence[tuple[object, object, int]], *, names: Sequence[str],
                              draws: int = 2000, seed: int = 0) -> dict:
    """`paired_differences` over several seeds' (base, method, n): the mean over seeds of each seed's difference,
    its interval from resampling every seed's questions in each draw. It holds the evaluation's noise only; the
    training seeds themselves are the units of the training noise (a seed whose rate a draw leaves undefined is
    left out of that draw's mean). {name: {"diff", "95"}, "questions" (summed), "seeds"}."""
    if not pairs:
        raise ValueError("pooled_paired_differences: no (base, method, n) pairs")

    def mean_diff(draw):
        per_seed = [np.subtract(scores(m, idx), scores(b, idx)) for (b, m, _), idx in zip(pairs, draw)]
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a score every seed leaves undefined stays nan
            return np.nanmean(np.asarray(per_seed, np.float64), axis=0)

    width = len(scores(pairs[0][0], np.arange(pairs[0][2])))
    if len(names) != width:
        raise ValueError(f"paired_differences: {len(names)} names for {width} scores")
    point = mean_diff([np.arange(n) for _, _, n in pairs])
    rng = np.random.default_rng(seed)
    d = np.asarray([mean_diff([rng.integers(0, n, n) for _, _, n in pairs]) for _ in range(draws)])
    # a score no draw defines (e.g. a break rate where no attempt was right) has no interval
    lo, hi = np.array([np.nanpercentile(col, [2.5, 97.5]) if np.isfinite(col).any() else [np.nan] * 2
                       for col in d.T]).T
    return {**{k: {"diff": float(p), "95": [float(a), float(b)]} for k, p, a, b in zip(names, point, lo, hi)},
            "questions": int(sum(n for _, _, n in pairs)), "seeds": len(pairs)}


def interval_line(label: str, d: dict, names: Sequence[str], scale: Sequence[float]) -> str:
    """'- label: name +x [lo, hi]; ...' from `paired_differences`' result, each value times its scale (100: in
    points, one decimal; otherwise three decimals)."""
    def fmt(x, m):
        return f"{x * m:+.1f}" if m == 100 else f"{x * m:+.3f}"

    return f"- {label}: " + "; ".join(f"{k} {fmt(d[k]['diff'], m)} [{fmt(d[k]['95'][0], m)}, {fmt(d[k]['95'][1], m)}]"
                                      for k, m in zip(names, scale))


def parse_bench_args(doc: str, method: str, argv=None, *, n_help: str, rounds_help: str):
    """(arguments, `--config.` overrides, the loaded config) of a method-against-GRPO benchmark's command line;
    a config whose method is not `method` is refused."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help=f"the {method.upper()} config (its method must be {method})")
    ap.add_argument("--workdir", default=f"runs/bench_{method}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rl-steps", type=int, default=0, help="RL steps per arm (0 = the config's)")
    ap.add_argument("--questions", type=int, default=256)
    ap.add_argument("--n", type=int, default=8, help=n_help)
    ap.add_argument("--rounds", type=int, default=2, help=rounds_help)
    ap.add_argument("--no-progress", action="store_true")
    args, overrides = config_overrides(ap, argv)
    base = load_config_file(args.config, overrides)
    if base.method.name != method:
        raise SystemExit(f"--config {args.config}: method.name must be '{method}'")
    return args, overrides, base


def config_overrides(parser, argv=None):
    """(the parsed arguments, the `--config.SECTION.KNOB=VALUE` overrides among them); anything else is refused."""
    args, rest = parser.parse_known_args(argv)
    bad = [a for a in rest if not a.startswith("--config.")]
    if bad:
        parser.error(f"unrecognised arguments {bad}; config knobs are set as --config.SECTION.KNOB=VALUE")
    return args, tuple(rest)


def cached_eval(cfg, key: dict, name: str = "bench_eval.json"):
    """The arm's evaluation file `name` when it was written for the same `key`, else None."""
    path = os.path.join(cfg.workdir, name)
    if os.path.exists(path):
        cached = json.load(open(path))
        if cached.get("key") == key:
            return cached
    return None


def save_eval(cfg, out: dict, name: str = "bench_eval.json") -> dict:
    json.dump(out, open(os.path.join(cfg.workdir, name), "w"), indent=2)
    return out
