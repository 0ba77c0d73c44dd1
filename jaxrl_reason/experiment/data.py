"""Named data sources: a config's `data` section -> train and held-out problems, the reward that grades them and
the prompt that poses them."""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

from jaxrl_reason.data.datasets import dedupe, heldout_score, load_examples, question_key
from jaxrl_reason.data.prompts import code_solve_prompt, solve_prompt
from jaxrl_reason.data.testbed import TASK_MODULES, critique_check, task_of, verify_target
from jaxrl_reason.experiment.config import DataSection
from jaxrl_reason.methods.base import RowFormats
from jaxrl_reason.rewards.math import math_reward


class TaskData(NamedTuple):
    train: list
    heldout: list
    reward_fn: Callable  # (texts, examples) -> RewardResult
    prompt_fn: Callable[[str], str]  # question -> the user turn that asks it
    # example -> a tool-using demonstration for the SFT warm-up with `tools` on: model text, observation, model text,
    # ... (`rollout.multiturn.demo_solution`); None: the source writes none
    tool_demo: Optional[Callable[[Any], list]] = None


def split_heldout(pool, n: int, salt: str = "heldout"):
    """-> (train, held-out): exactly `n` distinct held-out questions, those with the lowest hash score, and every
    copy of them removed from train. A plain hash split (`split_train_heldout`) is only `n` in expectation and may
    repeat a question, which on a small question space left far fewer distinct held-out problems than asked."""
    distinct = dedupe(pool)
    if len(distinct) <= n:
        raise ValueError(f"config data.heldout_size={n} needs more distinct questions than the {len(distinct)} "
                         "generated; lower heldout_size or raise data.train_size / the task's difficulty")
    heldout = sorted(distinct, key=lambda e: heldout_score(e.question, salt))[:n]
    keys = {question_key(e.question) for e in heldout}
    return [e for e in pool if question_key(e.question) not in keys], heldout


def _math_reward_fn(d: DataSection):
    def reward(texts, examples):
        return math_reward(texts, [e.answer for e in examples], extraction=d.answer_extraction)
    return reward


def _pool_size(d: DataSection) -> int:
    """Problems to generate: enough that the held-out split still leaves `train_size`-ish for training."""
    return d.train_size + 4 * d.heldout_size


def arithmetic_source(d: DataSection, seed: int) -> TaskData:
    from jaxrl_reason.data.arithmetic import (ArithmeticConfig, arithmetic_examples, arithmetic_process_reward,
                                              calculator_demo)

    acfg = ArithmeticConfig(min_digits=d.min_digits, max_digits=d.max_digits, min_operands=d.min_operands,
                            max_operands=d.max_operands, operations=tuple(d.operations),
                            solution_style=d.solution_style)
    train, heldout = split_heldout(arithmetic_examples(_pool_size(d), seed=seed, config=acfg), d.heldout_size)
    if d.reward == "answer_and_steps":
        if acfg.solution_style != "compact":
            raise ValueError("config data.reward='answer_and_steps' checks compact steps; set "
                             "data.solution_style='compact'")
        return TaskData(train, heldout, arithmetic_process_reward, solve_prompt, calculator_demo)
    return TaskData(train, heldout, _math_reward_fn(d), solve_prompt, calculator_demo)


def code_source(d: DataSection, seed: int) -> TaskData:
    from jaxrl_reason.data.code_datasets import (as_examples, code_example_reward, generate_function_tasks,
                                                 load_code_jsonl, load_humaneval)

    if d.path == "humaneval":
        problems = load_humaneval()
    elif d.path:
        problems = load_code_jsonl(d.path)
    else:
        problems = generate_function_tasks(_pool_size(d), seed=seed)
    train, heldout = split_heldout(as_examples(problems), d.heldout_size)
    return TaskData(train, heldout, code_example_reward, code_solve_prompt)


