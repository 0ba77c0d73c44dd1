"""The evaluation spec and its core (every strategy at every k from one pool of samples), end to end on a tiny
model; the CLI over it is tests/test_evaluate_cli.py."""
import json
from pathlib import Path

import numpy as np
import pytest

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.datasets import write_jsonl
from jaxrl_reason.data.prompts import solve_prompt, verify_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.inference import estimators as est
from jaxrl_reason.inference.diagnostics import best_of_n_chance, verifier_quality, vote_headroom
from jaxrl_reason.inference.test_time import STRATEGY_LABELS, accuracy_curves, evaluate
from jaxrl_reason.rewards.base import RewardResult

from jaxrl_reason.experiment.evaluation import (EvalSpec, answer_reward, evaluate_run, example_grader,
                                                example_reward, load_data, load_debug_bench, markdown_table,
                                                read_eval_spec, strategy_curves, write_outputs)

ROOT = Path(__file__).resolve().parents[1]


def run_eval(model_dir, data=None, out=None, *, judge=False, problems=None, **spec):
    """evaluate_run on the checkpoint at `model_dir` (as experiments/evaluate.py runs it), written to `out`."""
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    model, tok = load_pretrained(str(model_dir)), Tokenizer.from_pretrained(str(model_dir))
    examples = load_data(str(data)) if data is not None else None
    res = evaluate_run(model, tok, examples, EvalSpec(progress=False, **spec), judge=(model, tok) if judge else None,
                       problems=problems)
    if out is not None:
        write_outputs(res, out)
    return res


# --------------------------------------------------------------------------------------------- pure pieces
def test_accuracy_curves_hand_computed():
    correct = np.array([[1, 1, 0, 0], [0, 1, 1, 1]])
    classes = np.array([[0, 0, 1, -1], [0, 1, 1, 1]])
    scores = np.array([[0.9, 0.2, 0.8, 0.1], [0.5, 0.5, 0.5, 0.5]])
    cur = accuracy_curves(correct, classes, [1, 2, 4], scores={"self": scores, "judge": scores[::-1]},
                          num_subsets=100)
    assert set(cur) == {"pass", "majority", "best_of_n", "weighted", "best_of_n_judge", "weighted_judge"}
    np.testing.assert_allclose(cur["pass"]["mean"], [0.625, np.mean([5 / 6, 1.0]), 1.0])
    # k=1: Q0 votes right for 2 of 4 singletons (one has no answer), Q1 for 3 of 4. k=4: both right.
    np.testing.assert_allclose(cur["majority"]["mean"][0], 0.625)
    assert cur["majority"]["mean"][2] == 1.0 and cur["majority"]["std"][2] == 0.0
    # BoN@4: Q0's top sample is right; Q1 is a four-way tie of 3 right / 1 wrong -> 3/4.
    assert cur["best_of_n"]["mean"][2] == pytest.approx(0.875) and cur["best_of_n"]["std"] is None
    assert cur["weighted"]["mean"][2] == 1.0
    # each entry is the question mean of the per-question estimator
    for j, k in enumerate([1, 2, 4]):
        ref = np.mean([est.best_of_k(scores[::-1][i], correct[i], k) for i in range(2)])
        assert cur["best_of_n_judge"]["mean"][j] == pytest.approx(ref)
    # std of a one-run dataset accuracy: sqrt(sum of per-question variances) / Q
    k1 = [est.majority_at_k(classes[i], correct[i], 1) for i in range(2)]
    assert cur["majority"]["std"][0] == pytest.approx(np.sqrt(sum(e.std ** 2 for e in k1)) / 2)


def test_verifier_quality_hand_computed():
    q = verifier_quality([0.9, 0.2, 0.8, 0.1], [1, 1, 0, 0])
    # positive-negative pairs ranked right: (0.9, 0.8), (0.9, 0.1), (0.2, 0.1) of 4
    assert q["auroc"] == pytest.approx(0.75) and q["balanced_accuracy"] == pytest.approx(0.5)
    assert q["mean_score_correct"] == pytest.approx(0.55) and q["mean_score_wrong"] == pytest.approx(0.45)
    assert verifier_quality([0.5, 0.5, 0.5], [1, 0, 1])["auroc"] == pytest.approx(0.5)
    assert verifier_quality([0.5, 0.7], [1, 1])["auroc"] is None


