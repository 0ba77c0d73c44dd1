"""experiment.compare: arms are config overrides, a warm-up is trained once per warm-up key, evaluations are cached
by checkpoint and spec, a killed compare reruns only what is missing, and the paired differences are what they
claim on synthetic numbers."""
import dataclasses
import json
import os

import numpy as np
import pytest

from jaxrl_reason.experiment import compare as cmp
from jaxrl_reason.experiment.evaluation import EvalSpec


def tiny_base():
    from jaxrl_reason.configs.tiny_default import get_config

    cfg = get_config()
    cfg.data.train_size, cfg.data.heldout_size = 300, 8
    cfg.data.min_operands = cfg.data.max_operands = 2
    cfg.model.hidden_size, cfg.model.num_hidden_layers, cfg.model.intermediate_size = 32, 2, 64
    cfg.tokenizer.vocab_size = 300
    cfg.sft.steps, cfg.sft.examples, cfg.sft.batch_size = 3, 100, 8
    cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.samples_per_prompt, cfg.rl.max_new_tokens = 2, 4, 2, 16
    cfg.rl.eval_every, cfg.rl.eval_batch_size, cfg.rl.progress = 1, 8, False
    return cfg


# ------------------------------------------------------------------------------------------------ arms and plan
def test_arm_parsing_and_grid():
    arm = cmp.Arm.parse("rlv:method.name=rlv,method.extra.verify_weight=0.3,data.operations=+-")
    assert arm == cmp.Arm("rlv", ("method.name=rlv", "method.extra.verify_weight=0.3", "data.operations=+-"))
    assert cmp.Arm.parse("grpo") == cmp.Arm("grpo", ())
    # a comma inside a value stays in it: the split is only before the next "key="
    assert cmp.Arm.parse("a:parallel.mesh_shape={'data': 1, 'fsdp': 1}").overrides == (
        "parallel.mesh_shape={'data': 1, 'fsdp': 1}",)
    arms = cmp.expand_grid([cmp.Arm("grpo"), cmp.Arm("rlv", ("method.name=rlv",))],
                           {"method.extra.verify_weight": ["0.3", "1"]}, baseline="grpo")
    assert [a.name for a in arms] == ["grpo", "rlv[verify_weight=0.3]", "rlv[verify_weight=1]"]
    assert arms[2].overrides == ("method.name=rlv", "method.extra.verify_weight=1")
    for bad, match in (("r v:rl.lr=1", "a name is letters"), ("x:rl.lr", "not section.knob=value")):
        with pytest.raises(ValueError, match=match):
            cmp.Arm.parse(bad)


def test_overrides_parse_as_the_training_script_parses_them():
    cfg = cmp.apply_overrides(tiny_base(), ["rl.lr=1e-4", "rl.steps=7", "method.name=rlv",
                                            "method.extra.verify_weight=0.3", "data.operations=+-"])
    assert cfg.rl.lr == 1e-4 and cfg.rl.steps == 7 and cfg.method.name == "rlv"
    assert cfg.method.extra.verify_weight == 0.3 and cfg.data.operations == "+-"
    assert tiny_base().rl.steps == 2  # the base is copied, not changed
    assert dict(cmp.apply_overrides(cfg, ["method.extra={}"]).method.extra) == {}
    with pytest.raises(ValueError, match=r"method.extra is a section; give it a dict"):
        cmp.apply_overrides(cfg, ["method.extra=1"])


