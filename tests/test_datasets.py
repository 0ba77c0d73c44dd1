"""Datasets: file loaders and their errors, splits, the resumable iterator, and the generators."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxrl_reason.data.arithmetic import (ArithmeticConfig, arithmetic_example, arithmetic_examples,
                                          column_addition, column_subtraction, compact_solution,
                                          long_multiplication, rewrite_solution, slipped_example_solution,
                                          slipped_solution, worked_solution)
from jaxrl_reason.data.datasets import (DataIterator, DatasetFormatError, Example, FieldSpec, dedupe, epoch_order,
                                        gsm8k_final_answer, load_examples, load_hf_disk, load_jsonl, load_parquet,
                                        split_train_heldout, write_jsonl)
from jaxrl_reason.rewards.math import extract_boxed

DATA = Path(__file__).parent / "data"


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------------------------
def test_load_jsonl_fields(tmp_path):
    path = write_lines(tmp_path / "math.jsonl", [
        json.dumps({"q": {"text": "What is 1+1?"}, "ans": ["2", "two"], "uid": 7, "sol": "1+1=\\boxed{2}",
                    "level": 3}),
        "",  # blank lines are skipped but still counted
        json.dumps({"q": {"text": "What is 2*3?"}, "ans": [6], "uid": "b", "sol": "\\boxed{6}", "level": 1}),
    ])
    exs = load_jsonl(path, question_field="q.text", answer_field="ans.0", id_field="uid", solution_field="sol",
                     meta_fields=("level",))
    assert exs == [
        Example("What is 1+1?", "2", "7", "1+1=\\boxed{2}", {"source": str(path), "level": 3}),
        Example("What is 2*3?", "6", "b", "\\boxed{6}", {"source": str(path), "level": 1}),
    ]
    # default ids are <stem>:<line>
    plain = write_lines(tmp_path / "plain.jsonl", [json.dumps({"question": "a?", "answer": 1.5}), "",
                                                   json.dumps({"question": "b?", "answer": "x"})])
    assert [(e.id, e.answer) for e in load_jsonl(plain)] == [("plain:1", "1.5"), ("plain:3", "x")]


def test_field_spec_object(tmp_path):
    path = write_lines(tmp_path / "s.jsonl", [json.dumps({"problem": "Why?", "final": "because"})])
    spec = FieldSpec(question_field="problem", answer_field="final")
    assert [(e.question, e.answer) for e in load_examples(path, spec)] == [("Why?", "because")]
    with pytest.raises(TypeError, match="either spec"):
        load_jsonl(path, spec, question_field="problem")


def test_gsm8k_answer_transform(tmp_path):
    path = write_lines(tmp_path / "gsm.jsonl", [
        json.dumps({"question": "How many?", "answer": "3 + 4 = 7 apples, 1,000 times\n#### 7,000"})])
    (ex,) = load_jsonl(path, answer_transform=gsm8k_final_answer)
    assert ex.answer == "7000"
    bad = write_lines(tmp_path / "gsm_bad.jsonl", [json.dumps({"question": "How many?", "answer": "7"})])
    with pytest.raises(DatasetFormatError, match=r"gsm_bad.jsonl:line 1: field 'answer': .*####"):
        load_jsonl(bad, answer_transform=gsm8k_final_answer)


@pytest.mark.parametrize("bad_line, pattern", [
    ('{"question": "q?"}', r"line 3: field 'answer' is missing"),
    ('{"question": "q?", "answer": "  "}', r"line 3: field 'answer' is empty"),
    ('{"question": 5, "answer": "1"}', r"line 3: field 'question' must be a string, got int"),
    ('{"question": "", "answer": "1"}', r"line 3: field 'question' is empty"),
    ('{"question": "q?", "answer": ["1", "2"]}', r"line 3: field 'answer' must be a string or a number, got list"),
    ('{"question": "q?", "answer": true}', r"line 3: field 'answer' must be a string or a number, got bool"),
    ('{"question": "q?", "answer": "1"', r"line 3: bad JSON"),
    ('["q?", "1"]', r"line 3: expected a JSON object per row, got list"),
])
def test_jsonl_errors_name_file_line_and_field(tmp_path, bad_line, pattern):
    good = json.dumps({"question": "fine?", "answer": "1"})
    path = write_lines(tmp_path / "broken.jsonl", [good, good.replace("fine", "also fine"), bad_line])
    with pytest.raises(DatasetFormatError, match=r"broken\.jsonl:" + pattern):
        load_jsonl(path)


def test_jsonl_missing_nested_field_and_duplicate_ids(tmp_path):
    path = write_lines(tmp_path / "n.jsonl", [json.dumps({"p": {"x": "q?"}, "answer": "1"})])
    with pytest.raises(DatasetFormatError, match=r"line 1: field 'p.text' is missing \(no key 'text'"):
        load_jsonl(path, question_field="p.text")
    dup = write_lines(tmp_path / "dup.jsonl", [json.dumps({"question": f"q{i}?", "answer": "1", "id": "same"})
                                               for i in range(2)])
    with pytest.raises(DatasetFormatError, match="id 'same' appears in rows 1 and 2"):
        load_jsonl(dup, id_field="id")


def test_write_jsonl_round_trip(tmp_path):
    exs = arithmetic_examples(3, seed=5)
    write_jsonl(exs, tmp_path / "arith.jsonl")
    back = load_jsonl(tmp_path / "arith.jsonl", id_field="id", solution_field="solution",
                      meta_fields=("meta",))
    assert [(e.question, e.answer, e.id, e.solution) for e in back] == \
        [(e.question, e.answer, e.id, e.solution) for e in exs]
    assert back[0].meta["meta"] == exs[0].meta


def test_write_jsonl_reads_back_whole_without_a_field_spec(tmp_path):
    """A run's heldout.jsonl read back as written: id, solution and meta (what a testbed or reasoning-gym reward
    and code tests read); a row of another shape, or a field spec, takes the ordinary path."""
    from jaxrl_reason.data.latin_square import latin_square_examples
    from jaxrl_reason.data.procedural import reasoning_gym_examples

    exs = latin_square_examples(2, seed=0) + reasoning_gym_examples("basic_arithmetic", 2, seed=0)
    exs.append(Example("q?", "7", "plain", None, {"source": "x"}))
    write_jsonl(exs, tmp_path / "heldout.jsonl")
    back = load_examples(tmp_path / "heldout.jsonl")
    assert back == exs and [json.dumps(e.meta, sort_keys=True) for e in back] == \
        [json.dumps(json.loads(json.dumps(e.meta)), sort_keys=True) for e in exs]
    plain = load_jsonl(tmp_path / "heldout.jsonl", id_field="id")
    assert plain[0].meta == {"source": str(tmp_path / "heldout.jsonl")} and plain[0].solution is None
    (tmp_path / "bad.jsonl").write_text(json.dumps({**json.loads(json.dumps(exs[0].__dict__)), "solution": 3}) + "\n")
    with pytest.raises(DatasetFormatError, match="bad.jsonl:line 1: field 'solution'"):
        load_examples(tmp_path / "bad.jsonl")


# ---------------------------------------------------------------------------------------------------------------
# Parquet and HF save_to_disk
# ---------------------------------------------------------------------------------------------------------------
def test_load_parquet(tmp_path):
    table = pa.table({"problem": [{"text": "What is 3+4?"}, {"text": "What is 5-2?"}], "answer": [7, 3]})
    pq.write_table(table, tmp_path / "p.parquet")
    exs = load_examples(tmp_path / "p.parquet", question_field="problem.text")
    assert [(e.question, e.answer, e.id) for e in exs] == [("What is 3+4?", "7", "p:1"), ("What is 5-2?", "3", "p:2")]
    pq.write_table(pa.table({"question": ["ok?", None], "answer": ["1", "2"]}), tmp_path / "bad.parquet")
    with pytest.raises(DatasetFormatError, match=r"bad\.parquet:row 2: field 'question' must be a string, got "
                                                 r"NoneType"):
        load_parquet(tmp_path / "bad.parquet")


def test_load_hf_save_to_disk_fixture():
    train = load_hf_disk(DATA / "hf_saved_dataset", "train", question_field="problem", solution_field="solution",
                         meta_fields=("meta.level",))
    assert [(e.question, e.answer, e.solution) for e in train] == [
        ("What is 2 + 3?", "5", "2 + 3 = 5, so \\boxed{5}."), ("Compute 7 * 6.", "42", "7 * 6 = 42, so \\boxed{42}.")]
    assert [e.meta["meta.level"] for e in train] == [1, 2]
    test = load_examples(DATA / "hf_saved_dataset", split="test", question_field="problem")
    assert [(e.question, e.answer, e.id) for e in test] == [("What is 10 - 4?", "6", "test:1")]
    with pytest.raises(ValueError, match=r"splits \['train', 'test'\]; pass split="):
        load_hf_disk(DATA / "hf_saved_dataset", question_field="problem")
    with pytest.raises(ValueError, match="not 'validation'"):
        load_hf_disk(DATA / "hf_saved_dataset", "validation", question_field="problem")
    # a single Dataset stored in two shards: rows are read in shard order
    single = load_examples(DATA / "hf_saved_single", question_field="problem")
    assert [e.answer for e in single] == ["5", "42", "6"]
    with pytest.raises(DatasetFormatError, match=r"hf_saved_single:row 1: field 'question' is missing"):
        load_hf_disk(DATA / "hf_saved_single")
    with pytest.raises(ValueError, match="single Dataset without splits"):
        load_hf_disk(DATA / "hf_saved_single", "train", question_field="problem")
    with pytest.raises(FileNotFoundError, match="not a `save_to_disk` directory"):
        load_hf_disk(DATA)


def test_load_examples_rejects_unknown_suffix(tmp_path):
    (tmp_path / "x.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="expected .jsonl, .parquet or a save_to_disk directory"):
        load_examples(tmp_path / "x.csv")


# ---------------------------------------------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------------------------------------------
def _qa(i: int, q: str | None = None) -> Example:
    return Example(question=q or f"What is {i} + {i}?", answer=str(2 * i), id=f"e{i}")


def test_split_is_deterministic_disjoint_and_order_free():
    exs = [_qa(i) for i in range(2000)]
    train, held = split_train_heldout(exs, 0.2)
    assert len(train) + len(held) == 2000
    assert 0.16 < len(held) / 2000 < 0.24
    assert {e.question for e in train}.isdisjoint({e.question for e in held})
    train2, held2 = split_train_heldout(list(reversed(exs)), 0.2)
    assert {e.id for e in held2} == {e.id for e in held}
    _, held_salted = split_train_heldout(exs, 0.2, salt="other")
    assert {e.id for e in held_salted} != {e.id for e in held}
    assert split_train_heldout(exs, 0.0)[1] == [] and split_train_heldout(exs, 1.0)[0] == []
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_train_heldout(exs, 1.5)


def test_split_keeps_duplicate_questions_together():
    base = [_qa(i) for i in range(300)]
    variants = [Example(question="  " + e.question.upper().replace(" ", "  ") + " ", answer=e.answer,
                        id=e.id + "-dup") for e in base]
    train, held = split_train_heldout(base + variants, 0.3)
    held_ids = {e.id for e in held}
    for e in base:
        assert (e.id in held_ids) == (e.id + "-dup" in held_ids)
    assert len(dedupe(base + variants)) == 300


# ---------------------------------------------------------------------------------------------------------------
# DataIterator
# ---------------------------------------------------------------------------------------------------------------
def _ids(batch):
    return [e.id for e in batch]


def test_iterator_epochs_are_seeded_permutations():
    exs = [_qa(i) for i in range(10)]
    it = DataIterator(exs, batch_size=4, seed=3, drop_last=False, num_epochs=2)
    batches = list(it)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    epoch0 = sum((_ids(b) for b in batches[:3]), [])
    epoch1 = sum((_ids(b) for b in batches[3:]), [])
    assert sorted(epoch0) == sorted(epoch1) == sorted(e.id for e in exs)
    assert epoch0 == [f"e{i}" for i in epoch_order(10, 3, 0)]
    assert epoch1 == [f"e{i}" for i in epoch_order(10, 3, 1)]
    assert epoch0 != epoch1
    again = list(DataIterator(exs, batch_size=4, seed=3, drop_last=False, num_epochs=2))
    assert [_ids(b) for b in again] == [_ids(b) for b in batches]
    other = list(DataIterator(exs, batch_size=4, seed=4, drop_last=False, num_epochs=1))
    assert sum((_ids(b) for b in other), []) != epoch0


def test_iterator_drop_last_and_no_shuffle():
    exs = [_qa(i) for i in range(10)]
    it = DataIterator(exs, batch_size=4, shuffle=False, num_epochs=2)
    assert it.batches_per_epoch == 2
    assert [_ids(b) for b in it] == [["e0", "e1", "e2", "e3"], ["e4", "e5", "e6", "e7"]] * 2
    with pytest.raises(ValueError, match="exceeds the 10 examples"):
        DataIterator(exs, batch_size=11)


@pytest.mark.parametrize("consumed", [0, 1, 2, 3, 5])
def test_iterator_resumes_exactly(consumed):
    exs = [_qa(i) for i in range(10)]
    ref = DataIterator(exs, batch_size=3, seed=11)  # 3 batches per epoch, 1 example dropped
    expected = [_ids(next(ref)) for _ in range(consumed + 6)]
    it = DataIterator(exs, batch_size=3, seed=11)
    for _ in range(consumed):
        next(it)
    state = json.loads(json.dumps(it.state()))  # must survive a JSON checkpoint
    resumed = DataIterator(exs, batch_size=3, seed=11)
    resumed.restore(state)
    assert [_ids(next(resumed)) for _ in range(6)] == expected[consumed:]
    assert resumed.epoch == ref.epoch


def test_iterator_restore_checks_data_and_seed():
    exs = [_qa(i) for i in range(10)]
    state = DataIterator(exs, batch_size=2, seed=1).state()
    with pytest.raises(ValueError, match="different data"):
        DataIterator(exs[:9], batch_size=2, seed=1).restore(state)
    with pytest.raises(ValueError, match="seed=1"):
        DataIterator(exs, batch_size=2, seed=2).restore(state)
    with pytest.raises(ValueError, match="lacks 'position'"):
        DataIterator(exs, batch_size=2, seed=1).restore({"epoch": 0, "seed": 1, "fingerprint": "x"})


def test_iterator_process_slices_partition_global_batch():
    exs = [_qa(i) for i in range(12)]
    full = [_ids(b) for b in DataIterator(exs, batch_size=4, seed=0, num_epochs=1)]
    parts = [[_ids(b) for b in DataIterator(exs, batch_size=4, seed=0, num_epochs=1, process_index=p,
                                              process_count=2)] for p in range(2)]
    assert [a + b for a, b in zip(*parts)] == full
    with pytest.raises(ValueError, match="not divisible by process_count 3"):
        DataIterator(exs, batch_size=4, process_count=3)


# ---------------------------------------------------------------------------------------------------------------
# Arithmetic generator
# ---------------------------------------------------------------------------------------------------------------
def test_column_addition_by_hand():
    lines, result = column_addition(47, 385)
    assert result == 432
    assert lines == ["Add 47 and 385 column by column, starting from the ones.",
                     "ones: 7 + 5 = 12, write 2, carry 1",
                     "tens: 4 + 8 + 1 (carry) = 13, write 3, carry 1",
                     "hundreds: 0 + 3 + 1 (carry) = 4, write 4",
                     "So 47 + 385 = 432."]
    assert column_addition(95, 7)[0][-2:] == ["The final carry 1 becomes the leading digit.", "So 95 + 7 = 102."]


def test_column_subtraction_by_hand():
    lines, result = column_subtraction(503, 28)
    assert result == 475
    assert lines == ["Subtract 28 from 503 column by column, starting from the ones.",
                     "ones: 3 < 8, borrow 1: 13 - 8 = 5",
                     "tens: 0 - 1 (borrow) = -1, -1 < 2, borrow 1: 9 - 2 = 7",
                     "hundreds: 5 - 1 (borrow) = 4, 4 - 0 = 4",
                     "So 503 - 28 = 475."]


def test_long_multiplication_by_hand():
    lines, result = long_multiplication(23, 45)
    assert result == 1035
    assert lines[0] == "Split 45 by place value: 23 * 45 = 23 * 40 + 23 * 5."
    assert "Shift by 1 place: 23 * 40 = 920." in lines
    assert lines[-1] == "So 23 * 45 = 1035."


def test_worked_solution_precedence_and_signs():
    text, value = worked_solution([3, 4, 5, 2], ["+", "*", "-"])
    assert value == 3 + 4 * 5 - 2
    steps = [ln for ln in text.splitlines() if ln.startswith(("Step", "Now"))]
    assert steps == ["Step 1: 4 * 5.", "Now the expression is 3 + 20 - 2.", "Step 2: 3 + 20.",
                     "Now the expression is 23 - 2.", "Step 3: 23 - 2."]
    assert text.endswith("The answer is \\boxed{21}.")
    text, value = worked_solution([5, 9, 7], ["-", "*"])
    assert value == 5 - 63 and "5 is less than 63, so 5 - 63 = -(63 - 5)." in text


def test_compact_solution_precedence_and_signs():
    text, value = compact_solution([3, 4, 5, 2], ["+", "*", "-"])
    assert value == 21
    assert text.splitlines() == ["4 * 5 = 20", "3 + 20 = 23", "23 - 2 = 21", "The answer is \\boxed{21}."]
    text, value = compact_solution([5, -9], ["*"])
    assert (text, value) == ("5 * (-9) = -45\nThe answer is \\boxed{-45}.", -45)
    with pytest.raises(ValueError, match="solution_style"):
        ArithmeticConfig(solution_style="terse")


def test_rewrite_solution_rewrites_the_whole_expression():
    text, value = rewrite_solution([3, 4, 5, 2], ["+", "*", "-"])
    assert value == 21
    assert text.splitlines() == ["3 + 4 * 5 - 2", "= 3 + 20 - 2", "= 23 - 2", "= 21", "The answer is \\boxed{21}."]


@pytest.mark.parametrize("config", [
    ArithmeticConfig(),
    ArithmeticConfig(min_digits=2, max_digits=4, min_operands=3, max_operands=5, operations=("+", "-", "*")),
    ArithmeticConfig(max_digits=2, min_operands=2, max_operands=4, operations=("-", "*")),
    ArithmeticConfig(max_digits=2, min_operands=3, max_operands=5, operations=("+", "-", "*"),
                     solution_style="compact"),
    ArithmeticConfig(max_digits=2, min_operands=1, max_operands=5, operations=("+", "-", "*"),
                     solution_style="rewrite"),
])
def test_arithmetic_answers_are_correct(config):
    for ex in arithmetic_examples(150, seed=9, config=config):
        expression = ex.meta["expression"]
        assert ex.question == f"What is {expression}?"
        assert int(ex.answer) == eval(expression)  # Python's precedence is the one the solutions follow
        assert extract_boxed(ex.solution) == ex.answer
        assert ex.solution.rstrip().endswith(f"\\boxed{{{ex.answer}}}.")


@pytest.mark.parametrize("style", ["compact", "rewrite"])
@pytest.mark.parametrize("kinds", [("result",), ("operand",), ("result", "operand")])
def test_slipped_solution_has_one_wrong_step_and_is_consistent_after_it(style, kinds):
    """A contrast negative differs from the worked solution in one step and everything that step feeds, its
    answer is wrong, and every other line is arithmetic done right on the values it shows."""
    config = ArithmeticConfig(max_digits=2, min_operands=2, max_operands=5, operations=("+", "-", "*"),
                              solution_style=style)
    rng = np.random.default_rng(3)
    step_re = re.compile(r"^(\(?-?\d+\)?) ([-+*]) (\(?-?\d+\)?) = (-?\d+)$")
    for ex in arithmetic_examples(200, seed=4, config=config):
        text = slipped_example_solution(ex, rng, style=style, kinds=kinds)
        assert text != ex.solution
        boxed = extract_boxed(text)
        assert boxed is not None and int(boxed) != int(ex.answer)
        got, want = text.splitlines(), ex.solution.splitlines()
        assert len(got) == len(want)  # same steps: one value is wrong, nothing is added or dropped
        if style == "compact":
            steps = [[int(x.strip("()")) if i != 1 else x for i, x in enumerate(step_re.match(ln).groups())]
                     for ln in got[:-1]]
            refs = [[int(x.strip("()")) if i != 1 else x for i, x in enumerate(step_re.match(ln).groups())]
                    for ln in want[:-1]]
            wrong_results = [k for k, (a, op, b, r) in enumerate(steps)
                             if r != {"+": a + b, "-": a - b, "*": a * b}[op]]
            first = next(k for k, (s, ref) in enumerate(zip(steps, refs)) if s != ref)
            copied = (steps[first][0] != refs[first][0]) + (steps[first][2] != refs[first][2])
            if wrong_results:  # a result slip: one wrong sum, on operands copied right
                assert "result" in kinds and wrong_results == [first] and copied == 0, (ex.solution, text)
            else:  # an operand slip: one operand off, every step's arithmetic right
                assert "operand" in kinds and copied == 1, (ex.solution, text)
            assert steps[-1][3] == int(boxed)


def test_slipped_solution_rejects_what_it_cannot_slip():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="style"):
        slipped_solution([1, 2], ["+"], rng, style="columns")
    with pytest.raises(ValueError, match="at least one operation"):
        slipped_solution([7], [], rng)
    with pytest.raises(ValueError, match="kinds"):
        slipped_solution([1, 2], ["+"], rng, kinds=("sign",))
    with pytest.raises(ValueError, match="could not place a slip"):
        slipped_solution([0, 0], ["*"], rng, kinds=("operand",))  # 0 * 0: a one-digit copy slip leaves 0
    with pytest.raises(ValueError, match="meta"):
        slipped_example_solution(Example("What is 1 + 2?", "3", "x"), rng)


def test_arithmetic_is_deterministic_and_indexable():
    a = arithmetic_examples(20, seed=1)
    assert a == arithmetic_examples(20, seed=1)
    assert a[10:] == arithmetic_examples(10, seed=1, start=10)
    assert arithmetic_example(7, seed=1) == a[7]
    assert [e.question for e in a] != [e.question for e in arithmetic_examples(20, seed=2)]
    assert len({e.id for e in a}) == 20
    assert len(set(a + arithmetic_examples(20, seed=1))) == 20  # Examples are hashable despite their meta dict


def test_arithmetic_non_negative_and_validation():
    config = ArithmeticConfig(min_operands=3, max_operands=4, operations=("+", "-"), allow_negative=False)
    for ex in arithmetic_examples(100, seed=0, config=config):
        assert "(-" not in ex.solution and "less than" not in ex.solution and int(ex.answer) >= 0
    with pytest.raises(ValueError, match="operations"):
        ArithmeticConfig(operations=("/",))
    with pytest.raises(ValueError, match="min_digits"):
        ArithmeticConfig(min_digits=3, max_digits=2)


# ---------------------------------------------------------------------------------------------------------------
# reasoning-gym
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rg_grader():
    pytest.importorskip("reasoning_gym")
    from jaxrl_reason.rewards.math import MathGrader

    g = MathGrader(num_workers=2, preload=("reasoning_gym",), timeout_s=10.0)
    yield g
    g.close()


def test_reasoning_gym_examples_are_deterministic():
    pytest.importorskip("reasoning_gym")
    from jaxrl_reason.data.procedural import reasoning_gym_examples

    for task in ("basic_arithmetic", "chain_sum", "gsm_symbolic", "countdown"):
        a = reasoning_gym_examples(task, 3, seed=5)
        assert a == reasoning_gym_examples(task, 3, seed=5)
        assert a[1:] == reasoning_gym_examples(task, 2, seed=5, start=1)
        assert all(e.meta["task"] == task and e.meta["entry"]["question"] == e.question for e in a)
        assert all(e.answer for e in a)
    (gsm,) = reasoning_gym_examples("gsm_symbolic", 1, seed=5)
    assert extract_boxed(gsm.solution) == gsm.answer and "####" not in gsm.solution
    with pytest.raises(ValueError, match="not inside config"):
        reasoning_gym_examples("chain_sum", 1, config={"seed": 3})


def _reorder_top_level(expr: str) -> str:
    """`a + b` -> `(b) + (a)`, `a * b` -> `(b) * (a)`, `a - b` -> `-(b) + (a)`."""
    import ast

    node = ast.parse(expr, mode="eval").body
    assert isinstance(node, ast.BinOp), expr
    left, right = ast.unparse(node.left), ast.unparse(node.right)
    if isinstance(node.op, ast.Sub):
        return f"-({right}) + ({left})"
    return f"({right}) {'+' if isinstance(node.op, ast.Add) else '*'} ({left})"


def test_reasoning_gym_reward_uses_task_scorer(rg_grader):
    from jaxrl_reason.data.procedural import reasoning_gym_examples, reasoning_gym_reward

    (chain,) = reasoning_gym_examples("chain_sum", 1, seed=2)
    (count,) = reasoning_gym_examples("countdown", 1, seed=2)
    target = count.meta["entry"]["metadata"]["target"]
    reference = count.answer
    alternative = _reorder_top_level(reference)  # same numbers, same value, different string
    assert eval(alternative) == eval(reference) == target and alternative != reference
    completions = [f"\\boxed{{{chain.answer}}}", f"\\boxed{{{int(chain.answer) + 1}}}", "no box",
                   f"so \\boxed{{{alternative}}}", f"\\boxed{{{reference}"]
    examples = [chain, chain, chain, count, count]
    result = reasoning_gym_reward(completions, examples, grader=rg_grader)
    np.testing.assert_array_equal(result.scores, np.array([1, 0, 0, 1, 0], np.float32))
    assert result.details[2]["no_answer"] and result.details[4]["unclosed_box"]
    assert result.details[3]["extracted"] == alternative
    raw = reasoning_gym_reward(["\\boxed{999999}"], [count], grader=rg_grader, binary=False)
    assert 0.0 <= raw.scores[0] < 1.0 and raw.scores[0] == raw.details[0]["raw_score"]
    with pytest.raises(ValueError, match="not a reasoning-gym example"):
        reasoning_gym_reward(["\\boxed{1}"], [_qa(1)], grader=rg_grader)


# ---------------------------------------------------------------------------------------------------------------
# tensorflow-datasets builder
# ---------------------------------------------------------------------------------------------------------------
def test_tfds_builder_round_trip(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    from jaxrl_reason.data.tfds_builder import jsonl_tfds_builder, load_prepared, tfds_examples

    train = write_lines(tmp_path / "train.jsonl", [json.dumps({"q": f"What is {i}+1?", "a": i + 1, "k": f"t{i}"})
                                                   for i in range(6)])
    test = write_lines(tmp_path / "test.jsonl", [json.dumps({"q": "What is 9+1?", "a": 10, "k": "s0"})])
    builder = jsonl_tfds_builder({"train": train, "test": [test]}, tmp_path / "tfds", question_field="q",
                                 answer_field="a", id_field="k")
    builder.download_and_prepare()
    got = tfds_examples(builder, "train")
    expected = load_jsonl(train, question_field="q", answer_field="a", id_field="k")
    assert sorted(got, key=lambda e: e.id) == sorted(expected, key=lambda e: e.id)
    assert [(e.question, e.answer) for e in tfds_examples(load_prepared(builder.data_dir), "test")] == \
        [("What is 9+1?", "10")]
    # other files get another config directory rather than reusing the prepared data
    other = jsonl_tfds_builder({"train": test}, tmp_path / "tfds", question_field="q", answer_field="a")
    assert other.data_dir != builder.data_dir


def test_tfds_builder_reports_bad_rows(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    from jaxrl_reason.data.tfds_builder import jsonl_tfds_builder

    bad = write_lines(tmp_path / "bad.jsonl", [json.dumps({"question": "ok?", "answer": "1"}),
                                               json.dumps({"question": "no answer?"})])
    builder = jsonl_tfds_builder({"train": bad}, tmp_path / "tfds")
    with pytest.raises(DatasetFormatError, match=r"bad\.jsonl:line 2: field 'answer' is missing"):
        builder.download_and_prepare()


def test_process_reward_needs_right_steps_and_right_answer():
    from jaxrl_reason.data.arithmetic import arithmetic_process_reward, compact_steps_faithful

    config = ArithmeticConfig(max_digits=2, min_operands=2, max_operands=4, operations=("+", "-", "*"),
                              solution_style="compact")
    examples = arithmetic_examples(40, seed=3, config=config)
    assert all(compact_steps_faithful(e.solution, e.meta["expression"]) for e in examples)
    expr = "4 + 9 + 2 + 2 + 1"
    ex = Example(question=f"What is {expr}?", answer="18", id="hand", meta={"expression": expr})
    right = "4 + 9 = 13\n13 + 2 = 15\n15 + 2 = 17\n17 + 1 = 18\nThe answer is \\boxed{18}."
    hacked = "4 + 9 = 12\n12 + 2 = 14\n14 + 2 = 16\n16 + 2 = 18\nThe answer is \\boxed{18}."  # right answer, wrong steps
    skipped = "4 + 9 = 13\n13 + 5 = 18\nThe answer is \\boxed{18}."
    wrong_answer = right.replace("boxed{18}", "boxed{17}")
    result = arithmetic_process_reward([right, hacked, skipped, wrong_answer], [ex] * 4)
    np.testing.assert_array_equal(result.scores, [1, 0, 0, 0])
    assert [d["steps_faithful"] for d in result.details] == [True, False, False, True]
    assert compact_steps_faithful("7 * 22 = 154\n5 - 154 = -149\n\\boxed{-149}", "5 - 7 * 22")
    assert not compact_steps_faithful("5 - 7 = -2\n-2 * 22 = -44\n\\boxed{-44}", "5 - 7 * 22")  # precedence