def test_within_question_auroc_ignores_how_hard_a_question_looks():
    # A verifier that only knows question 0 is easy and question 1 is hard: perfect pooled ranking of... nothing
    # within a question (all of one question's samples get one score).
    correct = np.array([[1, 1, 1, 0], [1, 0, 0, 0]])
    by_question = np.array([[0.9, 0.9, 0.9, 0.9], [0.1, 0.1, 0.1, 0.1]])
    q = verifier_quality(by_question, correct)
    assert q["auroc"] > 0.7 and q["within_question_auroc"] == pytest.approx(0.5) and q["mixed_questions"] == 2
    # a verifier that reads the solution: right samples above wrong ones inside each question
    by_solution = np.array([[0.6, 0.7, 0.8, 0.5], [0.3, 0.2, 0.1, 0.25]])
    assert verifier_quality(by_solution, correct)["within_question_auroc"] == pytest.approx(1.0)
    assert verifier_quality(1 - by_solution, correct)["within_question_auroc"] == pytest.approx(0.0)
    assert verifier_quality(by_solution.reshape(-1), correct.reshape(-1))["within_question_auroc"] is None


def test_vote_headroom_counts_what_weighted_voting_could_win_and_what_it_needs():
    # q0: a systematic error (12 of 16 samples share one wrong answer, 4 are right); q1: the majority is right;
    # q2: every sample wrong (no headroom); q3: a 2-2 tie between a right and a wrong answer.
    correct = np.zeros((4, 16))
    classes = np.zeros((4, 16), np.int64)
    correct[0, :4], classes[0, :4], classes[0, 4:] = 1, 1, 2
    correct[1, :10], classes[1, 10:] = 1, 3
    classes[2] = 5
    correct[3, :8], classes[3, 8:] = 1, 7
    by_question = np.repeat([[0.9], [0.8], [0.2], [0.5]], 16, axis=1)  # knows how hard each question is, no more
    h = vote_headroom(correct, classes, by_question)
    assert h["majority_wrong"] == pytest.approx(2.5) and h["solvable"] == 1  # the tie counts 1/2, not as solvable
    assert h["rescued"] == 0 and h["broken"] == 0
    assert h["top_wrong_share"] == pytest.approx(0.75) and h["right_share"] == pytest.approx(0.25)
    assert h["needed_ratio"] == pytest.approx(3.0) and h["score_ratio"] == pytest.approx(1.0)
    # A verifier that reads solutions: 4 right samples at 0.9 outweigh 12 wrong at 0.2 (3.6 > 2.4) ...
    reads = by_question.copy()
    reads[0, :4], reads[0, 4:] = 0.9, 0.2
    reads[3, :8], reads[3, 8:] = 0.9, 0.1
    h = vote_headroom(correct, classes, reads)
    assert h["rescued"] == pytest.approx(1.5) and h["broken"] == 0 and h["score_ratio"] == pytest.approx(4.5)
    # ... one that prefers the wrong answer breaks the tie the other way and rescues nothing.
    h = vote_headroom(correct, classes, 1 - reads)
    assert h["rescued"] == 0 and h["broken"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="questions, samples"):
        vote_headroom(correct[0], classes[0], by_question[0])


