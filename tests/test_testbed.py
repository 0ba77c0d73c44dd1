"""The graph-path testbed (data/graph_path.py): its exact checker, the error injector, the auxiliary formats
(verify rows, CURE critiques, CIPO corrections) and the warm-up that mixes them in, end to end through the config."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil

import numpy as np
import pytest

from jaxrl_reason.data import graph_path as gp
from jaxrl_reason.data.prompts import VERIFY_NO, VERIFY_YES, parse_critique, verify_prompt

# A hand-made instance: start A, arms A-B-C, A-D-E, A-F-G; the goal G.
Q = "Edges: B C, A B, D E, F G, A D, A F\nFind a path from A to G."


def _sol(nodes: str) -> str:
    return gp.solution_text(nodes.split())


def test_checker_on_hand_made_solutions():
    assert gp.check(Q, _sol("A F G"))
    assert gp.check(Q, "- A F\n- F G\n\\boxed{A F G}")  # with or without the space after the brace
    assert gp.error_kind(Q, "A B C".split()) == "wrong_end"
    assert gp.error_kind(Q, "A G".split()) == "non_edge"
    assert gp.error_kind(Q, "F G".split()) == "wrong_start"
    assert gp.error_kind(Q, "A F A F G".split()) == "revisit"
    assert gp.error_kind(Q, None) == "no_answer"
    assert not gp.check(Q, "- A F\n- F G")  # no boxed answer
    assert not gp.check(Q, "\\boxed{A, F, 7}")
    r = gp.graph_path_reward([_sol("A F G"), _sol("A D E")], [gp.Example(Q, "A F G", "x")] * 2)
    np.testing.assert_array_equal(r.scores, [1.0, 0.0])
    assert r.details[1]["error_kind"] == "wrong_end"


def test_generated_instances_solve_and_round_trip():
    exs = gp.graph_path_examples(50, seed=3, config=gp.GraphPathConfig(arms=3, arm_len=2))
    for e in exs:
        assert gp.check(e.question, e.solution)
        edges, s, t = gp.parse_question(e.question)
        assert len(edges) == 6 and s == e.meta["start"] and t == e.meta["goal"]
    with pytest.raises(ValueError, match="graph_arms"):
        gp.GraphPathConfig(arms=1)


@pytest.mark.parametrize("kind", gp.INJECTABLE_KINDS)
@pytest.mark.parametrize("arm_len", [1, 3])
def test_injector_writes_only_wrong_solutions_of_the_named_kind(kind, arm_len):
    rng = np.random.default_rng(0)
    for e in gp.graph_path_examples(40, seed=1, config=gp.GraphPathConfig(arms=3, arm_len=arm_len)):
        path = gp.inject_error(e, kind, rng)
        assert gp.error_kind(e.question, path) == kind, (e.question, path)
        assert not gp.check(e.question, gp.solution_text(path))


def _rows(fmt, n=60, seed=0):
    exs = gp.graph_path_examples(30, seed=seed)
    counts = {"verify": 0, "critique": 0, "correct": 0, fmt: n}
    return exs, gp.auxiliary_rows(exs, seed=seed, **counts)


def test_critiques_parse_with_every_field_and_quote_the_faulty_hop():
    exs, rows = _rows("critique")
    verdicts = []
    for r in rows:
        c = parse_critique(r.solution)
        assert c.format_errors == (), (r.solution, c.format_errors)
        assert c.hint_words >= 10
        solution = r.question.split("Solution:\n")[1].split("\n\nReply with")[0]
        question = r.question.split("Problem:\n")[1].split("\n\nSolution:")[0]
        wrong = not gp.check(question, solution)
        assert c.error_found is wrong
        verdicts.append(wrong)
        # The hint names a constraint or a strategy, never a node (so never the answer).
        assert not re.search(r"\b[A-Z]\b", c.hint), c.hint
        if wrong:
            assert c.quote in solution.split("\n")
            path = gp.parse_path(solution)
            i = solution.split("\n").index(c.quote)
            kind = gp.error_kind(question, path)
            # The quoted hop is where the path first breaks the named constraint.
            assert kind == "wrong_end" or gp.error_kind(question, path[:i + 2]) == kind
    assert 0 < sum(verdicts) < len(verdicts)


def test_correction_targets_pass_the_checker_and_attempts_do_not():
    _, rows = _rows("correct")
    for r in rows:
        q = r.meta["question"]
        attempt = r.question.split("earlier attempt at this problem:\n")[1].split("\n\nReview the attempt")[0]
        assert gp.check(q, r.solution)
        assert not gp.check(q, attempt)


def test_verify_rows_are_labelled_by_the_checker_and_balanced():
    _, rows = _rows("verify")
    labels = [r.solution for r in rows]
    assert set(labels) == {VERIFY_YES, VERIFY_NO} and labels.count(VERIFY_YES) == len(rows) // 2
    for r in rows:
        q = r.question.split("Problem:\n")[1].split("\n\nSolution:")[0]
        s = r.question.split("Solution:\n")[1].split("\n\nIs this solution")[0]
        assert (r.solution == VERIFY_YES) == gp.check(q, s)


# ---------------------------------------------------------------------------------------------------------------
# Through the config: the data source and the warm-up that mixes the auxiliary formats
# ---------------------------------------------------------------------------------------------------------------
def _tiny_cfg(tmp_path, **sft):
    from jaxrl_reason.configs.testbed_rlv import get_config

    c = get_config()
    c.workdir = str(tmp_path)
    c.data.train_size, c.data.heldout_size = 200, 16
    c.model.hidden_size, c.model.num_hidden_layers, c.model.intermediate_size = 32, 2, 64
    c.tokenizer.vocab_size = 300
    c.sft.steps, c.sft.examples, c.sft.batch_size = 3, 40, 4
    c.rl.progress = False
    for k, v in sft.items():
        setattr(c.sft, k, v)
    return c


def test_sft_examples_mix_the_auxiliary_formats_by_their_shares(tmp_path):
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.warmup import sft_examples

    rc = read_run_config(_tiny_cfg(tmp_path, aux_verify_share=0.5, aux_critique_share=0.25, aux_correct_share=0.0))
    task = build_data(rc.data, rc.seed)
    rows, prompt_fn = sft_examples(rc, task)
    fmts = [r.meta.get("format", "solve") for r in rows]
    assert (fmts.count("solve"), fmts.count("verify"), fmts.count("critique"), fmts.count("correct")) == (40, 20, 10, 0)
    assert fmts.count("guided") == 0
    rc_g = read_run_config(_tiny_cfg(tmp_path, aux_critique_share=0.25, aux_guided_share=0.5))
    fmts = [r.meta.get("format", "solve") for r in sft_examples(rc_g, task)[0]]
    assert (fmts.count("solve"), fmts.count("critique"), fmts.count("guided")) == (40, 10, 20)
    # guided rows are written in data.guided_layout, whatever the method (a GRPO baseline arm makes the warm-up)
    cfg = _tiny_cfg(tmp_path, aux_guided_share=0.5)
    cfg.data.guided_layout = "first"
    guided = [r for r in sft_examples(read_run_config(cfg), task)[0] if r.meta.get("format") == "guided"]
    assert len(guided) == 20 and all(r.question.startswith("Guidance for solving the problem below") and
                                     r.question.endswith(task.prompt_fn(r.meta["question"])) for r in guided)
    aux = rows[-1]
    assert prompt_fn(aux.question) == aux.question  # an auxiliary row is its own user turn
    assert prompt_fn(rows[0].question) == task.prompt_fn(rows[0].question)
    off, fn = sft_examples(dataclasses.replace(rc, sft=dataclasses.replace(rc.sft, aux_verify_share=0.0,
                                                                           aux_critique_share=0.0)), task)
    assert len(off) == 40 and fn is task.prompt_fn


def test_aux_shares_refused_for_a_source_without_them(tmp_path):
    from jaxrl_reason.experiment.pipeline import start

    c = _tiny_cfg(tmp_path, aux_critique_share=0.5)
    c.data.source = "arithmetic"
    with pytest.raises(ValueError, match="aux_"):
        start(c)
    c = _tiny_cfg(tmp_path, aux_verify_share=-1.0)
    with pytest.raises(ValueError, match="aux_verify_share"):
        start(c)


def test_warmup_runs_end_to_end_on_the_testbed(tmp_path):
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import warmed_up_policy

    rc, _ = start(_tiny_cfg(tmp_path))
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ->\\{}":  # the task's alphabet encodes and decodes losslessly
        assert tok.decode(tok.encode(ch)) == ch
    model, report = warmed_up_policy(rc, tok, task, str(tmp_path))
    assert report["sft_seconds"] > 0
    assert (tmp_path / "sft_model" / "config.json").exists()


def test_tokenizer_aux_corpus_makes_critique_rows_shorter_and_is_refused_without_rows(tmp_path):
    """tokenizer.aux_corpus: the task BPE also sees the warm-up's auxiliary rows, so a critique row (prompt and
    target) encodes in far fewer tokens; a worked solution still round-trips. Refused at start-up where there are no
    auxiliary rows to train on, or where the tokenizer is loaded rather than trained."""
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import sft_examples, tokenizer_corpus

    lengths = {}
    for aux in (False, True):
        c = _tiny_cfg(tmp_path / str(aux), aux_critique_share=0.5, aux_verify_share=0.0)
        c.data.source, c.data.train_size, c.sft.examples = "latin_square", 400, 200
        c.tokenizer.aux_corpus, c.tokenizer.vocab_size = aux, 512  # room for the templates' merges
        rc = read_run_config(c)
        task = build_data(rc.data, rc.seed)
        corpus, prompt_fn = tokenizer_corpus(rc, task)
        tok = build_tokenizer(rc, corpus, str(tmp_path / str(aux)), prompt_fn)
        rows, _ = sft_examples(rc, task)
        critiques = [r for r in rows if r.meta.get("format") == "critique"]
        assert len(critiques) == 100 and len(corpus) == len(task.train) + (100 if aux else 0)
        lengths[aux] = np.mean([len(tok.encode(r.question + r.solution)) for r in critiques])
        sol = task.train[0].solution
        assert tok.decode(tok.encode(sol)) == sol
    assert lengths[True] < 0.7 * lengths[False], lengths
    c = _tiny_cfg(tmp_path / "none")
    c.sft.aux_verify_share, c.tokenizer.aux_corpus = 0.0, True
    with pytest.raises(ValueError, match="tokenizer.aux_corpus=True needs auxiliary rows"):
        start(c)
    c = _tiny_cfg(tmp_path / "loaded")
    c.tokenizer.aux_corpus, c.tokenizer.path = True, str(tmp_path)
    with pytest.raises(ValueError, match="tokenizer is loaded"):
        start(c)


# ---------------------------------------------------------------------------------------------------------------
# The other testbed tasks: graph colouring and 4x4 Latin squares (same contract as graph_path)
# ---------------------------------------------------------------------------------------------------------------
from jaxrl_reason.data import graph_colour as gc  # noqa: E402
from jaxrl_reason.data import latin_square as ls  # noqa: E402

# A hand-made colouring instance: a path A-B-C plus the edge A-D.
CQ = "Edges: A B, C B, A D\nColour the nodes A B C D with r g b so that no edge joins one colour."
# A hand-made Latin-square puzzle, its one completion A B C D / C D A B / B A D C / D C B A.
LQ = f"{ls.INSTRUCTION}\nGrid: A x C D, C D x B, x A D C, D C B x"
LSQ = "A B C D C D A B B A D C D C B A".split()


def test_colour_checker_on_hand_made_solutions():
    assert gc.check(CQ, "- A r\n- B g\n- C r\n- D g\n\\boxed{ A r, B g, C r, D g}")
    assert gc.check(CQ, "\\boxed{A r, B g, C b, D b}")
    assert gc.error_kind(CQ, [("A", "r"), ("B", "r"), ("C", "g"), ("D", "g")]) == "conflict"
    assert gc.error_kind(CQ, [("A", "r"), ("B", "g"), ("C", "r")]) == "incomplete"
    assert gc.error_kind(CQ, [("A", "r"), ("B", "g"), ("C", "r"), ("D", "y")]) == "incomplete"  # not a listed colour
    assert gc.error_kind(CQ, None) == "no_answer"
    assert not gc.check(CQ, "- A r\n- B g")
    r = gc.graph_colour_reward(["\\boxed{ A r, B g, C r, D g}", "\\boxed{ A r, B r, C g, D g}"],
                               [gc.Example(CQ, "", "x")] * 2)
    np.testing.assert_array_equal(r.scores, [1.0, 0.0])
    assert r.details[1]["error_kind"] == "conflict"


def test_latin_checker_on_hand_made_solutions():
    assert ls.check(LQ, ls.solution_text(LSQ))
    assert ls.check(LQ, "\\boxed{A B C D, C D A B, B A D C, D C B A}")
    bad = list(LSQ)
    bad[0] = "B"  # a given rewritten
    assert ls.error_kind(LQ, bad) == "given_changed"
    bad = list(LSQ)
    bad[1] = "A"  # the blank of row 0 filled with A, which the row has
    assert ls.error_kind(LQ, bad) == "row_repeat"
    swapped = "A B C D C D A B D A B C B C D A".split()  # rows fine, but the givens of rows 2 and 3 rewritten
    assert ls.error_kind(LQ, swapped) == "given_changed"
    blank = f"{ls.INSTRUCTION}\nGrid: " + ", ".join(["x x x x"] * 4)
    assert ls.error_kind(blank, "A B C D B A D C A B C D D C B A".split()) == "col_repeat"  # rows 0 and 2 equal
    assert ls.error_kind(LQ, None) == "no_answer"
    assert ls.text_error_kind(LQ, "\\boxed{A B C}") == "bad_grid"
    assert not ls.check(LQ, "A B C D C D A B B A D C D C B A")  # no box


@pytest.mark.parametrize("mod,kinds", [(gc, gc.INJECTABLE_KINDS), (ls, ls.INJECTABLE_KINDS)])
def test_other_injectors_write_only_wrong_solutions_of_the_named_kind(mod, kinds):
    rng = np.random.default_rng(0)
    exs = (gc.graph_colour_examples(40, seed=2) if mod is gc else ls.latin_square_examples(40, seed=2))
    for e in exs:
        assert mod.check(e.question, e.solution)
        for kind in kinds:
            if mod is ls and not ls.can_inject(e, kind):
                continue
            wrong = mod.inject_error(e, kind, rng)
            assert mod.error_kind(e.question, wrong) == kind, (e.question, wrong)
            assert not mod.check(e.question, mod.solution_text(wrong))


@pytest.mark.parametrize("mod", [gc, ls])
def test_other_tasks_critiques_parse_and_corrections_pass(mod):
    exs = gc.graph_colour_examples(20, seed=4) if mod is gc else ls.latin_square_examples(20, seed=4)
    rows = mod.auxiliary_rows(exs, verify=20, critique=30, correct=20, seed=1)
    fmts = [r.meta["format"] for r in rows]
    assert (fmts.count("verify"), fmts.count("critique"), fmts.count("correct")) == (20, 30, 20)
    verdicts = []
    for r in rows:
        if r.meta["format"] == "critique":
            c = parse_critique(r.solution)
            assert c.format_errors == (), (r.solution, c.format_errors)
            solution = r.question.split("Solution:\n")[1].split("\n\nReply with")[0]
            question = r.question.split("Problem:\n")[1].split("\n\nSolution:")[0]
            assert c.error_found is (not mod.check(question, solution))
            verdicts.append(c.error_found)
            if c.error_found:
                assert c.quote in solution
            # The hint never names a symbol or a colour of the answer.
            assert not re.search(r"\b[A-Za-z]\b", c.hint.replace(" a ", " ")), c.hint
        elif r.meta["format"] == "correct":
            attempt = r.question.split("earlier attempt at this problem:\n")[1].split("\n\nReview the attempt")[0]
            assert mod.check(r.meta["question"], r.solution) and not mod.check(r.meta["question"], attempt)
        else:
            q = r.question.split("Problem:\n")[1].split("\n\nSolution:")[0]
            s = r.question.split("Solution:\n")[1].split("\n\nIs this solution")[0]
            assert (r.solution == VERIFY_YES) == mod.check(q, s)
    assert 0 < sum(verdicts) < len(verdicts)


@pytest.mark.parametrize("mod", [gp, gc, ls])
def test_guided_rows_pose_a_wrong_attempts_hint_and_target_the_worked_solution(mod):
    """auxiliary_rows(guided=n): CURE's guided re-solve on the task's own problems -- the problem and the hint of
    the critique of an injected wrong attempt (never the attempt), the worked solution as the target."""
    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.prompts import guided_prompt

    exs = {gp: lambda: gp.graph_path_examples(20, seed=4), gc: lambda: gc.graph_colour_examples(20, seed=4),
           ls: lambda: ls.latin_square_examples(20, seed=4)}[mod]()
    rows = mod.auxiliary_rows(exs, verify=0, critique=0, correct=0, guided=25, seed=1)
    assert [r.meta["format"] for r in rows] == ["guided"] * 25
    critiques = mod.auxiliary_rows(exs, verify=0, critique=40, correct=0, seed=1)
    task_hints = {parse_critique(r.solution).hint for r in critiques if parse_critique(r.solution).error_found}
    strategy = {testbed.critique_hint(mod.TASK, e.question, mod.TASK.parse(e.solution), None) for e in exs}
    for r in rows:
        q = r.meta["question"]
        hint = r.question.split("Guidance for solving this problem:\n")[1].split("\n\nWrite a new")[0]
        assert r.question == guided_prompt(q, hint)
        assert hint in task_hints and hint not in strategy  # the hint of an error, as a critique would write it
        assert mod.check(q, r.solution) and r.solution == next(e.solution for e in exs if e.question == q)
        assert "boxed" not in hint and not re.search(r"\b[A-Za-z]\b", hint.replace(" a ", " ")), hint


@pytest.mark.parametrize("source", ["graph_colour", "latin_square"])
def test_other_sources_build_through_the_config(tmp_path, source):
    from jaxrl_reason.configs.testbed_latin import get_config
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.warmup import sft_examples

    c = get_config()
    c.data.source = source
    c.data.train_size, c.data.heldout_size = 200, 16
    c.sft.examples, c.sft.aux_verify_share, c.sft.aux_critique_share = 40, 0.5, 0.25
    rc = read_run_config(c)
    task = build_data(rc.data, rc.seed)
    assert len(task.heldout) == 16 and not {e.question for e in task.heldout} & {e.question for e in task.train}
    np.testing.assert_array_equal(task.reward_fn([e.solution for e in task.heldout], task.heldout).scores, 1.0)
    rows, _ = sft_examples(rc, task)
    fmts = [r.meta.get("format", "solve") for r in rows]
    assert (fmts.count("solve"), fmts.count("verify"), fmts.count("critique")) == (40, 20, 10)


def test_latin_blanks_knob_and_the_cure_preset():
    from jaxrl_reason.configs.testbed_latin_cure import get_config
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.warmup import own_attempt_formats
    from jaxrl_reason.methods import make_method

    c = get_config()
    c.data.train_size, c.data.heldout_size = 40, 8
    for blanks in (4, 10):
        c.data.latin_blanks = blanks
        task = build_data(read_run_config(c).data, 0)
        grid = task.train[0].question.split("Grid: ")[1].split("\n")[0]
        assert grid.split().count("x") + grid.split().count("x,") == blanks
    rc = read_run_config(c)
    assert rc.sft.own_attempt_steps > 0 and own_attempt_formats(rc) == {"critique": True, "correct": False,
                                                                         "guided": True}
    assert rc.tokenizer.aux_corpus and rc.sft.aux_critique_share > 0  # the BPE learns the critique words
    assert rc.sft.aux_guided_share > 0  # the guided prompt is trained in the SFT itself
    method = make_method(rc.method)
    assert type(method).__name__ == "CURE" and rc.data.guided_layout == "first"


def test_latin_deduction_lines_each_settle_one_blank_from_the_row_and_column_they_copy():
    """data.latin_solution="deduction": the same questions as the grid form, each worked solution a line per blank
    whose copied row and column (as the earlier lines left them) leave exactly the symbol it writes, that symbol
    the square's, then the boxed grid the checker accepts."""
    grid_ex = ls.latin_square_examples(30, seed=3)
    ded_ex = ls.latin_square_examples(30, seed=3, config=ls.LatinConfig(solution="deduction"))
    line_re = re.compile(r"^Cell (\d) (\d): ((?:[A-Dx] ){3}[A-Dx]) \| ((?:[A-Dx] ){3}[A-Dx]) -> ([A-D])$")
    for g, e in zip(grid_ex, ded_ex):
        assert g.question == e.question and g.solution != e.solution
        *lines, box = e.solution.split("\n")
        assert box == g.solution and ls.check(e.question, e.solution)
        cells = list(e.meta["puzzle"])
        assert len(lines) == cells.count(ls.BLANK)
        for line in lines:
            r, k, row, col, symbol = line_re.match(line).groups()
            r, k = int(r) - 1, int(k) - 1
            assert row.split() == cells[r * 4:(r + 1) * 4] and col.split() == cells[k::4]
            assert cells[r * 4 + k] == ls.BLANK and set("ABCD") - set(row.split()) - set(col.split()) == {symbol}
            assert symbol == e.meta["square"][r * 4 + k]
            cells[r * 4 + k] = symbol
        assert cells == e.meta["square"]
    with pytest.raises(ValueError, match="no blank its row and column settle alone"):
        ls.deduction_text(["x"] * 16, ls.all_squares()[0])  # an empty grid has no single
    with pytest.raises(ValueError, match="solution='boxes' is unknown"):
        ls.LatinConfig(solution="boxes")