@pytest.mark.parametrize("preset, layout", [("testbed_latin_cure", "first"), ("testbed_latin_cure_check", "after")])
def test_a_grpo_arm_of_a_cure_preset_shares_its_warm_up_and_guided_layout(preset, layout, tmp_path):
    """The GRPO arm of a CURE comparison (the preset with method.name=grpo and CURE's knobs dropped) warms up as the
    CURE arm does, guided re-solve rows in the CURE arm's layout included: the two share one warm-up. (When the
    layout was a CURE method knob, dropping the knobs dropped it, and the re-solve fixed 0 of 51 flagged wrong
    attempts, docs/results/cure_testbed.md.)"""
    import importlib

    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import row_formats

    base = importlib.import_module(f"jaxrl_reason.configs.{preset}").get_config()
    cells = cmp.plan(base, [cmp.Arm.parse("grpo:method.name=grpo,method.extra={}"), cmp.Arm("cure")], [0], "grpo",
                     str(tmp_path))
    grpo, cure = (read_run_config(cells[a, 0]) for a in ("grpo", "cure"))
    assert (grpo.method.name, cure.method.name) == ("grpo", "cure")
    assert grpo.data.guided_layout == cure.data.guided_layout == row_formats(cure.data).guided_layout == layout
    assert grpo.sft == cure.sft and cmp.warmup_key(grpo) == cmp.warmup_key(cure)


def test_token_curve_counts_rollouts_and_vine_continuations(tmp_path):
    (tmp_path / "logs").mkdir()
    records = [{"step": 1, "length/mean": 10.0, "vine/extra_tokens": 500.0},
               {"step": 2, "length/mean": 20.0, "vine/extra_tokens": 100.0},
               {"step": 2, "eval/accuracy": 0.6},
               {"step": 3, "length/mean": 5.0}]
    (tmp_path / "logs" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "results.json").write_text(json.dumps({"before": {"accuracy": 0.5}, "after": {"accuracy": 0.7}}))
    c = cmp.token_curve(str(tmp_path), rollouts_per_step=8)
    # 80 + 500, then 160 + 100 (evaluated there), then 40 more to the final checkpoint
    assert c["x"] == pytest.approx([0, 840, 880]) and c["y"] == [0.5, 0.6, 0.7] and c["step"] == [0, 2, 3]
    assert c["steps"] == 3 and c["total_tokens"] == pytest.approx(880)


def test_cells_differ_only_by_their_overrides_and_seed(tmp_path):
    from jaxrl_reason.experiment.config import read_run_config, run_config_dict

    cells = cmp.plan(tiny_base(), [cmp.Arm("a"), cmp.Arm("b", ("rl.lr=1e-3", "method.name=rlv"))], [0, 3], "a",
                     str(tmp_path))
    flat = {k: _flat(run_config_dict(read_run_config(c))) for k, c in cells.items()}
    differ = lambda x, y: sorted(k for k in flat[x] if flat[x][k] != flat[y][k])  # noqa: E731
    assert differ(("a", 0), ("b", 0)) == ["method.name", "rl.lr", "workdir"]
    assert differ(("a", 0), ("a", 3)) == ["seed", "workdir"]
    assert flat["b", 3]["workdir"] == str(tmp_path / "runs" / "b" / "seed3")


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "mesh_shape":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def test_a_bad_arm_is_refused_before_anything_trains(tmp_path):
    def train(cfg):
        raise AssertionError("nothing may train")

    base = tiny_base()
    cases = [([cmp.Arm("a"), cmp.Arm("b", ("rl.lrr=1e-4",))], "a", r"arm 'b'.*rl\.lrr.*did you mean rl\.lr"),
             ([cmp.Arm("a"), cmp.Arm("b", ("method.extra.verify_wieght=1", "method.name=rlv"))], "a",
              r"arm 'b'.*verify_wieght"),
             ([cmp.Arm("a"), cmp.Arm("b", ("metod.name=rlv",))], "a", r"no section 'metod'"),
             ([cmp.Arm("a"), cmp.Arm("a", ("rl.lr=1e-4",))], "a", r"given twice; rename one"),
             ([cmp.Arm("a"), cmp.Arm("b")], "grpo", r"baseline 'grpo' is not an arm.*--baseline")]
    for arms, baseline, match in cases:
        with pytest.raises(ValueError, match=match):
            cmp.compare(base, arms, [0], baseline=baseline, out_dir=str(tmp_path), train=train)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        cmp.compare(base, [cmp.Arm("a")], [0, 0], out_dir=str(tmp_path), train=train)
    assert not os.path.exists(tmp_path / "runs")