def test_best_of_n_chance_is_what_a_verifier_that_reads_nothing_gets():
    # q0: the right solution repeated verbatim 12 times, 4 different wrong ones; q1: all right; q2: all wrong, two
    # texts; q3: 8 right as 2 texts, 8 wrong as 2 texts.
    right, wrong = "a = 1", "a = %d"
    completions = [[right] * 12 + [wrong % i for i in range(2, 6)], [right] * 16,
                   [wrong % 7] * 8 + [wrong % 8] * 8, [right, right + "."] * 4 + [wrong % 2, wrong % 3] * 4]
    correct = np.array([[1.0] * 12 + [0.0] * 4, [1.0] * 16, [0.0] * 16, [1.0] * 8 + [0.0] * 8])
    c = best_of_n_chance(correct, completions)
    assert c["mixed_questions"] == 2
    assert c["mixed_right_share"] == pytest.approx((0.75 + 0.5) / 2)
    assert c["mixed_distinct_right_share"] == pytest.approx((1 / 5 + 2 / 4) / 2)
    assert c["accuracy"] == pytest.approx((1 / 5 + 1 + 0 + 2 / 4) / 4)
    # The same number by simulation: Best-of-16 with one random score per distinct text, over many draws. It sits
    # below pass@1 (0.5625) although the verifier prefers nothing.
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(2000):
        acc = []
        for texts, a in zip(completions, correct):
            table = {t: rng.random() for t in set(texts)}
            acc.append(est.best_of_k([table[t] for t in texts], a, len(texts)))
        draws.append(np.mean(acc))
    assert np.mean(draws) == pytest.approx(c["accuracy"], abs=0.01) and np.mean(draws) < correct.mean() - 0.1
    with pytest.raises(ValueError, match="one list of"):
        best_of_n_chance(correct, completions[:3])


def test_data_specs():
    exs = load_data("arithmetic:3:1")
    assert [e.id for e in exs] == [e.id for e in arithmetic_examples(3, seed=1)]
    assert len(load_data("arithmetic:5", limit=2)) == 2
    with pytest.raises(ValueError, match="arithmetic:COUNT"):
        load_data("arithmetic:three")
    with pytest.raises(FileNotFoundError, match="not a generator spec"):
        load_data("no/such/file.jsonl")


def test_spec_refuses_what_cannot_run_naming_the_field():
    assert EvalSpec(ks="1,2", length_budgets=[4, 8]).ks == (1, 2)
    for kwargs, match in (({"n": 0}, "EvalSpec.n must be >= 1"), ({"ks": "1,x"}, "EvalSpec.ks must be comma"),
                          ({"n": 4, "ks": (8,)}, "EvalSpec.ks must lie in"), ({"tau": 2.0}, "EvalSpec.tau"),
                          ({"length_budgets": (8, 4)}, "length_budgets must be strictly increasing"),
                          ({"budget_forcing": (16,), "forcing_buffer": 16}, "forcing_buffer"),
                          ({"correction_rounds": -1}, "EvalSpec.correction_rounds must be >= 0"),
                          ({"grader": "sudoku"}, "EvalSpec.grader must be one of"),
                          ({"answer_extraction": "last_line"}, "answer_extraction")):
        with pytest.raises(ValueError, match=match):
            EvalSpec(**kwargs)
    with pytest.raises(ValueError, match=r"eval\.nn \(did you mean eval\.n\?\)"):
        read_eval_spec({"nn": 4})
    assert read_eval_spec({"n": 4, "check_tokens": 0}) == EvalSpec(n=4)
    with pytest.raises(ValueError, match="experiment.compare fills in"):
        evaluate_run(None, None, [], EvalSpec(max_new_tokens=None))


# ---------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from jaxrl_reason.models.hf_port import save_pretrained
    from jaxrl_reason.models.qwen2 import ModelConfig, init_model

    exs = arithmetic_examples(20, seed=4)
    texts = [solve_prompt(e.question) + "\n" + e.solution for e in exs]
    texts += [verify_prompt(e.question, e.solution) + " Yes No" for e in exs]
    root = tmp_path_factory.mktemp("ckpt")
    tok = train_tiny_tokenizer(texts, root / "model", vocab_size=300)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    save_pretrained(init_model(cfg, seed=0), str(root / "model"))
    write_jsonl(arithmetic_examples(3, seed=8), root / "data.jsonl")
    return root