def _refused_before_the_warmup(c, tmp_path, match):
    """`run(c)` fails with `match` before any SFT; returns (run config, task data, tokenizer) of the same config."""
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import run, start

    with pytest.raises(ValueError, match=match):
        run(c)
    assert not (tmp_path / "sft_model").exists()
    rc, _ = start(c)
    task = build_data(rc.data, rc.seed)
    return rc, task, build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)


def test_latin_deduction_runs_refuse_bare_grid_aux_rows_and_a_budget_that_cuts_the_solution(tmp_path):
    from jaxrl_reason.experiment.pipeline import check_solution_budget, start

    c = _tiny_cfg(tmp_path, aux_verify_share=0.0)
    c.data.source, c.data.latin_solution = "latin_square", "deductions"
    with pytest.raises(ValueError, match="data.latin_solution='deductions' is unknown"):
        start(c)  # a misspelt value fails at start-up, before the data are built
    c.data.latin_solution = "deduction"
    c.sft.aux_correct_share = 0.25
    with pytest.raises(ValueError, match="latin_solution='deduction' set the shares to 0"):
        start(c)
    c.sft.aux_correct_share = 0.0
    c.rl.max_new_tokens = 32  # the grid fits, the deduction lines before it do not
    _, task, tok = _refused_before_the_warmup(c, tmp_path, "rl.max_new_tokens=32 is shorter than a latin_square "
                                                           "worked solution")
    need = max(len(tok.encode(e.solution)) for e in task.train[:64])
    c.rl.max_new_tokens = need
    check_solution_budget(start(c)[0], tok, task)  # the longest one fits exactly


