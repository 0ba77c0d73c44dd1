"""Evaluating a tool-using policy (issue 59): the evaluation spec runs each sample as a conversation with the
policy's tools, a hostile call becomes a tool message (never an exception), tokens are counted per turn (model
apart from environment), and compare evaluates a tool run with its own tools."""
import dataclasses

import numpy as np
import pytest

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.experiment.evaluation import EvalSpec, evaluate_run, markdown_table
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rollout import ToolConfig
from jaxrl_reason.rollout.multiturn import demo_solution
from jaxrl_reason.train.trainer import sft_train

from tiny import ARITH, arith_tokenizer, tiny_model

HOSTILE = "<python>print('x' * 10**7)</python>"  # an output flood: the sandbox kills it
TOOLS = {"tools": ("python",), "tool_kwargs": {"python": {"timeout_s": 3.0, "max_chars": 80}}, "max_turns": 3,
         "max_turn_tokens": 40, "max_obs_tokens": 32}


def boxed_reward(texts, examples):
    scores = [float(f"\\boxed{{{e.answer}}}" in t) for t, e in zip(texts, examples)]
    return RewardResult(np.asarray(scores, np.float32), [{"extracted": None} for _ in texts])


@pytest.fixture(scope="module")
def hostile_policy(tmp_path_factory):
    """A tiny model that learned one conversation: the hostile call, then (after the tool turn) a boxed answer."""
    examples = arithmetic_examples(4, seed=0, config=ARITH)
    env = ToolConfig(**TOOLS).make_env(solve_prompt)()
    answer = "The answer is \\boxed{5}."
    tok = arith_tokenizer(tmp_path_factory.mktemp("tok"),
                          extra_texts=[env.first_message(e.question) + HOSTILE + answer for e in examples] * 20)
    text, spans = demo_solution([HOSTILE, "error: output above 65536 bytes; print less", answer], tok)
    demos = [dataclasses.replace(e, solution=text) for e in examples]
    model = tiny_model(tok, seed=0)
    sft_train(model, tok, demos, steps=80, batch_size=4, lr=1e-2, warmup_steps=5, progress=False,
              prompt_fn=env.first_message, span_weights=lambda e: spans)
    return model, tok, examples


@pytest.mark.slow  # the warm-up and two sandboxed floods per question
def test_evaluation_runs_the_policy_with_its_tools_and_counts_tokens_per_turn(hostile_policy):
    model, tok, examples = hostile_policy
    spec = EvalSpec(n=2, max_new_tokens=120, temperature=0.0, seed=0, tools=TOOLS, progress=False)
    res = evaluate_run(model, tok, examples, spec, reward_fn=boxed_reward)
    t = res["tools"]
    # every conversation called the tool; the flood came back as a failed call's message, not an exception
    assert t["calls_per_question"] >= 1 and t["call_success"] == 0.0
    for row in res["samples"]:
        assert all(c >= 1 for c in row["calls"]) and all(ok == 0 for ok in row["calls_ok"])
        assert all("<python>" in c for c in row["completions"])
        # tokens per turn add up to each conversation's model and environment totals
        for turns, model_tokens, env_tokens in zip(row["turns"], row["lengths"], row["env_tokens"]):
            assert sum(m for m, _ in turns) == model_tokens and sum(e or 0 for _, e in turns) == env_tokens
            assert len(turns) >= 2 and turns[0][1] > 0  # a model turn, the tool's turn, then the model again
    per_turn = t["per_turn"]
    assert per_turn[0]["rows"] == len(examples) * 2 and per_turn[0]["env_tokens"] > 0
    assert per_turn[-1]["env_tokens"] < per_turn[0]["env_tokens"]  # the last turn answers; it calls no tool
    assert res["mean_completion_tokens"] == pytest.approx(np.mean([sum(r["lengths"]) / 2 for r in res["samples"]]))
    assert res["tokens_per_question"]["environment"][0] == pytest.approx(t["env_tokens_per_question"])
    table = markdown_table(res)
    assert "## Tools (python)" in table and "| 1 | 8 |" in table


def test_tool_spec_is_read_and_checked_before_compute():
    assert EvalSpec().tools == {}
    assert EvalSpec(tools="calculator").tools["tools"] == ("calculator",)
    assert EvalSpec(tools="{'tools': ('python',), 'max_turns': 2}").tools["max_turns"] == 2
    assert EvalSpec(tools=ToolConfig(tools=("calculator",), max_turns=5)).tools["max_turns"] == 5
    with pytest.raises(ValueError, match="unknown tool 'calc'"):
        EvalSpec(tools="calc")
    with pytest.raises(ValueError, match="did you mean eval.tools.max_turns"):
        EvalSpec(tools={"tools": ("calculator",), "maxturns": 2})
    ex = arithmetic_examples(2, seed=0, config=ARITH)
    # strategies that re-read single-turn completions are refused with tools, before any model is touched
    for field, value in (("refine_rounds", 1), ("budget_forcing", (128,)), ("correction_rounds", 1)):
        spec = EvalSpec(tools="calculator", **{field: value})
        with pytest.raises(ValueError, match=f"EvalSpec.tools with {field}"):
            evaluate_run(None, None, ex, spec, reward_fn=boxed_reward)
    with pytest.raises(ValueError, match="EvalSpec fields \\['tools'\\] are None"):
        evaluate_run(None, None, ex, EvalSpec(tools=None), reward_fn=boxed_reward)


def test_compare_evaluates_a_tool_run_with_its_tools():
    from jaxrl_reason.configs.tool_arithmetic import get_config
    from jaxrl_reason.experiment import compare as cmp
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.evaluation import RUN_OWN

    spec = EvalSpec(**dict.fromkeys(RUN_OWN))
    tool_run = read_run_config(get_config())
    resolved = cmp.resolve_spec(spec, tool_run)
    assert resolved.tools == dataclasses.asdict(tool_run.tools) and resolved.tools["tools"] == ("calculator",)
    plain_run = read_run_config(cmp.apply_overrides(get_config(), ["tools.tools=()"]))
    assert cmp.resolve_spec(spec, plain_run).tools == {}
    # a spec without tools keys its cache as before the field existed; with tools, differently
    assert "tools" not in cmp._spec_key(cmp.resolve_spec(spec, plain_run))
    assert cmp._spec_key(resolved)["tools"]["tools"] == ("calculator",)
