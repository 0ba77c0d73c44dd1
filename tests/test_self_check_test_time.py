"""Test time for a self-checking policy (inference/self_check.py): the critique-verdict score, the combined strategy,
every strategy at matched budgets, end to end through evaluate_run on a tiny model, and compare's strategy x budget
table."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.datasets import write_jsonl
from jaxrl_reason.data.prompts import critique_prompt, critique_verdict_prefix, solve_prompt, verify_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.experiment import compare as cmp
from jaxrl_reason.experiment.evaluation import EvalSpec, evaluate_run, load_data, markdown_table, write_outputs
from jaxrl_reason.inference import self_check as sc
from jaxrl_reason.inference.test_time import accuracy_curves, weighted_vote
from jaxrl_reason.models.qwen2 import ModelConfig, init_model, positions_from_mask
from jaxrl_reason.rewards.base import RewardResult


def corpus():
    exs = arithmetic_examples(20, seed=4)
    return ([solve_prompt(e.question) + "\n" + e.solution for e in exs]
            + [verify_prompt(e.question, e.solution) + " Yes No" for e in exs]
            + [critique_prompt(e.question, e.solution) + critique_verdict_prefix(b) for e in exs[:5]
               for b in (True, False)])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from jaxrl_reason.models.hf_port import save_pretrained

    root = tmp_path_factory.mktemp("ckpt")
    tok = train_tiny_tokenizer(corpus(), root / "model", vocab_size=320)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    model = init_model(cfg, seed=1)
    # larger weights than the 0.02-std init: scores that vary across inputs, so comparisons can fail
    nnx.update(model, jax.tree.map(lambda a: a * 6.0, nnx.state(model, nnx.Param)))
    save_pretrained(model, str(root / "model"))
    write_jsonl(arithmetic_examples(3, seed=8), root / "data.jsonl")
    return root


def loaded(ckpt):
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    return load_pretrained(str(ckpt / "model")), Tokenizer.from_pretrained(str(ckpt / "model"))


# ------------------------------------------------------------------------------------------- critique score
def test_critique_score_is_p_false_read_off_the_logits(ckpt):
    model, tok = loaded(ckpt)
    exs = arithmetic_examples(3, seed=11)
    questions, solutions = [e.question for e in exs], [exs[0].solution, "It is \\boxed{7}.", ""]
    wrong, right = tok.encode(critique_verdict_prefix(True)), tok.encode(critique_verdict_prefix(False))
    head = next(i for i in range(min(len(wrong), len(right))) if wrong[i] != right[i])
    ids = sc.critique_verdict_ids(tok)
    assert ids.head == right[:head] and (ids.right, ids.wrong) == (right[head], wrong[head])
    lp = sc.critique_logprobs(model, tok, questions, solutions, batch_size=2)
    scorer = sc.own_scorer(model, tok, "critique")
    scores, prefill, written = scorer.scores(questions, solutions)
    for i, (q, s) in enumerate(zip(questions, solutions)):
        row = tok.encode(tok.render_prompt(critique_prompt(q, s))) + right[:head]
        seg = np.ones((1, len(row)), np.int32)
        logits = np.asarray(model(jnp.asarray([row]), jnp.asarray(positions_from_mask(seg)), jnp.asarray(seg)))
        last = logits[0, -1].astype(np.float64)
        p = np.exp(last - last.max())
        p /= p.sum()
        np.testing.assert_allclose(np.exp(lp[i]), [p[right[head]], p[wrong[head]]], rtol=1e-4)
        assert scores[i] == pytest.approx(p[right[head]], rel=1e-4)
        assert prefill[i] == len(row) and written[i] == 0
    assert len(set(np.round(scores, 6))) > 1  # the score reads the solution


def test_critique_score_refuses_a_worked_check_critique():
    with pytest.raises(ValueError, match="critique_format=worked_check"):
        EvalSpec(critique_score=True, critique_format="worked_check")
    with pytest.raises(ValueError, match="critique_format"):
        sc.critique_inputs(None, ["q"], ["s"], critique_format="worked_check")


@pytest.mark.parametrize("field, value", [("combined_n", 5), ("combined_score", "judge"),
                                          ("combined_revise", "vote"), ("combined_threshold", 1.5),
                                          ("combined_bottom", -0.1), ("budget_multiples", "1,0"),
                                          ("prompt_wording", "long")])
def test_bad_knobs_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"EvalSpec.{field}"):
        EvalSpec(n=4, **{field: value})


# ---------------------------------------------------------------------------------------- combined strategy
def synthetic_pool(q=3, n=4, seed=0):
    rng = np.random.default_rng(seed)
    exs = arithmetic_examples(q, seed=3)
    samples = []
    for e in exs:
        answers = [str(int(e.answer) + int(d)) for d in rng.integers(0, 3, n)]
        correct = [float(a == e.answer) for a in answers]
        samples.append({"question": e.question, "completions": [f"so \\boxed{{{a}}}" for a in answers],
                        "answers": answers, "correct": correct, "lengths": rng.integers(3, 9, n).tolist(),
                        "classes": [0] * n})
    return exs, {"n": n, "samples": samples}


def stub_reward(texts, examples):
    answers = [t.split("{")[-1].rstrip("}.") for t in texts]
    return RewardResult(scores=[float(a == e.answer) for a, e in zip(answers, examples)],
                        details=[{"extracted": a} for a in answers])


def stub_scorer(table):
    """Scores by text from `table` (a revision's text: 0.9), prefill = 10 per row."""
    def scores(questions, solutions):
        s = np.array([table.get(t, 0.9) for t in solutions], np.float32)
        return s, np.full(len(s), 10, np.int64), np.zeros(len(s), np.int64)
    return sc.OwnScorer("stub", scores)


def test_combined_with_every_sample_above_the_threshold_is_the_plain_weighted_vote():
    exs, pool = synthetic_pool()
    rng = np.random.default_rng(1)
    table = {t: float(rng.uniform(0.3, 1.0)) for r in pool["samples"] for t in r["completions"]}

    def never(*a):
        raise AssertionError("nothing is below the threshold: nothing may be revised")

    res = sc.combined_strategy(None, None, exs, stub_reward, pool, scorer=stub_scorer(table), revise=never, n=4,
                               ks=[1, 2, 4], threshold=0.2)
    assert res["revisions"] == 0
    for row in res["rows"]:
        k = row["k"]
        want = [int(weighted_vote(r["answers"][:k], [table[t] for t in r["completions"][:k]],
                                  correct=r["correct"][:k]).correct) for r in pool["samples"]]
        assert row["per_question"] == want and row["acc"] == pytest.approx(np.mean(want))
        assert row["tokens"] == pytest.approx(np.mean([sum(r["lengths"][:k]) for r in pool["samples"]]))
        assert row["revised"] == 0.0 and row["prefill"] == pytest.approx(10 * k)


def test_combined_at_threshold_one_revises_everything_and_counts_its_tokens():
    exs, pool = synthetic_pool()
    table = {t: 0.4 for r in pool["samples"] for t in r["completions"]}
    seen = []

    def fix(examples, texts, correct):  # every revision writes the right answer in 5 tokens
        seen.extend(texts)
        return [f"fixed \\boxed{{{e.answer}}}" for e in examples], [5] * len(texts), [True] * len(texts)

    res = sc.combined_strategy(None, None, exs, stub_reward, pool, scorer=stub_scorer(table), revise=fix, n=4,
                               ks=[1, 4], threshold=1.0)
    assert res["revisions"] == res["revisions_made"] == 12 and len(seen) == 12
    for row in res["rows"]:
        k = row["k"]
        assert row["revised"] == 1.0 and row["acc"] == 1.0  # revisions (0.9) outvote the originals (0.4 each)
        assert row["tokens"] == pytest.approx(np.mean([sum(r["lengths"][:k]) + 5 * k for r in pool["samples"]]))
        assert row["prefill"] == pytest.approx(10 * 2 * k)
    # a bottom fraction: the lowest-scored ceil(f k), ties to the earlier sample
    assert sc.select_low(np.array([0.5, 0.1, 0.1, 0.9]), 4, threshold=0.0, bottom=0.5).tolist() == [
        False, True, True, False]
    assert sc.select_low(np.array([0.5, 0.1, 0.1, 0.9]), 3, threshold=0.0, bottom=0.5).tolist() == [
        False, True, True]


# --------------------------------------------------------------------------------------------- budgets
def test_matched_budgets_take_the_costliest_setting_within_each_budget():
    _, pool = synthetic_pool(q=3, n=4)
    correct = np.array([r["correct"] for r in pool["samples"]])
    classes = np.array([np.unique(r["answers"], return_inverse=True)[1] for r in pool["samples"]])
    for r, c in zip(pool["samples"], classes):
        r["classes"] = c.tolist()
        r["scores"] = {"self": np.linspace(0.2, 0.8, 4).tolist()}
    results = {"samples": pool["samples"], "ks": [1, 2, 4], "num_subsets": 50, "config": {"seed": 3},
               "mean_completion_tokens": 10.0,
               "strategies": accuracy_curves(correct, classes, [1, 2, 4],
                                             scores={"self": np.tile(np.linspace(0.2, 0.8, 4), (3, 1))},
                                             num_subsets=50, seed=3),
               "refinement": {"rows": [{"round": 0, "acc": 0.0, "tokens": 10.0}, {"round": 1, "acc": 1 / 3,
                                                                                 "tokens": 20.5},
                                       {"round": 2, "acc": 2 / 3, "tokens": 38.0}],
                              "per_example": {"correct": [[0, 0, 0], [0, 1, 0], [1, 1, 0]]}},
               "correction": {"rows": [{"round": 0, "acc": 1 / 3, "tokens": 12.0},
                                       {"round": 1, "acc": 1 / 3, "tokens": 20.0}],
                              "correct": [[1, 0, 0], [0, 0, 1]]}}
    b = sc.matched_budgets(results)
    t = b["table"]
    assert b["multiples"] == [1, 2, 4, 8] and b["unit_tokens"] == 10.0 and "pass@k" not in t
    assert [c["point"] for c in t["maj@k"]] == ["k=1", "k=2", "k=4", "k=4"]
    # round 0 is one plain sample, not the strategy: refinement starts at round 1 (20.5 tokens: within 2x + 5%)
    assert [c["point"] for c in t["self-refinement"]] == [None, "round=1", "round=2", "round=2"]
    assert [c["point"] for c in t["self-correction"]] == [None, "round=1", "round=1", "round=1"]
    assert t["self-correction"][0]["acc"] is None and "1" not in b["per_question"]["self-correction"]
    # the correction's greedy round-0 attempt is its own strategy (12 tokens: over 1x + 5%, within 2x)
    assert [c["point"] for c in t["greedy"]] == [None, "k=1", "k=1", "k=1"]
    assert b["per_question"]["greedy"]["2"] == [1.0, 0.0, 0.0]
    assert b["per_question"]["self-refinement"]["4"] == [1.0, 1.0, 0.0]
    strict = sc.matched_budgets(results, slack=0.0)["table"]["self-refinement"]
    assert [c["point"] for c in strict] == [None, None, "round=2", "round=2"]  # 20.5 tokens > a 2x budget of 20
    with pytest.raises(ValueError, match="slack must lie in"):
        sc.matched_budgets(results, slack=1.5)
    # a vote's per-question values average to the pool's own number at that k
    for name, key in (("maj@k", "majority"), ("BoN@k (self)", "best_of_n"), ("weighted@k (self)", "weighted")):
        for j, m in enumerate((1, 2, 4)):
            assert np.mean(b["per_question"][name][str(m)]) == pytest.approx(results["strategies"][key]["mean"][j])
            assert t[name][j]["acc"] == pytest.approx(results["strategies"][key]["mean"][j])


# ------------------------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("revise", ["refine", "correct"])
def test_every_new_strategy_end_to_end(ckpt, tmp_path, revise):
    model, tok = loaded(ckpt)
    examples = load_data(str(ckpt / "data.jsonl"))
    spec = EvalSpec(n=4, max_new_tokens=6, num_subsets=10, progress=False, critique_score=True, combined_n=4,
                    combined_revise=revise, combined_threshold=1.0, combined_score="critique",
                    critique_max_new_tokens=6, refine_rounds=1, correction_rounds=1)
    res = evaluate_run(model, tok, examples, spec)
    assert {"best_of_n_critique", "weighted_critique"} <= set(res["strategies"]) and "critique" in res["verifier"]
    assert all(len(r["scores"]["critique"]) == 4 for r in res["samples"])
    c = res["combined"]
    assert c["revisions"] == 3 * 4 and [r["k"] for r in c["rows"]] == [1, 2, 4]
    assert all(r["revised"] == 1.0 for r in c["rows"])
    for r in c["rows"]:  # threshold 1: every sample revised, so the tokens exceed the samples' own
        own = np.mean([sum(s["lengths"][:r["k"]]) for s in res["samples"]])
        assert r["tokens"] > own and r["prefill"] > 0 and len(r["per_question"]) == 3
    t = res["budgets"]["table"]
    label = sc.combined_label(c["config"])
    assert {"maj@k", "BoN@k (critique)", "self-refinement", "self-correction", label} <= set(t)
    md = markdown_table(res)
    assert f"## {label}" in md and "## Every strategy at matched budgets" in md and "| BoN@k (critique) |" in md
    paths = write_outputs(res, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["budgets"]["multiples"] == [1, 2, 4, 8]


def test_combined_with_nothing_low_on_a_model_is_its_weighted_vote(ckpt):
    model, tok = loaded(ckpt)
    examples = load_data(str(ckpt / "data.jsonl"))
    spec = EvalSpec(n=4, max_new_tokens=6, num_subsets=10, progress=False, combined_n=4, combined_threshold=0.0)
    res = evaluate_run(model, tok, examples, spec)
    assert res["combined"]["revisions"] == 0
    for row in res["combined"]["rows"]:
        k = row["k"]
        want = [int(weighted_vote(s["answers"][:k], s["scores"]["self"][:k], correct=s["correct"][:k]).correct)
                for s in res["samples"]]
        assert row["per_question"] == want
        assert row["tokens"] == pytest.approx(np.mean([sum(s["lengths"][:k]) for s in res["samples"]]))


# ------------------------------------------------------------------------------------------------ compare
def test_compare_reports_strategies_at_matched_budgets_and_their_paired_differences(tmp_path):
    def cell(pq, acc_tokens):
        budgets = {"multiples": [1, 2], "table": {"maj@k": [{"multiple": 1, "acc": float(np.mean(pq[0])),
                                                             "tokens": acc_tokens, "point": "k=1"},
                                                            {"multiple": 2, "acc": float(np.mean(pq[1])),
                                                             "tokens": 2 * acc_tokens, "point": "k=2"}]},
                   "per_question": {"maj@k": {"1": pq[0], "2": pq[1]}}}
        return {"before": 0.1, "after": 0.2, "curve": {"x": [0, 10], "y": [0.1, 0.2], "total_tokens": 10},
                "budgets": budgets}

    cells = {("g", 0): cell([[1, 0, 0, 0], [1, 1, 0, 0]], 5.0), ("g", 1): cell([[0, 0, 0, 0], [1, 0, 0, 0]], 6.0),
             ("u", 0): cell([[1, 1, 0, 0], [1, 1, 1, 0]], 4.0), ("u", 1): cell([[1, 0, 0, 0], [1, 1, 0, 0]], 6.0)}
    s = cmp.summarize(cells, ["g", "u"], [0, 1], "g", draws=50)
    b = s["budgets"]
    assert b["table"]["u"]["maj@k"][1]["seeds"] == [0.75, 0.5] and b["table"]["u"]["maj@k"][1]["acc"] == 0.625
    d = b["paired"]["u"]["maj@k"]["2"]
    assert [x["diff"] for x in d["per_seed"]] == pytest.approx([0.25, 0.25]) and d["pooled"]["diff"] == 0.25
    md = cmp.markdown_report(s)
    assert "## Test-time strategies at matched budgets" in md and "| maj@k | **0.125** (0.250 / 0.000) |" in md
    assert "| u | maj@k | 2x |" in md
    from jaxrl_reason.experiment.plots import strategy_budget_curves

    strategy_budget_curves(b["table"], path=tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"



def test_compare_pairs_each_arms_best_strategy_at_each_budget_against_the_baselines_best():
    def cell(maj, wtd):  # per-question values at budgets 1x and 2x for two strategies
        table = {name: [{"multiple": m, "acc": float(np.mean(v[i])), "tokens": 5.0 * m, "point": "-"}
                        for i, m in enumerate((1, 2)) if v[i] is not None] for name, v in (("maj", maj), ("wtd", wtd))}
        pq = {name: {str(m): v[i] for i, m in enumerate((1, 2)) if v[i] is not None}
              for name, v in (("maj", maj), ("wtd", wtd))}
        return {"before": 0.1, "after": 0.2, "curve": {"x": [0, 10], "y": [0.1, 0.2], "total_tokens": 10},
                "budgets": {"multiples": [1, 2], "table": table, "per_question": pq}}

    # g: maj is its best at both budgets; u: maj at 1x, wtd at 2x (wtd does not fit 1x for u)
    cells = {("g", 0): cell([[1, 0, 0, 0], [1, 1, 0, 0]], [[0, 0, 0, 0], [1, 0, 0, 0]]),
             ("g", 1): cell([[1, 1, 0, 0], [1, 1, 0, 0]], [[1, 0, 0, 0], [0, 0, 0, 0]]),
             ("u", 0): cell([[1, 0, 0, 0], [1, 0, 0, 0]], [None, [1, 1, 1, 1]]),
             ("u", 1): cell([[0, 0, 0, 0], [1, 0, 0, 0]], [None, [1, 1, 1, 0]])}
    b = cmp.summarize(cells, ["g", "u"], [0, 1], "g", draws=50)["budgets"]
    assert [p["strategy"] for p in b["best"]["g"]] == ["maj", "maj"]
    assert [p["strategy"] for p in b["best"]["u"]] == ["maj", "wtd"] and b["best"]["u"][1]["seeds"] == [1.0, 0.75]
    d = b["paired_best"]["u"]
    assert [x["diff"] for x in d["1"]["per_seed"]] == pytest.approx([0.0, -0.5])  # u's maj minus g's maj
    assert [x["diff"] for x in d["2"]["per_seed"]] == pytest.approx([0.5, 0.25])  # u's wtd minus g's maj
    md = cmp.markdown_report(cmp.summarize(cells, ["g", "u"], [0, 1], "g", draws=50))
    assert "| u | maj: **0.125** (0.250 / 0.000) | wtd: **0.875** (1.000 / 0.750) |" in md
    assert "### Best against best" in md and "| u | 2x | 0.500 [" in md


# ------------------------------------------------------------------------------------------- as a conversation
def test_refinement_and_correction_as_turns_of_one_conversation(ckpt):
    from jaxrl_reason.inference.correction import self_correct
    from jaxrl_reason.inference.refine import next_turn, self_refine
    from jaxrl_reason.data.prompts import guided_prompt, replay_correction_prompt

    _, tok = loaded(ckpt)
    exs = arithmetic_examples(2, seed=12)
    stop = tok.stop_ids[0]
    critique = ("ERROR_FOUND: true\nERROR_QUOTE: the last line\nWHY_IT_MATTERS: it changes the sum\n"
                "HIGH_LEVEL_HINT: add the numbers again one at a time and check every carry before the end")
    seen = []

    def generate(prompts, *, max_new_tokens):
        seen.append([list(p) for p in prompts])
        text = critique if len(seen) % 2 == 1 else "so \\boxed{3}"
        return [tok.encode(text) + [stop] for _ in prompts]

    def reward(texts, examples):
        return RewardResult(scores=[0.0] * len(texts), details=[{}] * len(texts))

    res = self_refine(None, tok, exs, reward, rounds=2, max_new_tokens=8, generate=generate, initial=["it is 5"] * 2,
                      conversation=True)
    solve = tok.encode(tok.render_prompt(solve_prompt(exs[0].question)))
    history = solve + tok.encode("it is 5")
    c1 = next_turn(tok, history, critique_prompt(exs[0].question, "it is 5"), tok.stop_ids)
    assert seen[0][0] == c1 and c1[:len(history)] == history
    g1 = seen[1][0]
    hint = "add the numbers again one at a time and check every carry before the end"
    assert g1 == next_turn(tok, c1 + tok.encode(critique) + [stop], guided_prompt(exs[0].question, hint),
                           tok.stop_ids)
    assert seen[2][0][:len(g1)] == g1  # round 2's critique continues after round 1's re-solve
    turns = res.turns
    assert turns["critique"][0, 0] == len(tok.encode(critique)) + 1 and turns["resolve"][0, 0] == 1 + len(
        tok.encode("so \\boxed{3}"))
    # what a cache continuation would prefill: only the new user turns
    assert turns["new_prompt"][0, 0] == (len(c1) - len(history)) + (len(g1) - len(c1) - len(tok.encode(critique)))
    assert turns["prompt"][0, 0] == len(c1) + len(g1)
    # single-turn (the default): every prompt is fresh, so all of it is new
    seen.clear()
    plain = self_refine(None, tok, exs, reward, rounds=1, max_new_tokens=8, generate=generate,
                        initial=["it is 5"] * 2)
    assert seen[0][0] == tok.encode(tok.render_prompt(critique_prompt(exs[0].question, "it is 5")))
    np.testing.assert_array_equal(plain.turns["prompt"], plain.turns["new_prompt"])

    seen.clear()
    out = self_correct(generate, tok, exs, ["it is 5"] * 2, reward, rounds=2, conversation=[solve, solve])
    ask1 = next_turn(tok, history, replay_correction_prompt(exs[0].question, "it is 5"), tok.stop_ids)
    assert seen[0][0] == ask1 and seen[1][0][:len(ask1)] == ask1
    assert out.new_prompt_tokens[1, 0] == len(ask1) - len(history) and out.prompt_tokens[1, 0] == len(ask1)


def test_as_conversation_end_to_end(ckpt):
    model, tok = loaded(ckpt)
    examples = load_data(str(ckpt / "data.jsonl"))
    spec = EvalSpec(n=2, max_new_tokens=6, num_subsets=10, progress=False, refine_rounds=1, correction_rounds=1,
                    critique_max_new_tokens=6, as_conversation=True, combined_n=2, combined_threshold=1.0,
                    combined_revise="correct", budget_multiples="1,2")
    res = evaluate_run(model, tok, examples, spec)
    r, c = res["refinement"], res["correction"]
    assert r["config"]["as_conversation"] and c["as_conversation"] and res["combined"]["config"]["as_conversation"]
    assert r["turn_tokens"]["prompt"][0] > r["turn_tokens"]["new_prompt"][0] > 0
    assert c["turn_tokens"]["prompt"][1] > c["turn_tokens"]["new_prompt"][1] > 0
    assert r["rows"][1]["tokens"] == pytest.approx(r["rows"][0]["tokens"] + r["turn_tokens"]["critique"][0]
                                                   + r["turn_tokens"]["resolve"][0])
    assert "## Turns" in markdown_table(res) and res["budgets"]["multiples"] == [1, 2]


def test_compare_fills_in_the_runs_prompt_wording():
    from jaxrl_reason.configs.testbed_latin_self_check import get_config
    from jaxrl_reason.experiment.config import read_run_config

    cfg = get_config()
    cfg.data.prompt_wording = "authors"
    rc = read_run_config(cfg)
    assert cmp.resolve_spec(EvalSpec(prompt_wording=None), rc).prompt_wording == "authors"
    assert cmp.resolve_spec(EvalSpec(), rc).prompt_wording == "short"  # a spec's own value stays
    with pytest.raises(ValueError, match="prompt_wording"):
        evaluate_run(None, None, [], EvalSpec(prompt_wording=None))


def test_the_cli_reads_the_new_flags_into_the_spec():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "evaluate.py"
    spec = importlib.util.spec_from_file_location("evaluate_cli", path)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    args = cli._parser().parse_args(["--model", "m", "--out", "o", "--n", "4", "--critique-score", "--combined-n",
                                     "4", "--combined-revise", "correct", "--combined-bottom", "0.25",
                                     "--as-conversation", "--budget-multiples", "1,2", "--prompt-wording",
                                     "authors"])
    s = cli.spec_from_args(args)
    assert (s.critique_score, s.combined_n, s.combined_revise, s.combined_bottom, s.as_conversation,
            s.budget_multiples, s.prompt_wording) == (True, 4, "correct", 0.25, True, (1, 2), "authors")
    assert cli.spec_from_args(cli._parser().parse_args(["--model", "m", "--out", "o"])).budget_multiples == (
        1, 2, 4, 8)
    with pytest.raises(SystemExit, match="--combined-n must lie in"):
        cli.spec_from_args(cli._parser().parse_args(["--model", "m", "--out", "o", "--n", "2", "--combined-n", "3"]))


def test_the_pool_strategies_need_questions():
    for field, value in (("critique_score", True), ("combined_n", 2)):
        with pytest.raises(ValueError, match=f"{field} evaluate a pool"):
            evaluate_run(None, None, None, EvalSpec(n=2, **{field: value}), problems=["a buggy program"])