def test_a_cure_run_whose_critique_budget_cannot_hold_the_tasks_critiques_is_refused_before_training(tmp_path):
    """Under a task-text BPE a latin_square critique is ~180 tokens; a budget under that would cut every long
    critique before its hint (the first CURE testbed preset's 96 did)."""
    from jaxrl_reason.data import testbed
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.methods import method_knobs

    c = _tiny_cfg(tmp_path)
    c.data.source, c.method.name, c.method.extra = "latin_square", "cure", method_knobs("cure")
    c.method.extra.critique_max_new_tokens = 16
    _, task, tok = _refused_before_the_warmup(c, tmp_path, "critique_max_new_tokens=16 is shorter than a "
                                                           "latin_square critique")
    need = testbed.longest_critique(testbed.task_of("latin_square"), task.train[:32], lambda t: len(tok.encode(t)))
    assert need > 16
    c.method.extra.critique_max_new_tokens = need
    rc, method = start(c)
    method.check(rc, task, tok)  # the whole critique fits, verdict line included


# ---------------------------------------------------------------------------------------------------------------
# The worked check (data.verify_format="worked_check")
# ---------------------------------------------------------------------------------------------------------------
def test_latin_worked_check_marks_the_line_that_breaks_and_its_verdict_is_the_checker():
    assert ls.check_text(LQ, LSQ) == ("Row 1: A x C D | A B C D ok\nRow 2: C D x B | C D A B ok\n"
                                      "Row 3: x A D C | B A D C ok\nRow 4: D C B x | D C B A ok\n"
                                      "Col 1: A C B D ok\nCol 2: B D A C ok\nCol 3: C A D B ok\nCol 4: D B C A ok")
    changed = list(LSQ)
    changed[0] = "B"  # a given rewritten: row 1 says changed (not repeat), column 1 now repeats B
    lines = ls.check_text(LQ, changed).split("\n")
    assert lines[0] == "Row 1: A x C D | B B C D changed" and lines[4] == "Col 1: B C B D repeat"
    assert [ln.rsplit(" ", 1)[1] for ln in lines] == ["changed"] + ["ok"] * 3 + ["repeat"] + ["ok"] * 3
    blank = f"{ls.INSTRUCTION}\nGrid: " + ", ".join(["x x x x"] * 4)
    marks = [ln.rsplit(" ", 1)[1] for ln in ls.check_text(blank, "A B C D B A D C A B C D D C B A".split()).split("\n")]
    assert marks == ["ok"] * 4 + ["repeat"] * 4  # rows 1 and 3 equal: every row fine, every column repeats
    marks = [ln.rsplit(" ", 1)[1] for ln in ls.check_text(blank, "A A C D B B D C C D A B D C B A".split()).split("\n")]
    assert marks[:2] == ["repeat", "repeat"] and marks[2:4] == ["ok", "ok"]
    assert ls.check_text(LQ, None) == ls.check_text(LQ, ["A"] * 3) == ls.NO_GRID_CHECK
    rng = np.random.default_rng(0)
    for e in ls.latin_square_examples(40, seed=3):
        for sol in (e.solution, ls.solution_text(ls._wrong(e, rng)[0])):
            target = ls.verify_target(e.question, sol, "worked_check")
            check, verdict = target.rsplit("\n", 1)
            assert verdict == (VERIFY_YES if ls.check(e.question, sol) else VERIFY_NO)
            assert (verdict == VERIFY_YES) == all(ln.endswith(" ok") for ln in check.split("\n"))
            assert check == ls.check_text(e.question, ls.parse_answer(sol))
    with pytest.raises(ValueError, match="worked check"):
        gp.verify_target(Q, _sol("A F G"), "worked_check")
    with pytest.raises(ValueError, match="verify_format"):
        ls.verify_target(LQ, ls.solution_text(LSQ), "cot")