def test_warmup_key_follows_the_settings_that_shape_the_warmup():
    from jaxrl_reason.experiment.config import read_run_config

    key = lambda *o: cmp.warmup_key(read_run_config(cmp.apply_overrides(tiny_base(), list(o))))  # noqa: E731
    assert key() == key("rl.lr=1e-4", "method.name=rlv", "rl.steps=9", "workdir=/elsewhere")
    for o in ("sft.lr=1e-3", "seed=1", "rl.max_new_tokens=20", "model.hidden_size=64", "data.train_size=301"):
        assert key(o) != key(), o


def test_cli_refuses_a_bad_arm_by_name_before_training(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "experiments", "compare.py"), "--config",
                           os.path.join(root, "jaxrl_reason", "configs", "grpo.py"), "--arm", "grpo",
                           "--arm", "rlv:method.name=rlv,method.extra.verify_wieght=1", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu"),
                          timeout=600)
    assert done.returncode != 0 and "arm 'rlv'" in done.stderr and "verify_wieght" in done.stderr, done.stderr[-2000:]
    assert not os.path.exists(tmp_path / "runs")


# ------------------------------------------------------------------------------------------- paired differences
def test_paired_differences_on_synthetic_numbers():
    rng = np.random.default_rng(0)
    base = [rng.random(50), rng.random(80)]
    shift = [0.1, 0.3]
    arm = [b + s for b, s in zip(base, shift)]
    d = cmp.paired_differences(base, arm, draws=200)
    # a constant per-question difference: the difference itself, and an interval of width 0 (pairing removes the
    # spread the two arms share)
    for got, s in zip(d["per_seed"], shift):
        assert got["diff"] == pytest.approx(s) and got["95"] == pytest.approx([s, s])
    assert d["pooled"]["diff"] == pytest.approx(0.2) and d["pooled"]["95"] == pytest.approx([0.2, 0.2])
    assert d["questions"] == 130
    # 0/1 differences: the percentile interval of the bootstrap mean, near the normal one
    flips = [np.r_[np.ones(300), np.zeros(700)]]
    d = cmp.paired_differences([np.zeros(1000)], flips, draws=4000, seed=1)["per_seed"][0]
    se = np.sqrt(0.3 * 0.7 / 1000)
    assert d["diff"] == pytest.approx(0.3)
    assert d["95"][0] == pytest.approx(0.3 - 1.96 * se, abs=0.006) and d["95"][1] == pytest.approx(0.3 + 1.96 * se,
                                                                                                   abs=0.006)
    with pytest.raises(ValueError, match="same questions"):
        cmp.paired_differences([np.zeros(3)], [np.zeros(4)])
    with pytest.raises(ValueError, match="one array per seed"):
        cmp.paired_differences([np.zeros(3)], [np.zeros(3)] * 2)