@pytest.mark.slow
def test_evaluate_run_end_to_end(tiny_checkpoint, tmp_path):
    out = tmp_path / "eval"
    results = run_eval(tiny_checkpoint / "model", tiny_checkpoint / "data.jsonl", out, judge=True, n=4,
                       max_new_tokens=8, num_subsets=50)
    for name in ("results.json", "results.md", "accuracy_vs_k.png", "samples.jsonl"):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "results.json").read_text())
    assert saved["ks"] == [1, 2, 4] and saved["n"] == 4 and saved["num_questions"] == 3
    assert set(saved["strategies"]) == set(STRATEGY_LABELS)
    for name, curve in saved["strategies"].items():
        assert len(curve["mean"]) == 3 and all(0.0 <= m <= 1.0 for m in curve["mean"]), name
    assert 0 < saved["tokens_per_question"]["generated"][0] <= 8
    np.testing.assert_allclose(saved["tokens_per_question"]["generated"],
                               np.array([1, 2, 4]) * saved["mean_completion_tokens"])
    table = (out / "results.md").read_text()
    for label in STRATEGY_LABELS.values():
        assert f"| {label} |" in table
    assert "| k=1 | k=2 | k=4 |" in table
    assert "## Weighted vote against the majority over all 4 samples" in table
    assert set(saved["vote_headroom"]) == {"self", "judge"} and saved["vote_headroom"]["self"]["questions"] == 3
    chance_table = table.split("## Best-of-4 against a verifier that reads nothing")[1]
    assert "| self |" in chance_table and "| judge |" in chance_table
    assert (out / "accuracy_vs_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["completions"]) == 4 for r in rows)
    # The judge here is the same checkpoint: its scores must equal the self-verifier's.
    for r in rows:
        np.testing.assert_allclose(r["scores"]["judge"], r["scores"]["self"], rtol=1e-6)
    assert results["strategies"] == saved["strategies"]
    assert saved["config"]["grader"] == "math"


def test_check_tokens_reads_the_verdict_after_a_written_check(tiny_checkpoint, tmp_path):
    """check_tokens: the self-verifier writes up to that many tokens first; its verifier-token cost grows by
    what it wrote and the judge (same checkpoint, no check) now scores differently."""
    common = dict(n=2, max_new_tokens=6, num_subsets=10, judge=True)
    plain = run_eval(tiny_checkpoint / "model", tiny_checkpoint / "data.jsonl", tmp_path / "plain", **common)
    checked = run_eval(tiny_checkpoint / "model", tiny_checkpoint / "data.jsonl", tmp_path / "checked",
                       check_tokens=5, **common)
    assert checked["config"]["check_tokens"] == 5 and plain["config"]["check_tokens"] == 0
    extra = checked["tokens_per_question"]["verifier_prompt"][0] - plain["tokens_per_question"]["verifier_prompt"][0]
    assert 0 < extra <= 5
    rows = [json.loads(line) for line in (tmp_path / "checked" / "samples.jsonl").read_text().splitlines()]
    assert any(not np.allclose(r["scores"]["judge"], r["scores"]["self"]) for r in rows)


def test_correction_rounds(tiny_checkpoint, tmp_path):
    """correction_rounds: the model's own attempts corrected R times, each round's accuracy, fix / break rates
    and cumulative tokens in results.json."""
    out = tmp_path / "eval_correction"
    run_eval(tiny_checkpoint / "model", tiny_checkpoint / "data.jsonl", out, n=2, max_new_tokens=6, num_subsets=10,
             correction_rounds=2, correction_format="worked_check", correction_max_new_tokens=6)
    c = json.loads((out / "results.json").read_text())["correction"]
    assert c["correction_format"] == "worked_check"
    for t in (1, 2):
        assert 0.0 <= c[f"correct/round{t}/accuracy"] <= 1.0
        assert f"correct/round{t}/fix_rate" in c and f"correct/round{t}/break_rate" in c
    # tokens are cumulative over rounds and each correction round generates at least one token per example
    assert 0 < c["correct/round1/tokens_per_example"] < c["correct/round2/tokens_per_example"] <= 12
    # the per-round rows reach the markdown and the plot: round 0 costs the solve tokens, later rounds add theirs
    assert [r["round"] for r in c["rows"]] == [0, 1, 2]
    assert c["rows"][0]["tokens"] == c["correct/round0/tokens_per_example"] > 0
    assert c["rows"][2]["tokens"] == pytest.approx(c["rows"][0]["tokens"] + c["correct/round2/tokens_per_example"])
    assert "## Self-correction of its own greedy attempts" in (out / "results.md").read_text()
    assert [p["acc"] for p in strategy_curves(json.loads((out / "results.json").read_text()))["self-correction"]
            ] == [r["acc"] for r in c["rows"]]


@pytest.mark.slow
def test_evaluate_curves_come_from_its_own_samples(tiny_checkpoint):
    """With a reward that yields real answer classes, evaluate()'s numbers are the estimators applied to the
    very samples and scores it returns."""
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    model_dir = str(tiny_checkpoint / "model")
    model, tok = load_pretrained(model_dir), Tokenizer.from_pretrained(model_dir)

    def first_digit_reward(completions, examples):
        # A stand-in grader: the answer is the first digit of the completion (if any), right when it is odd.
        answers = [next((ch for ch in c if ch.isdigit()), None) for c in completions]
        scores = np.array([float(a is not None and int(a) % 2 == 1) for a in answers], np.float32)
        return RewardResult(scores=scores, details=[{"extracted": a} for a in answers])

    examples = arithmetic_examples(3, seed=8)
    res = evaluate(model, tok, examples, n=4, max_new_tokens=8, temperature=1.0, reward_fn=first_digit_reward,
                   num_subsets=50, progress=False, seed=3)
    correct = np.array([r["correct"] for r in res["samples"]])
    classes = np.array([r["classes"] for r in res["samples"]])
    scores = np.array([r["scores"]["self"] for r in res["samples"]])
    np.testing.assert_allclose(scores, np.exp(np.array([r["logprob_yes_no"]["self"] for r in res["samples"]])[..., 0]),
                               rtol=1e-5)
    assert (classes >= 0).sum() >= 3 and 0 < correct.sum() < correct.size  # a pool worth checking
    # equal digits share a class, different digits do not
    for r in res["samples"]:
        for a, c in zip(r["answers"], r["classes"]):
            assert (c == -1) == (a is None)
            assert all((c == c2) == (a == a2) for a2, c2 in zip(r["answers"], r["classes"]) if a and a2)
    ref = accuracy_curves(correct, classes, [1, 2, 4], scores={"self": scores}, num_subsets=50, seed=3)
    assert res["strategies"] == ref
    assert res["sample_accuracy"] == pytest.approx(correct.mean())
    assert "best_of_n_judge" not in res["strategies"]
    assert res["best_of_n_chance"] == best_of_n_chance(correct, [r["completions"] for r in res["samples"]])
    # A k grid without k = n (`--ks 1,2`) still gets its report: the chance level, no Best-of-n beside it.
    md = markdown_table(res)
    assert "| self | " in md.split("reads nothing")[1]
    short = dict(res, ks=[1, 2], strategies={s: {"mean": c["mean"][:2], "std": c["std"] and c["std"][:2]}
                                             for s, c in res["strategies"].items()})
    chance_part = markdown_table(short).split("reads nothing")[1]
    assert "k = 4 is not among the evaluated ks" in chance_part and "| self | " not in chance_part


# ------------------------------------------------------------------------ strategies that spend tokens differently
def test_majority_at_tokens_interpolates_between_integer_k():
    from jaxrl_reason.inference.strategies import majority_at_tokens

    # one question, 4 samples: answers a a b c, only a right. maj@1 = 1/2, maj@2 = P(an a-pair or a tie won by a)
    classes, correct = np.array([[0, 0, 1, 2]]), np.array([[1, 1, 0, 0]])
    m1 = est.majority_at_k(classes[0], correct[0], 1).mean
    m2 = est.majority_at_k(classes[0], correct[0], 2).mean
    m = majority_at_tokens(classes, correct, tokens=15.0, tokens_per_sample=10.0)
    assert m["k"] == pytest.approx(1.5) and not m["capped"]
    assert m["acc"] == pytest.approx(0.5 * m1 + 0.5 * m2) and m["tokens"] == pytest.approx(15.0)
    capped = majority_at_tokens(classes, correct, tokens=100.0, tokens_per_sample=10.0)
    assert capped["capped"] and capped["k_used"] == 4 and capped["acc"] == pytest.approx(1.0)
    # fewer tokens than one sample still costs one sample
    assert majority_at_tokens(classes, correct, tokens=3.0, tokens_per_sample=10.0)["acc"] == pytest.approx(m1)


def test_length_selection_over_pools_stops_at_the_first_confident_budget():
    from jaxrl_reason.inference.strategies import length_selection

    def pool(budget, answers_scores_correct, length):
        samples = [{"answers": [a for a, _, _ in q], "scores": {"self": [s for _, s, _ in q]},
                    "correct": [c for _, _, c in q], "classes": [ord(a) - ord("a") for a, _, _ in q],
                    "lengths": [length] * len(q)} for q in answers_scores_correct]
        return {"config": {"max_new_tokens": budget}, "num_questions": len(samples), "n": 2, "samples": samples}

    # question 0 is confident (one answer) at the short budget; question 1 only at the long one.
    short = pool(4, [[("a", 0.9, 1), ("a", 0.8, 1)], [("a", 0.5, 0), ("b", 0.5, 1)]], 3)
    long = pool(8, [[("a", 0.9, 1), ("b", 0.1, 0)], [("b", 0.9, 1), ("b", 0.9, 1)]], 7)
    res = length_selection([short, long], tau=0.75)
    sel = res["selection"]
    assert sel["chosen"] == {"4": 1, "8": 1} and sel["reached"] == 1.0 and sel["acc"] == 1.0
    # q0 stops after the short budget (2 x 3 tokens), q1 pays for both (6 + 14)
    assert sel["tokens"] == pytest.approx((6 + 20) / 2)
    assert [r["budget"] for r in res["rows"]] == [4, 8] and res["rows"][0]["tokens"] == pytest.approx(6)
    assert res["rows"][1]["acc"] == pytest.approx(1.0)  # weighted@2 at the long budget: a (0.9) beats b (0.1)


def test_token_spending_strategies(tiny_checkpoint, tmp_path):
    """refine_rounds, length_budgets / tau and budget_forcing end to end on a tiny model: each adds its
    section of {acc, tokens} rows to results.json, the table and the plot's curves."""
    out = tmp_path / "eval_strategies"
    res = run_eval(tiny_checkpoint / "model", tiny_checkpoint / "data.jsonl", out, n=4, max_new_tokens=8,
                   num_subsets=20, refine_rounds=2, critique_max_new_tokens=8, guided_layout="first",
                   critique_format="worked_check", length_budgets=(4, 8), tau=0.6, budget_forcing=(24,),
                   forcing_buffer=20)
    saved = json.loads((out / "results.json").read_text())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]

    ref = saved["refinement"]
    rows = ref["rows"]
    assert [r["round"] for r in rows] == [0, 1, 2]
    # round 0 is the pool's first sample of each question: its accuracy and tokens are the pool's
    assert rows[0]["acc"] == pytest.approx(np.mean([s["correct"][0] > 0.5 for s in samples]))
    assert rows[0]["tokens"] == pytest.approx(np.mean([s["lengths"][0] for s in samples]))
    assert all(a["tokens"] <= b["tokens"] for a, b in zip(rows, rows[1:]))  # cumulative
    assert rows[1]["tokens"] > rows[0]["tokens"]  # round 1 critiqued every question (none settled before it)
    assert rows[1]["critiqued"] == 3 and 0.0 <= rows[1]["well_formed"] <= 1.0
    for r in rows[1:]:
        assert {"verdict_precision", "verdict_recall", "verdict_f1"} <= set(r)
    for r in rows:
        assert 0.0 <= r["majority_same_tokens"] <= 1.0 and r["majority_k"] >= 1
    assert set(ref["verdict"]) >= {"precision", "recall", "f1"}
    assert ref["config"]["guided_layout"] == "first" and ref["config"]["critique_format"] == "worked_check"

    ls = saved["length_selection"]
    assert [r["budget"] for r in ls["rows"]] == [4, 8]
    assert 0 < ls["rows"][0]["tokens"] <= 4 * 4 and 0 < ls["rows"][1]["tokens"] <= 4 * 8
    # the budget equal to --max-new-tokens is served by the main pool
    assert ls["rows"][1]["tokens"] == pytest.approx(4 * saved["mean_completion_tokens"])
    sel = ls["selection"]
    assert sum(sel["chosen"].values()) == 3 and sel["tau"] == 0.6
    assert ls["rows"][0]["tokens"] - 1e-9 <= sel["tokens"] <= ls["rows"][0]["tokens"] + ls["rows"][1]["tokens"] + 1e-9

    bf = saved["budget_forcing"]["rows"]
    assert [r["budget"] for r in bf] == [24] and 0 < bf[0]["tokens"] <= 4 * 24
    assert 0.0 <= bf[0]["forced"] <= 1.0 and {"acc", "majority", "weighted"} <= set(bf[0])

    table = (out / "results.md").read_text()
    for title in ("## Self-refinement", "## Confidence-based length selection", "## Budget forcing"):
        assert title in table
    curves = strategy_curves(res)
    assert {"self-refinement", "length selection (tau=0.6)", "budget forcing (maj@N)", "maj@k"} <= set(curves)
    assert (out / "accuracy_vs_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_budget_forcing_and_length_selection_read_the_written_check(tiny_checkpoint, tmp_path, monkeypatch):
    """check_tokens reaches every self-verifier score: the main pool, the fresh pools of --length-budgets and
    the weighted vote of --budget-forcing."""
    from jaxrl_reason.inference import strategies, test_time

    seen, pools, forcing = [], test_time.verify_inputs, strategies.verdict_logprobs
    monkeypatch.setattr(test_time, "verify_inputs", lambda *a, **k: seen.append(k["check_tokens"]) or pools(*a, **k))
    monkeypatch.setattr(strategies, "verdict_logprobs",
                        lambda *a, **k: seen.append(("forcing", k.get("check_tokens"))) or forcing(*a, **k))
    res = run_eval(tiny_checkpoint / "model", tiny_checkpoint / "data.jsonl", n=2, max_new_tokens=6,
                   num_subsets=10, check_tokens=3, length_budgets=(4, 6), budget_forcing=(24,), forcing_buffer=20)
    assert seen == [3, 3, ("forcing", 3)]
    assert res["budget_forcing"]["config"]["check_tokens"] == 3


def test_answer_extraction_grades_the_last_number_only_when_asked():
    ex = arithmetic_examples(1, seed=0)
    texts = [f"so the answer is {ex[0].answer}", f"\\boxed{{{ex[0].answer}}}"]
    strict = answer_reward("boxed")(texts, ex * 2).scores
    flexible = answer_reward("boxed_or_last_number")(texts, ex * 2).scores
    assert list(strict) == [0.0, 1.0] and list(flexible) == [1.0, 1.0]
    with pytest.raises(ValueError, match="answer_extraction"):
        answer_reward("last_line")


def test_grader_follows_what_the_examples_are(tmp_path):
    """grader auto: a run's held-out file of a testbed task is graded by that task's checker (the math grader
    would read its grids as numbers), reasoning-gym by its scorer, plain questions by the math grader; mixed
    sources, code pools and unknown names are refused."""
    from jaxrl_reason.data.code_datasets import as_examples, generate_function_tasks
    from jaxrl_reason.data.latin_square import latin_square_examples
    from jaxrl_reason.data.procedural import reasoning_gym_examples

    write_jsonl(latin_square_examples(3, seed=0), tmp_path / "heldout.jsonl")
    latin = load_data(str(tmp_path / "heldout.jsonl"))
    assert example_grader(latin) == "latin_square"
    reward = example_reward("latin_square")
    # the first two rows swapped: the givens are broken, but math-verify compares the rows as an unordered set
    swapped = ["\\boxed{" + ", ".join(e.answer.split(", ")[i] for i in (1, 0, 2, 3)) + "}" for e in latin]
    assert list(reward([e.solution for e in latin], latin).scores) == [1.0, 1.0, 1.0]
    assert list(reward(swapped, latin).scores) == [0.0, 0.0, 0.0]
    assert list(example_reward("math")(swapped, latin).scores) == [1.0, 1.0, 1.0]
    assert example_grader(arithmetic_examples(2, seed=0)) == "math"
    assert example_grader(reasoning_gym_examples("basic_arithmetic", 2, seed=0)) == "reasoning_gym"
    assert example_grader(latin, "math") == "math"
    with pytest.raises(ValueError, match="mixes sources"):
        example_grader(latin + arithmetic_examples(1, seed=0))
    with pytest.raises(ValueError, match="code problems"):
        example_grader(as_examples(generate_function_tasks(1, seed=0)))
    with pytest.raises(ValueError, match="grader must be one of"):
        example_grader(latin, "sudoku")


def test_grades_a_testbed_pool_with_its_checker(tiny_checkpoint, tmp_path):
    from jaxrl_reason.data.latin_square import latin_square_examples, latin_square_reward

    exs = latin_square_examples(2, seed=1)
    write_jsonl(exs, tmp_path / "heldout.jsonl")
    out = tmp_path / "eval"
    res = run_eval(tiny_checkpoint / "model", tmp_path / "heldout.jsonl", out, n=2, max_new_tokens=4, num_subsets=10)
    assert res["config"]["grader"] == "latin_square"
    for row, e in zip([json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()], exs):
        graded = latin_square_reward(row["completions"], [e] * 2)
        assert list(row["correct"]) == list(graded.scores)
        assert row["answers"] == [d["extracted"] for d in graded.details]


def test_debug_bench_repairs_buggy_programs_in_the_sandbox(tiny_checkpoint, tmp_path):
    """debug_bench alone (no examples): generated buggy programs (or a JSONL of them) are the round-0 attempts,
    all failing; each round's repair is run in the sandbox; rows, tokens, bug kinds reach JSON, markdown and plot."""
    out = tmp_path / "debug"
    res = run_eval(tiny_checkpoint / "model", None, out, problems=load_debug_bench("generated:4:0"),
                   correction_rounds=2, max_new_tokens=6)
    db = json.loads((out / "results.json").read_text())["debug_bench"]
    assert db == json.loads(json.dumps(res["debug_bench"]))  # nan-safe round trip of what main returned
    assert 1 <= db["problems"] <= 4 and sum(db["bug_kinds"].values()) == db["problems"]
    assert [r["round"] for r in db["rows"]] == [0, 1, 2] and db["rows"][0]["acc"] == 0.0
    assert db["rows"][0]["tokens"] == 0 < db["rows"][1]["tokens"] < db["rows"][2]["tokens"] <= 12
    assert db["correct/round1/fix_rate"] == db["rows"][1]["acc"]  # every round-0 program was wrong
    md = (out / "results.md").read_text()
    assert "## DebugBench-style repair" in md and "Evaluation: " not in md  # no pool was sampled
    assert (out / "accuracy_vs_k.png").stat().st_size > 0
    # a JSONL of buggy_code + tests records; one round by default
    one = run_eval(tiny_checkpoint / "model", None, problems=load_debug_bench(
        str(ROOT / "tests" / "data" / "code" / "correction.jsonl")), max_new_tokens=4)["debug_bench"]
    assert one["problems"] == 2 and one["bug_kinds"] == {"logic error": 1, "wrong operator": 1}
    assert [r["round"] for r in one["rows"]] == [0, 1]
    for call, match in ((lambda: evaluate_run(None, None, None, EvalSpec()), "give examples"),
                        (lambda: load_debug_bench("generated:x"), "generated:COUNT"),
                        (lambda: load_debug_bench(str(tmp_path / "none.jsonl")), "no such file"),
                        (lambda: evaluate_run(None, None, None, EvalSpec(refine_rounds=1), problems=[1]),
                         "refine_rounds evaluate a pool")):
        with pytest.raises((ValueError, FileNotFoundError), match=match):
            call()