def test_latin_mark_check_is_the_worked_checks_marks_without_the_copies():
    """verify_format="mark_check": the same lines and marks as the worked check, with nothing copied before the
    mark, and the same verdict."""
    changed = list(LSQ)
    changed[0] = "B"
    assert ls.check_text(LQ, changed, copies=False) == ("Row 1: changed\nRow 2: ok\nRow 3: ok\nRow 4: ok\n"
                                                        "Col 1: repeat\nCol 2: ok\nCol 3: ok\nCol 4: ok")
    assert ls.check_text(LQ, None, copies=False) == ls.NO_GRID_CHECK
    rng = np.random.default_rng(1)
    for e in ls.latin_square_examples(40, seed=4):
        for sol in (e.solution, ls.solution_text(ls._wrong(e, rng)[0])):
            worked, marks = ls.verify_target(e.question, sol, "worked_check"), ls.verify_target(e.question, sol,
                                                                                                 "mark_check")
            assert marks.rsplit("\n", 1)[1] == worked.rsplit("\n", 1)[1]  # the verdict
            assert marks.split("\n")[:-1] == [f"{w.split(':')[0]}: {w.rsplit(' ', 1)[1]}"
                                              for w in worked.split("\n")[:-1]]
    with pytest.raises(ValueError, match="'mark_check' needs a task with a worked check"):
        gp.verify_target(Q, _sol("A F G"), "mark_check")


def test_probe_grades_a_written_check_line_by_line_per_flag_and_mark():
    """probes.grade_check_lines: a right check scores 1 everywhere; a check that copies every cell but calls
    every line ok is right on the copies and the ok marks only; a check cut short counts its missing lines wrong."""
    from jaxrl_reason.experiment.probes import grade_check_lines

    changed = list(LSQ)
    changed[0] = "B"
    true = ls.check_text(LQ, changed)
    g = grade_check_lines([true], [true])
    assert g["line_copied"] == 1.0 and all(v[0] == 1.0 for d in ("flag_right", "mark_right") for v in g[d].values())
    assert g["mark_right"] == {"changed": [1.0, 1], "ok": [1.0, 6], "repeat": [1.0, 1]}
    assert g["flag_right"] == {"symbol": [1.0, 16]}  # the answer's cells after " | " on the four row lines
    blind = "\n".join(ln.rsplit(" ", 1)[0] + " ok" for ln in true.split("\n"))
    g = grade_check_lines([true], [blind + "\nextra line"])
    assert g["line_copied"] == 1.0 and g["mark_right"]["ok"] == [1.0, 6]
    assert g["mark_right"]["changed"] == [0.0, 1] and g["mark_right"]["repeat"] == [0.0, 1]
    g = grade_check_lines([true], ["Row 1: A x C D | B B C D changed"])
    assert g["line_copied"] == 1 / 8 and g["mark_right"]["ok"] == [0.0, 6] and g["mark_right"]["changed"] == [1.0, 1]
    # a copy error told from a decision error: the changed row rewritten as the valid one and marked ok (right for
    # what it wrote), the repeating column copied and marked ok (a decision error)
    autocorrect = true.replace("| B B C D changed", "| A B C D ok").replace("Col 1: B C B D repeat", "Col 1: B C B D ok")
    g = grade_check_lines([true], [autocorrect])
    (c_copied, c_right, c_own, c_n), (r_copied, r_right, r_own, _) = (g["mark_by_copy"][m] for m in ("changed",
                                                                                                  "repeat"))
    assert (c_copied, c_own, c_n) == (0.0, 1.0, 1) and np.isnan(c_right)  # no copied line to judge the mark on
    assert (r_copied, r_right) == (1.0, 0.0) and np.isnan(r_own)
    assert g["mark_by_copy"]["ok"][:2] == [1.0, 1.0]


def test_probe_own_check_rows_are_the_checks_of_the_policys_own_distinct_attempts_balanced():
    """probes.own_check_rows: one row per distinct wrong attempt and as many right ones, each target the
    task's check of that very answer then the checker's verdict."""
    from jaxrl_reason.data.datasets import Example
    from jaxrl_reason.experiment.probes import own_check_rows

    e = Example(LQ, "", "q0", ls.solution_text(LSQ), {"source": "latin_square"})
    changed, repeat = list(LSQ), list(LSQ)
    changed[0] = "B"
    repeat[1] = "A"  # row 1's blank filled with a symbol the row already holds
    right, wrong1, wrong2 = (ls.solution_text(x) for x in (LSQ, changed, repeat))
    texts = [wrong1, right, wrong1, wrong2, right]  # a wrong attempt sampled twice counts once
    rows = own_check_rows("latin_square", [e] * 5, texts, [False, True, False, False, True], seed=0)
    assert len(rows) == 2  # min(2 distinct wrong, 1 distinct right) of each
    verdicts = sorted(r.solution.rsplit("\n", 1)[1] for r in rows)
    assert verdicts == sorted([VERIFY_NO, VERIFY_YES])
    for r in rows:
        text = r.meta["solution"]
        assert r.solution == f"{ls.check_text(LQ, ls.parse_answer(text))}\n{VERIFY_YES if text == right else VERIFY_NO}"
        assert text in r.question and r.meta["attempt"] == "own"


def test_probe_mark_weight_weighs_exactly_the_non_ok_marks_of_check_rows():
    """probes.rare_mark_spans (--mark-weight, --mark-span): on a worked-check row the spans are the
    `changed` / `repeat` words (or those lines' cells and marks) and nothing else (not `ok`, not the verdict); a
    worked-solution row gets none."""
    from jaxrl_reason.data.datasets import Example
    from jaxrl_reason.data.testbed import check_pairs, task_of
    from jaxrl_reason.experiment.probes import rare_mark_spans

    e = Example(LQ, "", "q0", ls.solution_text(LSQ), {"source": "latin_square"})
    changed = list(LSQ)
    changed[0] = "B"
    target = ls.verify_target(LQ, ls.solution_text(changed), "worked_check")
    row = Example("prompt", "", "q0/check", target, {"format": "verify"})
    spans = rare_mark_spans(5.0)(row)
    assert [target[a:b] for a, b, _ in spans] == ["changed", "repeat"] and {w for *_, w in spans} == {5.0}
    lines = [target[a:b] for a, b, _ in rare_mark_spans(5.0, "line")(row)]  # --mark-span line: cells and mark
    assert lines == ["A x C D | B B C D changed", "B C B D repeat"]
    with pytest.raises(ValueError, match="span"):
        rare_mark_spans(5.0, "cells")
    assert rare_mark_spans(5.0)(e) == []
    rare = 0
    for r in check_pairs(task_of("latin_square"), ls.latin_square_examples(6, seed=2), seed=0):
        marks = [ln.rsplit(" ", 1)[1] for ln in r.solution.split("\n")[:-1]]
        assert len(rare_mark_spans(3.0)(r)) == sum(m != "ok" for m in marks)
        rare += len(rare_mark_spans(3.0)(r))
    assert rare >= 6  # every wrong pair breaks at least one line
    marks_only = ls.verify_target(LQ, ls.solution_text(changed), "mark_check")
    row = Example("prompt", "", "q0/check", marks_only, {"format": "verify"})
    for span in ("mark", "line"):  # a mark_check line has nothing but its mark to weigh
        assert [marks_only[a:b] for a, b, _ in rare_mark_spans(5.0, span)(row)] == ["changed", "repeat"]
    pairs = check_pairs(task_of("latin_square"), ls.latin_square_examples(6, seed=2), seed=0,
                        verify_format="mark_check")
    assert all(ln.split(": ")[1] in ("ok", "repeat", "changed") for r in pairs for ln in r.solution.split("\n")[:-1])


def _latin_cfg(tmp_path, **data):
    c = _tiny_cfg(tmp_path)
    c.data.source = "latin_square"
    c.method.name, c.method.extra = "grpo", {}  # the preset is RL^V, whose verify term reads the one-token verdict
    for k, v in data.items():
        setattr(c.data, k, v)
    return c


@pytest.mark.parametrize("fmt", ["worked_check", "mark_check"])
def test_worked_check_verify_rows_end_in_the_verdict_token_and_bad_uses_are_refused(tmp_path, fmt):
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import sft_examples
    from jaxrl_reason.inference.verifier import verdict_ids

    c = _latin_cfg(tmp_path, verify_format=fmt)
    c.sft.aux_verify_share = 0.5
    rc, _ = start(c)
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    yes, no = verdict_ids(tok)
    rows = [r for r in sft_examples(rc, task)[0] if r.meta.get("format") == "verify"]
    assert len(rows) == 20 and {r.solution.rsplit("\n", 1)[1] for r in rows} == {VERIFY_YES, VERIFY_NO}
    for r in rows:
        assert r.solution.startswith("Row 1: ")
        ids = tok.encode(r.solution)  # the verdict is its own token after the line break, the id the scorer reads
        assert ids[-1] == (yes if r.solution.endswith(VERIFY_YES) else no)
        assert tok.decode(ids[:-1]) == r.solution.rsplit("\n", 1)[0] + "\n"
    with pytest.raises(ValueError, match=f"data.verify_format='{fmt}' needs a task"):
        start(_latin_cfg(tmp_path, verify_format=fmt, source="graph_path"))
    with pytest.raises(ValueError, match="data.verify_format='bogus' is unknown"):
        start(_latin_cfg(tmp_path, verify_format="bogus"))
    c = _latin_cfg(tmp_path, verify_format=fmt)
    c.sft.verify_steps = 10
    with pytest.raises(ValueError, match="sft.verify_steps=0"):
        start(c)