def test_summary_medians_and_matched_tokens_on_synthetic_cells():
    def cell(before, after, xs, ys, pq):
        return {"before": before, "after": after, "curve": {"x": xs, "y": ys, "total_tokens": xs[-1]},
                "eval": {"pass@1": float(np.mean(pq))}, "per_question": {"pass@1": pq}}

    cells = {("g", 0): cell(0.5, 0.6, [0, 100], [0.5, 0.6], [1, 0, 0, 1]),
             ("g", 1): cell(0.4, 0.5, [0, 100], [0.4, 0.5], [0, 0, 1, 1]),
             ("g", 2): cell(0.3, 0.9, [0, 100], [0.3, 0.9], [1, 1, 1, 1]),
             ("r", 0): cell(0.5, 0.8, [0, 200], [0.5, 0.9], [1, 1, 0, 1]),
             ("r", 1): cell(0.4, 0.4, [0, 200], [0.4, 0.4], [0, 0, 1, 1]),
             ("r", 2): cell(0.3, 0.3, [0, 200], [0.3, 0.3], [1, 1, 1, 0])}
    s = cmp.summarize(cells, ["g", "r"], [0, 1, 2], "g", draws=100)
    rows = {r["arm"]: r for r in s["rows"]}
    assert rows["g"]["after"]["median"] == pytest.approx(0.6) and rows["r"]["after"]["seeds"] == [0.8, 0.4, 0.3]
    # matched tokens: the smallest budget every run reached (100); r's seed 0 is halfway up its curve there
    assert s["budget_tokens"] == 100 and rows["r"]["at_budget"]["seeds"] == pytest.approx([0.7, 0.4, 0.3])
    p = s["paired"]["r"]
    assert [x["diff"] for x in p["after"]["per_seed"]] == pytest.approx([0.2, -0.1, -0.6])
    assert p["after"]["pooled"]["diff"] == pytest.approx(-0.5 / 3)
    assert [x["diff"] for x in p["pass@1"]["per_seed"]] == pytest.approx([0.25, 0.0, -0.25])
    assert p["pass@1"]["per_seed"][1]["95"] == [0.0, 0.0]
    md = cmp.markdown_report(dict(s, warmups={}))
    assert "| r | held-out after RL | 0.200 / -0.100 / -0.600 | -0.167 |" in md
    assert "**0.400** (0.800 / 0.400 / 0.300)" in md