def reasoning_gym_source(d: DataSection, seed: int) -> TaskData:
    from jaxrl_reason.data.procedural import reasoning_gym_examples, reasoning_gym_reward

    if not d.task:
        raise ValueError("config data.task must name a reasoning_gym task when data.source=reasoning_gym")
    train, heldout = split_heldout(reasoning_gym_examples(d.task, _pool_size(d), seed=seed), d.heldout_size)
    return TaskData(train, heldout, lambda t, e: reasoning_gym_reward(t, e), solve_prompt)


def file_source(d: DataSection, seed: int) -> TaskData:
    del seed  # a file's order is its own
    if not d.path:
        raise ValueError("config data.path must be set when data.source=file")
    fields = dict(question_field=d.question_field, answer_field=d.answer_field)
    train = load_examples(d.path, **fields)
    if d.heldout_path:
        heldout = load_examples(d.heldout_path, **fields)[:d.heldout_size]
    else:
        train, heldout = split_heldout(train, d.heldout_size)
    return TaskData(train, heldout, _math_reward_fn(d), solve_prompt)


def graph_path_source(d: DataSection, seed: int) -> TaskData:
    from jaxrl_reason.data.graph_path import GraphPathConfig, graph_path_examples, graph_path_reward

    gcfg = GraphPathConfig(arms=d.graph_arms, arm_len=d.graph_arm_len)
    train, heldout = split_heldout(graph_path_examples(_pool_size(d), seed=seed, config=gcfg), d.heldout_size)
    return TaskData(train, heldout, graph_path_reward, solve_prompt)


def graph_colour_source(d: DataSection, seed: int) -> TaskData:
    from jaxrl_reason.data.graph_colour import graph_colour_examples, graph_colour_reward

    train, heldout = split_heldout(graph_colour_examples(_pool_size(d), seed=seed), d.heldout_size)
    return TaskData(train, heldout, graph_colour_reward, solve_prompt)


def latin_square_source(d: DataSection, seed: int) -> TaskData:
    from jaxrl_reason.data.latin_square import LatinConfig, latin_square_examples, latin_square_reward

    latin = LatinConfig(blanks=d.latin_blanks, solution=d.latin_solution)
    examples = latin_square_examples(_pool_size(d), seed=seed, config=latin)
    train, heldout = split_heldout(examples, d.heldout_size)
    return TaskData(train, heldout, latin_square_reward, solve_prompt)


SOURCES = {"arithmetic": arithmetic_source, "code": code_source, "reasoning_gym": reasoning_gym_source,
           "file": file_source, "graph_path": graph_path_source, "graph_colour": graph_colour_source,
           "latin_square": latin_square_source}
# Sources that write the auxiliary warm-up formats (verify rows, critiques, corrections) from their own instances:
# the testbed tasks (`data.testbed.task_of`)
AUX_FORMATS = TASK_MODULES


def verify_target_fn(d: DataSection):
    """(question, completion) -> the verify row's target text under `data.verify_format`, or None for the
    one-token verdict (the methods' default)."""
    if d.verify_format == "verdict":
        return None
    return functools.partial(verify_target, task_of(d.source), verify_format=d.verify_format)


def critique_check_fn(d: DataSection):
    """(question, completion) -> the worked check a critique opens with under `data.critique_format`
    "worked_check", or None for the paper's critique (the verdict first)."""
    if d.critique_format == "fields":
        return None
    return functools.partial(critique_check, task_of(d.source))


def row_formats(d: DataSection) -> RowFormats:
    """How the `data` section writes the self-checking rows, as the trainer hands it to the methods."""
    return RowFormats(verify_target_fn(d), critique_check_fn(d), d.correction_format, d.guided_layout,
                      d.prompt_wording)


def build_data(d: DataSection, seed: int) -> TaskData:
    """The `data` section's problems, reward and prompt (`seed` draws generated problems)."""
    if d.source not in SOURCES:
        raise ValueError(f"config data.source={d.source!r} is unknown; use {' | '.join(SOURCES)}")
    return SOURCES[d.source](d, seed)