def test_rlv_verify_rows_train_the_whole_worked_check_through_the_trainer(tmp_path):
    """With data.verify_format='worked_check' the RL^V verify rows' target is the check then the verdict (every
    token trained, the verdict last), the verifier is measured after the check it writes, and a check that
    disagrees with the reward is refused."""
    from flax import nnx

    from jaxrl_reason.experiment.data import build_data, verify_target_fn
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.inference.verifier import verdict_ids
    from jaxrl_reason.methods.base import Context, Rollouts, RowFormats
    from jaxrl_reason.methods.rlv import RLV
    from jaxrl_reason.rl.batch import TASKS
    from jaxrl_reason.train.trainer import Trainer, TrainerConfig
    from tiny import tiny_model

    c = _latin_cfg(tmp_path, verify_format="worked_check", check_tokens=8)
    c.method.name = "rlv"
    rc, _ = start(c)  # the RL^V preset with a worked check starts
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    vt = verify_target_fn(rc.data)
    assert verify_target_fn(dataclasses.replace(rc.data, verify_format="verdict")) is None
    yes, no = verdict_ids(tok)
    ex = task.train[:2]
    rng = np.random.default_rng(0)
    texts = [ex[0].solution, ls.solution_text(ls._wrong(ex[0], rng)[0]), ex[1].solution,
             ls.solution_text(ls._wrong(ex[1], rng)[0])]
    rewards = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    prompts = [tok.encode(tok.render_prompt(task.prompt_fn(e.question))) for e in ex]
    comps = [tok.encode(t) + [tok.eos_id] for t in texts]
    ro = Rollouts(ex, prompts, comps, [np.full(len(x), -1.0, np.float32) for x in comps], texts, rewards,
                  ["eos"] * 4, [{}] * 4)
    model = tiny_model(tok)
    ctx = Context(tok, None, None, np.random.default_rng(0), tok.pad_id, model, nnx.state(model),
                  formats=RowFormats(verify_target=vt))
    batch, metrics = RLV("grpo").build(ro, ctx)
    v = np.asarray(batch.task_id) == TASKS["verify"]
    mask, tokens = np.asarray(batch.loss_mask)[v], np.asarray(batch.tokens)[v]
    assert v.sum() == 4 and 0.0 <= metrics["verify/balanced_acc"] <= 1.0
    want = sorted(len(tok.encode(vt(ex[i // 2].question, t))) for i, t in enumerate(texts))
    assert sorted(mask.sum(-1).astype(int).tolist()) == want and min(want) > 50  # the whole check is trained
    verdicts = sorted(int(t[np.nonzero(m)[0]][-1]) for t, m in zip(tokens, mask))
    assert verdicts == sorted([yes, yes, no, no])
    lying = Context(tok, None, None, np.random.default_rng(0), tok.pad_id, model, nnx.state(model),
                    formats=RowFormats(verify_target=lambda q, s: vt(q, ex[0].solution)))  # the right grid's: "Yes"
    with pytest.raises(ValueError, match="check and its reward disagree"):
        RLV("grpo").build(ro, lying)

    def reward(texts, examples):
        from jaxrl_reason.rewards.base import RewardResult

        return RewardResult(np.array([i % 2 for i in range(len(texts))], np.float32), [{}] * len(texts))

    wrong_always = lambda q, s: vt(q, "no grid")  # noqa: E731  reward-independent check ending in "No" ...
    cfg = TrainerConfig(steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=8, lr=1e-3,
                        checkpoint_every=0, progress=False)
    # ... so a reward that marks half the samples right must be refused inside the trainer too
    tr = Trainer(tiny_model(tok), tok, RLV("grpo"), task.train, reward, cfg, str(tmp_path / "bad"),
                 prompt_fn=task.prompt_fn, formats=RowFormats(verify_target=wrong_always))
    with pytest.raises(ValueError, match="disagree"):
        tr.run()
    tr.close()


# The worked-check warm-up (sft.check_steps, train/check_warmup.py)

def test_check_pairs_are_a_right_and_a_wrong_solution_per_question_each_target_the_checkers_check():
    from jaxrl_reason.data.testbed import check_pairs, task_of

    examples = ls.latin_square_examples(8, seed=3)
    rows = check_pairs(task_of("latin_square"), examples, seed=0)
    assert [r.id for r in rows] == [f"{e.id}/check_{t}" for e in examples for t in ("right", "wrong")]
    for r in rows:
        question, sol = r.meta["question"], r.meta["solution"]
        assert r.question == verify_prompt(question, sol)
        assert r.solution == ls.verify_target(question, sol, "worked_check")
        assert r.solution.endswith(VERIFY_YES if r.id.endswith("right") else VERIFY_NO)
        assert ls.check(question, sol) == r.id.endswith("right")  # the verdict is the checker's
    assert rows == check_pairs(task_of("latin_square"), examples, seed=0)  # deterministic under its seed
    with pytest.raises(ValueError, match="verify_format='verdict' writes no check"):
        check_pairs(task_of("latin_square"), examples, seed=0, verify_format="verdict")


def _worked_check_rows(kind: str, aux: dict, own: dict):
    """(contrast pairs, auxiliary rows, own-attempt rows) of `kind` (critique | correction) in the worked-check
    format, from 8 Latin squares; the own attempts are the verify pairs' right and wrong solutions."""
    from jaxrl_reason.data import testbed

    task = testbed.task_of("latin_square")
    examples = ls.latin_square_examples(8, seed=3)
    fmt = {f"{kind}_format": "worked_check"}
    pairs = testbed.check_pairs(task, examples, seed=0, rows_as=kind)
    # the same wrong answers as the verify pairs: one rng draw per question either way
    verify = testbed.check_pairs(task, examples, seed=0)
    assert [r.meta["solution"] for r in pairs] == [r.meta["solution"] for r in verify]
    attempts = [(e, r.meta["solution"]) for e, r in zip([e for e in examples for _ in (0, 1)], verify)]
    return (pairs, testbed.auxiliary_rows(task, examples, seed=0, **{"verify": 0, "critique": 0, "correct": 0, **aux},
                                          **fmt),
            testbed.own_attempt_rows(task, attempts, seed=0, **{"critique": False, "correct": False, **own}, **fmt))


def test_worked_check_critiques_open_with_the_checkers_check_then_parse_with_every_field():
    """data.critique_format='worked_check': contrast pairs, auxiliary rows and own-attempt rows pose the critique
    prompt that asks for the check first; the target is the task's check of the answer, then the four fields,
    whose verdict is the checker's -- and each parses with every field."""
    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.prompts import critique_prompt

    task = testbed.task_of("latin_square")
    pairs, aux, own = _worked_check_rows("critique", {"critique": 6}, {"critique": True})
    assert len(pairs) == 16 and len(aux) == 6 and len(own) == 16
    for r in pairs + aux + own:
        sol = r.question.split("Solution:\n")[1].split("\n\nFirst check the solution")[0]
        q = r.question.split("Problem:\n")[1].split("\n\nSolution:\n")[0]
        assert r.question == critique_prompt(q, sol, "worked_check")
        check = ls.check_text(q, ls.TASK.parse(sol))
        assert r.solution.startswith(check + "\nERROR_FOUND: ")
        c = parse_critique(r.solution)
        assert c.error_found == (not ls.check(q, sol)) and not c.format_errors, (r.solution, c)
        assert r.solution.endswith(task.critique_text(q, ls.TASK.parse(sol), ls.text_error_kind(q, sol)))
    assert {r.meta["right"] for r in pairs} == {True, False}
    with pytest.raises(ValueError, match="rows_as='both' is unknown"):
        testbed.check_pairs(task, ls.latin_square_examples(2, seed=3), seed=0, rows_as="both")
    with pytest.raises(ValueError, match="needs a task with a worked check"):
        testbed.critique_target(testbed.task_of("graph_path"), "q", None, None, "worked_check")


def test_worked_check_corrections_open_with_the_check_of_the_attempt_then_its_solution():
    """data.correction_format='worked_check': contrast pairs, auxiliary rows and own-attempt rows pose the
    correction prompt that asks for the check first; the target is the task's check of the attempt under review,
    then the worked solution (a kept right attempt: the attempt itself), and that solution passes the checker."""
    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.prompts import correction_prompt

    pairs, aux, own = _worked_check_rows("correction", {"correct": 4}, {"correct": True, "keep_share": 1.0})
    assert len(pairs) == 16 and len(aux) == 4 and len(own) == 16
    for r in pairs + aux + own:
        q = r.question.split("\n\nHere is an earlier attempt")[0]
        attempt = r.question.split("earlier attempt at this problem:\n")[1].split("\n\nReview")[0]
        assert r.question == correction_prompt(q, attempt, "worked_check")
        check_lines, solution = r.solution.rsplit("\n", 1)
        assert check_lines == ls.check_text(q, ls.TASK.parse(attempt)) and ls.check(q, solution)
    with pytest.raises(ValueError, match="correction_format='worked_check' needs a task with a worked check"):
        testbed.correction_target(testbed.task_of("graph_path"), "q", None, "s", "worked_check")


def _check_cfg(tmp_path, **sft):
    knobs = dict(aux_verify_share=0.0, verify_steps=0, check_steps=60, check_questions=20, check_batch_size=8,
                 check_lr=3e-3)
    c = _tiny_cfg(tmp_path, **{**knobs, **sft})
    c.data.source, c.data.verify_format, c.data.check_tokens = "latin_square", "worked_check", 16
    return c


@pytest.mark.slow  # 153 s a call on 2 shared cores (2026-12-07)
def test_check_warmup_runs_after_the_sft_trains_the_check_and_keeps_the_sft_alone(tmp_path):
    """The stage trains on the pairs of the questions it does not hold out (2 rows each, one worked solution per
    row), its check NLL falls, the held-out verifier is measured before and after, and the SFT alone is kept
    beside the warmed-up model (a plain baseline starts from it)."""
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import SFT_ONLY, WARMUP_CHECKPOINTS, warmed_up_policy

    rc, _ = start(_check_cfg(tmp_path))
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    _, report = warmed_up_policy(rc, tok, task, str(tmp_path))
    r = report["check_warmup"]
    assert (r["rows"], r["heldout_rows"], r["solve_rows"], r["extra_rows"]) == (36, 4, 36, 0)  # 2 of 20 held out
    assert r["last_nll"] < 0.5 * r["first_nll"]
    for k in ("before", "after"):
        assert r[k]["rows"] == 4 and 0.0 <= r[k]["balanced_acc"] <= 1.0
    assert (tmp_path / "logs_check_warmup").is_dir()
    read = lambda p: open(p, "rb").read()  # noqa: E731
    assert read(tmp_path / SFT_ONLY / "config.json") == read(tmp_path / "sft_model" / "config.json")
    warmed = read(tmp_path / "sft_model" / "model.safetensors")
    assert read(tmp_path / SFT_ONLY / "model.safetensors") != warmed
    # A run stopped during the stages after the SFT starts them again from the SFT alone, to the same model.
    shutil.rmtree(tmp_path / "sft_model")
    _, again = warmed_up_policy(rc, tok, task, str(tmp_path))
    assert "sft_seconds" not in again and again["sft_resumed_from"] == str(tmp_path / SFT_ONLY)
    assert again["check_warmup"]["rows"] == 36 and read(tmp_path / "sft_model" / "model.safetensors") == warmed
    assert not (tmp_path / WARMUP_CHECKPOINTS).exists()  # removed once sft_model is saved


@pytest.mark.slow  # 234 s a call on 2 shared cores (2026-12-07)
def test_check_warmup_stopped_midway_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    """sft.checkpoint_every: a run cut 30 steps into the 60-step stage (saves every 20) resumes at step 20 and
    ends at the model an uninterrupted run reaches; with 45 steps left it could not get there from the start."""
    import jaxrl_reason.train.check_warmup as cw
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import WARMUP_CHECKPOINTS, warmed_up_policy

    read = lambda p: open(p, "rb").read()  # noqa: E731
    models = {}
    for name in ("straight", "cut"):
        d = tmp_path / name
        rc, _ = start(_check_cfg(d, checkpoint_every=20))
        task = build_data(rc.data, rc.seed)
        tok = build_tokenizer(rc, task.train, str(d), task.prompt_fn)
        if name == "cut":
            sft_train = cw.sft_train

            class Stopped(Exception):
                pass

            def cut_at(after, stop=True):
                def run(*a, **kw):
                    sft_train(*a, **{**kw, "stop_after": after})
                    if stop:
                        raise Stopped
                    return sft_train(*a, **{**kw, "stop_after": 0})  # the history, nothing trained
                return run

            monkeypatch.setattr(cw, "sft_train", cut_at(30))
            with pytest.raises(Stopped):
                warmed_up_policy(rc, tok, task, str(d))
            assert sorted(os.listdir(d / WARMUP_CHECKPOINTS)) == ["check_warmup", "sft"]
            monkeypatch.setattr(cw, "sft_train", cut_at(45, stop=False))
        _, report = warmed_up_policy(rc, tok, task, str(d))
        models[name] = read(d / "sft_model" / "model.safetensors")
        assert not (d / WARMUP_CHECKPOINTS).exists()
    assert models["cut"] == models["straight"]


@pytest.mark.slow  # over 185 s (stopped at the cap) a call on 2 shared cores (2026-12-07)
def test_check_warmup_trains_more_rounds_until_its_held_out_target(tmp_path):
    """sft.check_target: below the target after a round of check_steps, another round follows (its own
    checkpoints and log steps), up to sft.check_rounds; a target met after the first round stops there."""
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import warmed_up_policy

    seen = {}
    for target in (0.99, 0.01):
        d = tmp_path / str(target)
        rc, _ = start(_check_cfg(d, check_steps=20, check_target=target, check_rounds=2))
        task = build_data(rc.data, rc.seed)
        tok = build_tokenizer(rc, task.train, str(d), task.prompt_fn)
        _, report = warmed_up_policy(rc, tok, task, str(d))
        r = report["check_warmup"]
        seen[target] = (r["rounds"], len(r["after_rounds"]), r["after_rounds"][-1] == r["after"]["balanced_acc"])
        logged = [json.loads(x) for x in open(d / "logs_check_warmup" / "metrics.jsonl")]
        steps = [x["step"] for x in logged if "sft/nll" in x]
        assert steps == list(range(1, 20 * r["rounds"] + 1))  # one series over the rounds
        held = [(x["step"], x["check_warmup/heldout_balanced_acc"]) for x in logged if "sft/nll" not in x]
        assert held == [(20 * (i + 1), a) for i, a in enumerate(r["after_rounds"])]  # each round's, as it ends
    assert seen == {0.99: (2, 2, True), 0.01: (1, 1, True)}


@pytest.mark.parametrize("change, data, match", [
    ({}, {"verify_format": "verdict"}, "sft.check_steps > 0 teaches a written check"),
    ({"check_questions": 41}, {}, "check_questions=41 must be in"),
    ({"check_questions": 1}, {}, "check_questions=1 must be in"),
    ({"steps": 0}, {}, "needs the SFT warm-up"),
    ({"check_steps": -1}, {}, "check_steps=-1 must be >= 0"),
    ({"checkpoint_every": -1}, {}, "checkpoint_every=-1 must be >= 0"),
    ({"check_target": 1.0}, {}, "check_target=1.0 must be in"),
    ({"check_target": 0.9, "check_rounds": 0}, {}, "check_rounds=0 must be >= 1"),
    ({"check_batch_size": 0}, {}, "check_batch_size=0"),
    ({"check_solve_share": -1.0}, {}, "check_solve_share=-1.0"),
    ({"check_rows": "verdict"}, {}, "check_rows='verdict' is unknown"),
    ({"check_rows": "critique"}, {}, "check_rows='critique' teaches critiques that open with the check"),
    ({}, {"critique_format": "checked"}, "critique_format='checked' is unknown"),
    ({}, {"correction_format": "checked"}, "correction_format='checked' is unknown"),
    ({"check_rows": "correction"}, {}, "check_rows='correction' teaches corrections that open with the check"),
    ({"check_steps": 0}, {"correction_format": "worked_check", "source": "graph_path", "verify_format": "verdict"},
     "correction_format='worked_check' needs a task"),
    ({"check_steps": 0}, {"critique_format": "worked_check", "source": "graph_path", "verify_format": "verdict"},
     "critique_format='worked_check' needs a task"),
])
def test_check_warmup_is_refused_at_start_up_when_it_cannot_run(tmp_path, change, data, match):
    from jaxrl_reason.experiment.pipeline import start

    c = _check_cfg(tmp_path, **change)
    for k, v in data.items():
        setattr(c.data, k, v)
    with pytest.raises(ValueError, match=match):
        start(c)


@pytest.mark.parametrize("rows_as", ["critique", "correction"])
def test_check_warmup_of_critiques_trains_the_check_under_the_critique_prompt(tmp_path, rows_as):
    """sft.check_rows='critique' (data.critique_format='worked_check'): the same pairs as critiques that open with
    the check; held-out accuracy is read from the verdict the greedy critique writes after its check. 'correction'
    (data.correction_format='worked_check'): corrections that open with the check of the attempt, held-out accuracy
    the right attempts kept and the wrong ones corrected. With sft.pack the SFT and the stage train on packed
    rows. Critiques take CURE's guided re-solves along (sft.check_guided_share), which the stage would erase."""
    from jaxrl_reason.experiment.data import build_data, critique_check_fn
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import warmed_up_policy

    c = _check_cfg(tmp_path, check_rows=rows_as, check_steps=30, pack=True,
                   check_guided_share=0.5 if rows_as == "critique" else 0.0)
    c.data.verify_format = "verdict"
    setattr(c.data, f"{rows_as}_format", "worked_check")
    rc, _ = start(c)
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    _, report = warmed_up_policy(rc, tok, task, str(tmp_path))
    r = report["check_warmup"]
    guided = 10 if rows_as == "critique" else 0  # 0.5 x 20 questions
    solves = min(36 + guided, rc.sft.examples)  # one worked solution per row, as many as the SFT slice holds
    assert (r["rows"], r["heldout_rows"], r["extra_rows"], r["solve_rows"]) == (36, 4, guided, solves)
    assert r["last_nll"] < r["first_nll"]
    for k in ("before", "after"):
        assert r[k]["rows"] == 4 and 0.0 <= r[k]["balanced_acc"] <= 1.0
        assert rows_as == "correction" or 0.0 <= r[k]["parsed"] <= 1.0
    if rows_as == "critique":  # the trainer's forced start of a critique is the same check
        e = task.train[0]
        check = ls.check_text(e.question, ls.TASK.parse(e.solution))
        assert critique_check_fn(rc.data)(e.question, e.solution) == check
        assert critique_check_fn(dataclasses.replace(rc.data, critique_format="fields")) is None


def test_check_guided_rows_are_guided_re_solves_of_the_stage_s_training_questions(tmp_path):
    """sft.check_guided_share: share x check_questions guided re-solves (the hint before the problem in the run's
    layout, the worked solution the target), none of a held-out question; refused unless the rows are critiques."""
    from jaxrl_reason.data.prompts import guided_prompt
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import check_guided_rows
    from jaxrl_reason.train.check_warmup import heldout_questions

    c = _check_cfg(tmp_path, check_rows="critique", check_guided_share=0.5)
    c.data.verify_format, c.data.critique_format = "verdict", "worked_check"
    rc, _ = start(c)
    task = build_data(rc.data, rc.seed)
    rows = check_guided_rows(rc, task)
    held = {e.question for e in task.train[:heldout_questions(20)]}
    train = {e.question: e for e in task.train[heldout_questions(20):20]}
    assert len(rows) == 10 and all(r.meta["format"] == "guided" for r in rows)
    for r in rows:
        q = r.meta["question"]
        assert q in train and q not in held and r.solution == train[q].solution
        head, tail = guided_prompt(q, "\0", rc.data.guided_layout).split("\0")  # the prompt around its hint
        assert r.question.startswith(head) and r.question.endswith(tail)
        assert len(r.question) > len(head) + len(tail) + 20  # a hint of words, not an empty one
    assert check_guided_rows(dataclasses.replace(rc, sft=dataclasses.replace(rc.sft, check_guided_share=0.0)),
                             task) == []
    c.sft.check_rows, c.data.correction_format = "correction", "worked_check"
    with pytest.raises(ValueError, match="check_guided_share"):
        start(c)


def test_the_worked_check_preset_starts_with_its_stage():
    from jaxrl_reason.configs.testbed_latin_check import get_config
    from jaxrl_reason.experiment.pipeline import start

    rc, method = start(get_config())
    assert (rc.data.verify_format, rc.sft.verify_steps, rc.sft.check_steps) == ("worked_check", 0, 1500)
    assert rc.sft.check_questions <= rc.sft.examples and type(method).__name__ == "RLV"


def test_the_worked_check_cure_preset_starts_with_its_critique_check_stage():
    from jaxrl_reason.configs.testbed_latin_cure_check import get_config
    from jaxrl_reason.experiment.pipeline import start

    rc, method = start(get_config())
    assert (rc.data.critique_format, rc.sft.check_rows, rc.sft.check_steps) == ("worked_check", "critique", 1500)
    assert rc.data.verify_format == "verdict" and rc.model.hidden_size == 256 and rc.sft.pack
    assert rc.sft.check_guided_share == 2.0  # the stage keeps the guided re-solve alive
    assert type(method).__name__ == "CURE" and rc.data.guided_layout == "after"  # the 4 x 256 width reads it


@pytest.mark.slow
def test_cure_with_the_worked_check_trains_end_to_end(tmp_path):
    """The CURE worked-check preset, shrunk (no own-attempt stage): SFT with checked critique rows, the critique
    check stage (packed),
    then CURE steps whose forced critique start is the check and the verdict (more trained critique tokens than
    the generated rest alone)."""
    from jaxrl_reason.configs.testbed_latin_cure_check import get_config
    from jaxrl_reason.experiment.pipeline import run

    c = get_config()
    c.workdir = str(tmp_path)
    c.data.train_size, c.data.heldout_size = 300, 8
    c.model.hidden_size, c.model.num_hidden_layers, c.model.intermediate_size = 32, 2, 64
    c.sft.steps, c.sft.examples, c.sft.batch_size = 10, 100, 8
    c.sft.check_steps, c.sft.check_questions, c.sft.check_batch_size = 4, 20, 8
    c.sft.own_attempt_steps = 0  # a 10-step policy writes no grid to critique
    c.rl.steps, c.rl.prompts_per_step, c.rl.progress = 2, 2, False
    c.method.extra.critique_batch_size = 4
    results = run(c)
    assert results["check_warmup"]["after"]["rows"] == 4 and "after" in results
    from jaxrl_reason.tokenization import Tokenizer

    tok = Tokenizer.from_pretrained(os.path.join(c.workdir, "final"))
    shortest_head = len(tok.encode(f"{ls.NO_GRID_CHECK}\nERROR_FOUND: true\n"))
    rows = [json.loads(x) for x in open(os.path.join(c.workdir, "logs", "metrics.jsonl"))]
    rows = [r for r in rows if "loss/total" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        # a 10-step policy is never right: only the wrong half of the batch of 4 has candidates
        n = r["critique/rows"]
        assert np.isfinite(r["loss/total"]) and n in (2, 4) and np.isfinite(r["loss/critique"])
        # every critique row trains its forced check (the shortest: an unreadable grid's) and verdict beside its
        # generated rest
        assert r["critique/tokens"] >= n * (r["critique/length_mean"] + shortest_head)


def test_the_worked_check_cipo_preset_starts_and_refuses_a_correction_budget_that_cuts_the_check(tmp_path):
    from jaxrl_reason.configs.testbed_latin_cipo_check import get_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.methods import make_method

    c = get_config()
    c.data.train_size, c.data.heldout_size = 200, 8
    rc, method = start(c)
    assert (rc.data.correction_format, rc.sft.check_rows, rc.sft.check_steps) == ("worked_check", "correction", 1500)
    assert type(method).__name__ == "CIPO" and rc.sft.pack and rc.model.hidden_size == 256
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    method.check(rc, task, tok)  # 192 tokens hold a check and a grid
    short = make_method(dataclasses.replace(rc.method, extra={**dict(rc.method.extra),
                                                               "correction_max_new_tokens": 0}))
    with pytest.raises(ValueError, match="correction_max_new_tokens=32 .* is shorter than a latin_square correction"):
        short.check(rc, task, tok)


def test_spread_injector_writes_wrong_grids_shaped_like_the_policys_own():
    """inject_extent="spread": always wrong, its kind the first violated constraint, off the gold grid in several
    blanks (the measured median was 5 of 10) with a given rewritten in about 40% -- where the minimal injector is
    off in one or two positions."""
    from jaxrl_reason.data import testbed

    rng = np.random.default_rng(0)
    exs = ls.latin_square_examples(300, seed=5, config=ls.LatinConfig(blanks=10))
    off, givens, minimal = [], [], []
    for e in exs:
        wrong, kind = testbed.injected_wrong(ls.TASK, e, rng, "spread")
        assert kind == ls.error_kind(e.question, wrong) is not None
        assert not ls.check(e.question, ls.solution_text(wrong))
        gold, puzzle = e.meta["square"], e.meta["puzzle"]
        off.append(sum(p == ls.BLANK and g != w for p, g, w in zip(puzzle, gold, wrong)))
        givens.append(any(p != ls.BLANK and p != w for p, w in zip(puzzle, wrong)))
        m, _ = testbed.injected_wrong(ls.TASK, e, rng)
        minimal.append(sum(g != w for g, w in zip(gold, m)))
    assert 4 <= np.median(off) <= 6 and max(off) >= 8
    assert 0.3 <= np.mean(givens) <= 0.5
    assert max(minimal) <= 2
    with pytest.raises(ValueError, match="no spread injector"):
        testbed.injected_wrong(gp.TASK, gp.graph_path_examples(1, seed=0)[0], rng, "spread")
    with pytest.raises(ValueError, match="unknown"):
        testbed.injected_wrong(ls.TASK, exs[0], rng, "wide")


def test_inject_extent_knob_reaches_the_warmup_rows_and_is_checked(tmp_path):
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import sft_examples

    c = _tiny_cfg(tmp_path, aux_correct_share=0.5)
    c.data.source, c.data.latin_blanks = "latin_square", 10
    spread = {}
    for extent in ("minimal", "spread"):
        c.data.inject_extent = extent
        rc = read_run_config(c)
        task = build_data(rc.data, rc.seed)
        rows = [r for r in sft_examples(rc, task)[0] if r.meta.get("format") == "correct"]
        assert len(rows) == 20
        # the attempt is the first box of the prompt (its instruction ends in an empty one)
        attempts = [ls.parse_answer(r.question.split("attempt at this problem:")[1].split("Review")[0]) for r in rows]
        spread[extent] = np.median([sum(g != a for g, a in zip(ls.parse_answer(r.solution), att))
                                    for r, att in zip(rows, attempts)])
        assert all(ls.error_kind(r.meta["question"], a) is not None for r, a in zip(rows, attempts))
    assert spread["minimal"] <= 2 < 4 <= spread["spread"]
    c.data.inject_extent = "wide"
    with pytest.raises(ValueError, match="data.inject_extent='wide' is unknown"):
        start(c)
    c.data.source, c.data.inject_extent = "graph_path", "spread"
    with pytest.raises(ValueError, match="has no spread injector"):
        start(c)


# ---------------------------------------------------------------------------------------------------------------
# Rows from the policy's own attempts (sft.own_attempt_steps)
# ---------------------------------------------------------------------------------------------------------------
def _own_attempts():
    """Hand-made attempts at three Latin-square questions: right, wrong of each critiqued kind, unreadable, and a
    repeat of one wrong attempt."""
    from jaxrl_reason.data import testbed

    rng = np.random.default_rng(3)
    exs = ls.latin_square_examples(3, seed=7, config=ls.LatinConfig(blanks=10))
    attempts = []
    for e in exs:
        attempts.append((e, ls.solution_text(e.meta["square"])))
        attempts.append((e, ls.solution_text(testbed.injected_wrong(ls.TASK, e, rng, "spread")[0])))
    attempts += [(exs[0], "I do not know."), attempts[1]]
    return exs, attempts


def test_own_attempt_rows_quote_the_attempt_verbatim_and_teach_the_fix():
    from jaxrl_reason.data import testbed

    exs, attempts = _own_attempts()
    rows = testbed.own_attempt_rows(ls.TASK, attempts, critique=True, correct=True, seed=0)
    corrections = [r for r in rows if r.meta["format"] == "correct"]
    critiques = [r for r in rows if r.meta["format"] == "critique"]
    # 3 distinct wrong grids + the unreadable answer (the repeat is dropped); critiques: the 3 grids, 3 right ones
    assert len(corrections) == 4 and len(critiques) == 6
    wrong_texts = [t for e, t in attempts[:6] if not ls.check(e.question, t)]
    for r in corrections:
        attempt = r.question.split("earlier attempt at this problem:\n")[1].split("\n\nReview the attempt")[0]
        assert attempt in wrong_texts + ["I do not know."]
        assert ls.check(r.meta["question"], r.solution) and not ls.check(r.meta["question"], attempt)
        assert r.meta["attempt"] == "own"
    found = []
    for r in critiques:
        c = parse_critique(r.solution)
        assert c.format_errors == (), (r.solution, c.format_errors)
        solution = r.question.split("Solution:\n")[1].split("\n\nReply with")[0]
        question = r.question.split("Problem:\n")[1].split("\n\nSolution:")[0]
        assert c.error_found is (not ls.check(question, solution))
        assert "I do not know." not in solution  # no row to quote in an unreadable answer
        if c.error_found:
            assert c.quote in solution
        found.append(c.error_found)
    assert sum(found) == 3
    only = testbed.own_attempt_rows(ls.TASK, attempts, critique=False, correct=True, seed=0)
    assert [r.meta["format"] for r in only] == ["correct"] * 4
    with pytest.raises(ValueError, match="critique, correct and/or guided"):
        testbed.own_attempt_rows(ls.TASK, attempts, critique=False, correct=False, seed=0)


def test_own_attempt_guided_rows_pose_the_critiques_hint_without_the_attempt():
    from jaxrl_reason.data import testbed
    from jaxrl_reason.data.prompts import guided_prompt

    exs, attempts = _own_attempts()
    rows = testbed.own_attempt_rows(ls.TASK, attempts, critique=True, correct=False, guided=True, seed=0)
    guided = [r for r in rows if r.meta["format"] == "guided"]
    hints = [parse_critique(r.solution).hint for r in rows if r.meta["format"] == "critique"
             and parse_critique(r.solution).error_found]
    assert len(guided) == 3 and len(hints) == 3  # one per critiqued wrong attempt (not the unreadable one)
    wrong_texts = [t for e, t in attempts[:6] if not ls.check(e.question, t)]
    for r, hint in zip(guided, hints):
        assert r.question == guided_prompt(r.meta["question"], hint)  # the same hint its critique row teaches
        assert not any(t.split("{")[1] in r.question for t in wrong_texts)  # the attempt is not shown
        assert ls.check(r.meta["question"], r.solution)


def test_own_attempt_keep_rows_review_a_right_attempt_and_keep_it_verbatim():
    from jaxrl_reason.data import testbed

    _, attempts = _own_attempts()
    right_texts = [t for e, t in attempts if ls.check(e.question, t)]
    for share, n_keep in ((0.5, 2), (2.0, 3)):  # of the 4 correction rows; at most the 3 distinct right attempts
        rows = testbed.own_attempt_rows(ls.TASK, attempts, critique=False, correct=True, seed=0, keep_share=share)
        keep = [r for r in rows if r.meta.get("source_right")]
        assert len(rows) == 4 + n_keep and len(keep) == n_keep
        for r in keep:
            attempt = r.question.split("earlier attempt at this problem:\n")[1].split("\n\nReview the attempt")[0]
            assert attempt == r.solution and attempt in right_texts and r.meta["format"] == "correct"
        assert len({r.solution for r in keep}) == n_keep


def _own_cfg(tmp_path, **sft):
    knobs = dict(aux_verify_share=0.0, aux_correct_share=0.5, own_attempt_steps=2, own_attempt_questions=8,
                 own_attempt_samples=2)
    c = _tiny_cfg(tmp_path, **{**knobs, **sft})
    c.data.source = "latin_square"
    return c


def test_own_attempt_warmup_runs_after_the_sft_and_reports_its_rows(tmp_path):
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import warmed_up_policy

    rc, _ = start(_own_cfg(tmp_path))
    task = build_data(rc.data, rc.seed)
    tok = build_tokenizer(rc, task.train, str(tmp_path), task.prompt_fn)
    _, report = warmed_up_policy(rc, tok, task, str(tmp_path))
    own = report["own_attempts"]
    assert own["attempts"] == 16
    # a 3-step model gets every attempt wrong: one correction row per distinct attempt, no critique asked for
    assert 1 <= own["correct_rows"] <= 16 and own["critique_rows"] == 0
    assert own["solve_rows"] == min(40, 3 * own["correct_rows"])  # sft.own_attempt_solve_share = 3 of 40 SFT rows
    assert (tmp_path / "logs_own_attempts").is_dir() and (tmp_path / "sft_model" / "config.json").exists()


@pytest.mark.parametrize("change, match", [
    ({"aux_correct_share": 0.0}, "set sft.aux_critique_share, aux_correct_share or aux_guided_share"),
    ({"own_attempt_questions": 41}, "own_attempt_questions=41 must be in"),
    ({"own_attempt_samples": 0}, "own_attempt_samples=0"),
    ({"steps": 0}, "needs the SFT warm-up"),
    ({"own_attempt_solve_share": -1.0}, "own_attempt_solve_share"),
    ({"own_attempt_keep_share": -0.5}, "own_attempt_keep_share=-0.5 must be >= 0"),
    ({"own_attempt_keep_share": 1.0, "own_attempt_formats": "critique"}, "keeps right attempts in correction rows"),
])
def test_own_attempt_warmup_is_refused_at_start_up_when_it_cannot_run(tmp_path, change, match):
    from jaxrl_reason.experiment.pipeline import start

    with pytest.raises(ValueError, match=match):
        start(_own_cfg(tmp_path, **change))


def test_own_attempt_formats_follow_the_shares_or_the_named_list(tmp_path):
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.experiment.warmup import own_attempt_formats

    rc, _ = start(_own_cfg(tmp_path))  # "aux": the correction share only
    assert own_attempt_formats(rc) == {"critique": False, "correct": True, "guided": False}
    # a format the SFT rows left out (CURE critiques on a warm-up that taught corrections only)
    rc, _ = start(_own_cfg(tmp_path, own_attempt_formats="critique"))
    assert own_attempt_formats(rc) == {"critique": True, "correct": False, "guided": False}
    rc, _ = start(_own_cfg(tmp_path, aux_correct_share=0.0, own_attempt_formats="correct, critique"))
    assert own_attempt_formats(rc) == {"critique": True, "correct": True, "guided": False}
    rc, _ = start(_own_cfg(tmp_path, own_attempt_formats="critique,guided"))
    assert own_attempt_formats(rc) == {"critique": True, "correct": False, "guided": True}
    rc, _ = start(_own_cfg(tmp_path, aux_guided_share=0.1))  # "aux" follows the guided share too
    assert own_attempt_formats(rc) == {"critique": False, "correct": True, "guided": True}
    for bad in ("critiques", "", "aux,correct"):  # refused at start-up, even with the stage off
        with pytest.raises(ValueError, match="own_attempt_formats="):
            start(_own_cfg(tmp_path, own_attempt_formats=bad, own_attempt_steps=0))


def test_own_attempt_warmup_is_refused_for_a_task_that_cannot_grade_it(tmp_path):
    from jaxrl_reason.experiment.pipeline import start

    c = _own_cfg(tmp_path)
    c.data.source = "arithmetic"
    with pytest.raises(ValueError, match="aux_"):  # its auxiliary shares are refused first
        start(c)
    c.sft.aux_correct_share = 0.0
    c.sft.aux_critique_share = 0.0
    with pytest.raises(ValueError, match="own_attempt_steps > 0 needs a testbed task"):
        start(c)