# -------------------------------------------------------------------------------- end to end on the tiny model
@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Three arms of one seed: a and b share the warm-up settings (they differ in the RL learning rate), c does
    not (its SFT learning rate differs); each evaluated with 2 samples on the 8 held-out questions."""
    from jaxrl_reason.experiment import warmup

    out = tmp_path_factory.mktemp("compare")
    calls = {"sft": 0, "eval": 0}
    run_sft, evaluate = warmup.run_sft, cmp.evaluate_run

    def counting_sft(*a, **k):
        calls["sft"] += 1
        return run_sft(*a, **k)

    def counting_eval(*a, **k):
        calls["eval"] += 1
        return evaluate(*a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(warmup, "run_sft", counting_sft)
    spec = EvalSpec(n=2, num_subsets=10, progress=False, max_new_tokens=None, temperature=None, seed=None,
                    check_tokens=None)
    arms = ["a", "b:rl.lr=1e-3", "c:sft.lr=1e-3"]
    summary = cmp.compare(tiny_base(), arms, [0], spec, baseline="a", out_dir=str(out), evaluate=counting_eval)
    first = dict(calls)
    again = cmp.compare(tiny_base(), arms, [0], spec, baseline="a", out_dir=str(out), evaluate=counting_eval)
    mp.undo()
    return out, summary, again, first, dict(calls)


@pytest.mark.slow
def test_compare_end_to_end(compared):
    out, summary, again, first, calls = compared
    # warm-ups: one for a and b (same settings), one for c
    assert first["sft"] == 2 and summary["warmups"] == {"trained": 2, "shared": 1}
    runs = out / "runs"
    a, b = (json.loads((runs / n / "seed0" / "results.json").read_text()) for n in ("a", "b"))
    assert a["before"] == b["before"] and "sft_seconds" in b  # b started RL from a's warm-up, with its report
    # every distinct checkpoint evaluated once (the cache is keyed by the checkpoint's bytes: a run whose rewards
    # were all 0 kept its warm-up's weights, and shares that evaluation); the second compare trained nothing and
    # read every evaluation from the cache
    distinct = {cmp._checkpoint_digest(str(runs / n / "seed0" / "final")) for n in "abc"}
    assert first["eval"] == len(distinct) == len(os.listdir(out / "evals")) >= 2
    assert calls == first and again["warmups"] == {"trained": 0, "shared": 0} and again["rows"] == summary["rows"]
    rows = {r["arm"]: r for r in summary["rows"]}
    assert set(rows) == {"a", "b", "c"} and 0.0 <= rows["b"]["pass@1"]["median"] <= 1.0
    assert set(summary["paired"]) == {"b", "c"} and summary["paired"]["b"]["pass@1"]["questions"] == 8
    for name in ("summary.json", "summary.md", "curves.png"):
        assert (out / name).stat().st_size > 0
    # a cached evaluation keeps its samples, and the budget table is recomputed from them under the current rule
    cached = [json.loads(p.read_text()) for p in (out / "evals").iterdir()]
    assert all(len(e["samples"]) == 8 for e in cached)
    assert again["budgets"]["table"] == summary["budgets"]["table"] and "5%" in cached[0]["budgets"]["rule"]
    # a killed compare (here: one cell's final checkpoint removed) reruns that cell only
    import shutil

    shutil.rmtree(runs / "c" / "seed0" / "final")
    done = []

    def fake_train(cfg):
        done.append(os.path.basename(os.path.dirname(cfg.workdir)))
        shutil.copytree(runs / "a" / "seed0" / "final", os.path.join(cfg.workdir, "final"))

    cmp.compare(tiny_base(), ["a", "b:rl.lr=1e-3", "c:sft.lr=1e-3"], [0], baseline="a", out_dir=str(out),
                train=fake_train, plot=False)
    assert done == ["c"]


def test_warmup_seed_shares_one_warmup_over_run_seeds(tmp_path):
    from jaxrl_reason.experiment.config import read_run_config

    key = lambda *o: cmp.warmup_key(read_run_config(cmp.apply_overrides(tiny_base(), list(o))))  # noqa: E731
    assert key("seed=1", "warmup_seed=0") == key("seed=2", "warmup_seed=0") == key()
    assert key("seed=0", "warmup_seed=1") == key("seed=1") != key()
    rc = read_run_config(cmp.apply_overrides(tiny_base(), ["seed=3", "warmup_seed=1"]))
    assert (rc.setup_seed, rc.seed, rc.rl.seed) == (1, 3, 3)
    with pytest.raises(ValueError, match="warmup_seed=-2"):
        read_run_config(cmp.apply_overrides(tiny_base(), ["warmup_seed=-2"]))

    # through compare: seeds 5 and 6 of one arm, warm-up at seed 5: the second cell starts from the first's warm-up
    seen = []

    def fake_train(cfg):
        rc = read_run_config(cfg)
        shared = os.path.exists(os.path.join(cfg.workdir, "sft_model", "config.json"))
        seen.append((rc.seed, rc.setup_seed, shared))
        for d in ("sft_model", "final"):
            os.makedirs(os.path.join(cfg.workdir, d), exist_ok=True)
            open(os.path.join(cfg.workdir, d, "config.json"), "w").write("{}")
        os.makedirs(os.path.join(cfg.workdir, "logs"), exist_ok=True)
        open(os.path.join(cfg.workdir, "logs", "metrics.jsonl"), "w").write('{"step": 1, "length/mean": 4.0}\n')
        json.dump({"before": {"accuracy": 0.5}, "after": {"accuracy": 0.5}, "rl_steps": rc.rl.steps},
                  open(os.path.join(cfg.workdir, "results.json"), "w"))

    summary = cmp.compare(cmp.apply_overrides(tiny_base(), ["warmup_seed=5"]), ["a"], [5, 6], out_dir=str(tmp_path),
                          train=fake_train, plot=False)
    assert seen == [(5, 5, False), (6, 5, True)] and summary["warmups"] == {"trained": 1, "shared": 1}


@pytest.mark.slow
def test_warmup_seed_gives_the_same_data_and_warmup_to_other_run_seeds(tmp_path):
    """A run at seed 1 with warmup_seed 0 trains on seed 0's data split from seed 0's warm-up (weights equal)."""
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.pipeline import run

    def weights(workdir):
        d = os.path.join(workdir, "sft_model")
        return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}

    runs = {}
    for name, o in (("s0", ["seed=0"]), ("s1w0", ["seed=1", "warmup_seed=0"])):
        cfg = cmp.apply_overrides(tiny_base(), o + [f"workdir={tmp_path / name}", "rl.steps=1"])
        run(cfg)
        runs[name] = str(tmp_path / name)
    a, b = weights(runs["s0"]), weights(runs["s1w0"])
    assert a.keys() == b.keys() and any(k.endswith(".safetensors") for k in a) and a == b
    assert (tmp_path / "s0" / "heldout.jsonl").read_text() == (tmp_path / "s1w0" / "heldout.jsonl").read_text()
    # without warmup_seed, seed 1 would draw another training split (and init): the equality above is the knob's
    data = read_run_config(tiny_base()).data
    assert [e.question for e in build_data(data, 1).train] != [e.question for e in build_data(data, 0).train]


def test_resolve_spec_fills_the_runs_own_fields_and_its_critique_budget():
    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.evaluation import RUN_OWN, read_eval_spec

    spec = read_eval_spec(dict.fromkeys(RUN_OWN))
    cure = read_run_config(load_config_file("testbed_latin_cure"))
    got = cmp.resolve_spec(spec, cure)
    assert (got.max_new_tokens, got.temperature, got.guided_layout) == (cure.rl.max_new_tokens, cure.rl.temperature,
                                                                        cure.data.guided_layout)
    # the critique budget the run trained at, not the solve budget (32 tokens would cut every critique)
    assert got.critique_max_new_tokens == cure.method.extra["critique_max_new_tokens"] == 160
    assert got.correction_max_new_tokens is None  # CURE has no correction budget: evaluate_run's default
    assert cmp.resolve_spec(dataclasses.replace(spec, critique_max_new_tokens=48), cure).critique_max_new_tokens == 48
    grpo = read_run_config(tiny_base())
    assert cmp.resolve_spec(spec, grpo).critique_max_new_tokens is None


def test_warmup_stages_run_in_the_configured_order_and_a_bad_order_is_refused(monkeypatch):
    from jaxrl_reason.experiment import warmup
    from jaxrl_reason.experiment.config import read_run_config

    ran = []
    for name, (steps, key, _) in list(warmup.STAGES.items()):
        monkeypatch.setitem(warmup.STAGES, name, (steps, key, lambda *a, _n=name, **k: ran.append(_n) or {}))
    monkeypatch.setattr(warmup, "save_hf", lambda *a, **k: None)
    monkeypatch.setattr(warmup, "load_hf", lambda *a, **k: "model")
    monkeypatch.setattr(warmup.os.path, "exists", lambda p: p.endswith(os.path.join(warmup.SFT_ONLY, "config.json")))
    for order, steps, want in (("own_attempts,check,verify", (5, 5, 5), ["own_attempts", "check", "verify"]),
                               ("verify,check,own_attempts", (5, 0, 5), ["verify", "own_attempts"])):
        ran.clear()
        rc = read_run_config(cmp.apply_overrides(tiny_base(), [
            f"sft.stage_order={order}", f"sft.own_attempt_steps={steps[0]}", f"sft.check_steps={steps[1]}",
            f"sft.verify_steps={steps[2]}"]))
        model, report = warmup.warmed_up_policy(rc, None, None, "/nonexistent")
        assert ran == want and set(report) == {"sft_resumed_from"} | {warmup.STAGES[n][1] for n in want}
    for bad in ("verify,own_attempts", "verify,check,own_attempts,verify", "verify,chek,own_attempts"):
        with pytest.raises(ValueError, match="sft.stage_order"):
            warmup.stage_order(read_run_config(cmp.apply_overrides(tiny_base(), [f"sft.stage_order={bad}"])))
    from jaxrl_reason.configs import load_config_file

    assert warmup.stage_order(read_run_config(load_config_file("testbed_latin_self_check")))[0] == "verify"
