"""Test-time strategies: votes grouped by math equivalence, confidence-based length selection, budget forcing."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_reason.inference.test_time import (CONCLUSION_MARKER, BudgetRun, best_of_n, budget_forcing,
                                              group_answers, majority_vote, select_length_by_confidence,
                                              truncate_to_last_sentence, weighted_vote)
from jaxrl_reason.models.qwen2 import ModelConfig, init_model
from jaxrl_reason.sampling.sampler import FINISH_LENGTH


# ------------------------------------------------------------------------------------------------ voting
def test_equivalent_answers_vote_together():
    answers = ["0.5", "3", "\\frac{1}{2}", "3", "\\dfrac{1}{2}", None]
    classes = group_answers(answers)
    assert classes.tolist() == [0, 1, 0, 1, 0, -1]
    # By string "3" would win 2:1; by equivalence 1/2 wins 3:2.
    choice = majority_vote(answers, gold="1/2")
    assert choice.answer == "0.5" and choice.index == 0 and choice.class_id == 0
    assert choice.correct is True and choice.support == pytest.approx(3 / 6)


def test_weighted_vote_beats_majority_when_the_verifier_knows_better():
    answers = ["7", "7", "7", "12", "12"]
    correct = [0, 0, 0, 1, 1]
    scores = [0.1, 0.2, 0.1, 0.9, 0.8]
    maj = majority_vote(answers, correct=correct)
    wtd = weighted_vote(answers, scores, correct=correct)
    assert (maj.answer, maj.correct) == ("7", False)
    assert (wtd.answer, wtd.correct, wtd.index) == ("12", True, 3)
    assert wtd.support == pytest.approx(1.7 / 2.1)


def test_majority_wins_when_the_verifier_is_wrong():
    answers = ["7", "7", "7", "12", "12"]
    correct = [1, 1, 1, 0, 0]
    scores = [0.3, 0.3, 0.3, 0.95, 0.9]  # weighted: 7 -> 0.9, 12 -> 1.85
    assert majority_vote(answers, correct=correct).correct is True
    wtd = weighted_vote(answers, scores, correct=correct)
    assert (wtd.answer, wtd.correct) == ("12", False)
    # with a verifier that agrees, weighted voting follows it
    assert weighted_vote(answers, [0.9, 0.8, 0.7, 0.1, 0.2], correct=correct).answer == "7"


def test_best_of_n_and_edge_cases():
    answers = ["4", None, "5"]
    assert best_of_n(answers, [0.2, 0.9, 0.5], correct=[1, 0, 0]) == (None, 1, -1, False, 0.9)
    c = best_of_n(answers, [0.2, 0.1, 0.5], gold="5")
    assert (c.answer, c.index, c.correct) == ("5", 2, True)
    # ties go to the earliest candidate, deterministically
    assert best_of_n(["1", "2"], [0.5, 0.5]).index == 0
    assert majority_vote(["2", "1", "1", "2"], classes=[0, 1, 1, 0]).answer == "2"
    # nothing to vote on
    none = majority_vote([None, ""], correct=[0, 0])
    assert none.answer is None and none.correct is False and none.index == -1
    with pytest.raises(ValueError, match="one per sample"):
        weighted_vote(["1", "2"], [0.5])
    with pytest.raises(ValueError, match=">= 0"):
        weighted_vote(["1", "2"], [0.5, -1.0])


def test_precomputed_classes_skip_grading():
    # Class ids are trusted as given: here "a" and "b" are declared equivalent.
    c = majority_vote(["a", "b", "c"], classes=[0, 0, 1], correct=[1, 1, 0])
    assert c.answer == "a" and c.support == pytest.approx(2 / 3) and c.correct


# ------------------------------------------------------------------------------------- length selection
def test_confidence_based_length_selection():
    low = BudgetRun(1024, ["1", "2", "3", "1"], [0.3, 0.3, 0.3, 0.1], tokens=4000, correct=[0, 0, 1, 0],
                    classes=[0, 1, 2, 0])  # winner "1": 0.4 of 1.0
    mid = BudgetRun(2048, ["3", "3", "2", "3"], [0.5, 0.4, 0.2, 0.1], tokens=7000, correct=[1, 1, 0, 1],
                    classes=[0, 0, 1, 0])  # winner "3": 1.0 of 1.2
    high = BudgetRun(4096, ["3", "3", "3", "3"], [0.9] * 4, tokens=12000, correct=[1] * 4, classes=[0] * 4)
    sel = select_length_by_confidence([low, mid, high], tau=0.75)
    assert (sel.run_index, sel.budget, sel.reached, sel.tokens_spent) == (1, 2048, True, 11000)
    assert sel.choice.answer == "3" and sel.choice.correct and sel.confidence == pytest.approx(1.0 / 1.2)
    # a low threshold stops at once; an unreachable one falls through to the largest budget
    assert select_length_by_confidence([low, mid, high], tau=0.4).budget == 1024
    sel = select_length_by_confidence([low, mid], tau=0.9)
    assert (sel.budget, sel.reached, sel.tokens_spent) == (2048, False, 11000)
    with pytest.raises(ValueError, match="increasing budgets"):
        select_length_by_confidence([mid, low], tau=0.5)


# -------------------------------------------------------------------------------------------- budget forcing
# A char-level fake tokenizer over the tiny model's 97 ids: token = one character, so token counts are
# character counts and every cut can be checked on the text exactly. Several ids decode to "." so sentences
# are common; id 90 is the stop token.
_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n:,;!?-+=()"
_CHARS = list(_ALPHABET) + ["."] * 5 + ["'", "\"", "/", "*", "<", ">", "$", "@", "^"]
_CHARS += [chr(0x3B1 + i) for i in range(97 - len(_CHARS))]  # Greek letters fill the rest
STOP = 90


class CharTokenizer:
    stop_ids = (STOP,)
    pad_id = 96

    def encode(self, text):
        return [_CHARS.index(ch) for ch in text]

    def decode(self, ids):
        return "".join(_CHARS[i] for i in ids)


@pytest.fixture(scope="module")
def tiny_model():
    assert len(_CHARS) == 97 and len(set(_CHARS)) == 97 - 4 and _CHARS[STOP] not in _ALPHABET
    cfg = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return init_model(cfg, seed=3)


def test_truncate_to_last_sentence():
    assert truncate_to_last_sentence("So x = 2. Then y") == "So x = 2."
    assert truncate_to_last_sentence("a. b. c") == "a. b."
    assert truncate_to_last_sentence("no full stop here") == "no full stop here"
    assert truncate_to_last_sentence("") == ""


def test_budget_forcing_cuts_to_last_sentence_and_appends_marker(tiny_model):
    tok = CharTokenizer()
    prompts = ["What is 2+3?", "Compute 7*8.", "Solve x+1=4:", "Name a prime"]
    k, b = 40, 20
    out = budget_forcing(tiny_model, tok, prompts, jax.random.PRNGKey(0), budget=k, buffer=b, num_samples=8)
    assert len(out.texts) == 32 and out.prompt_index.tolist() == np.repeat(np.arange(4), 8).tolist()
    cases = set()
    for r in range(32):
        first, text = out.first_texts[r], out.texts[r]
        assert out.num_tokens[r] <= k and out.num_tokens[r] == len(out.tokens[r])
        if not out.forced[r]:  # stopped by itself before k - b tokens: untouched
            cases.add("natural")
            assert text == first and len(first) < k - b and out.num_tokens[r] == len(first) + 1
            continue
        assert len(first) == k - b  # char-level: k - b tokens are k - b characters
        head = first[:first.rindex(".") + 1] if "." in first else first
        cases.add("cut" if "." in first else "kept whole")
        assert text.startswith(head + CONCLUSION_MARKER)
        rest = text[len(head + CONCLUSION_MARKER):]
        assert "." not in first[len(head):]  # the cut is at the LAST full stop
        ended = out.finish_reason[r] != FINISH_LENGTH
        assert out.num_tokens[r] == len(head) + len(CONCLUSION_MARKER) + len(rest) + int(ended)
        if not ended:
            assert out.num_tokens[r] == k  # continued until the total budget
    assert cases == {"natural", "cut", "kept whole"}, cases


def test_budget_forcing_continuation_is_the_model_continuing_the_forced_prefix(tiny_model):
    tok = CharTokenizer()
    # Same prompt count, prompt-length bucket, samples and k - b as above: the first stage reuses its compile.
    prompts = ["Think: 12 and 5", "What is 9-4?", "Count the dots", "Is 7 prime?"]
    k, b, marker = 40, 20, "</think>:"
    out = budget_forcing(tiny_model, tok, prompts, jax.random.PRNGKey(1), budget=k, buffer=b, marker=marker,
                         num_samples=8, temperature=0.0)
    rows = np.flatnonzero(out.forced)
    assert rows.size
    seqs, starts = [], []
    for r in rows:
        head = truncate_to_last_sentence(out.first_texts[r]) + marker
        assert out.texts[r].startswith(head)
        ended = out.finish_reason[r] != FINISH_LENGTH
        # Several ids decode to ".", so G1 is taken as ids (what the model saw), and checked against the text.
        head_ids, g1 = out.tokens[r][:len(head)], out.tokens[r][len(head):]
        assert head_ids == tok.encode(head) and (g1[-1] == STOP) == ended
        assert tok.decode(g1[:-1] if ended else g1) == out.texts[r][len(head):]
        assert ended or len(head) + len(g1) == k  # a row without a stop continues to the full budget
        prefix = tok.encode(prompts[out.prompt_index[r]]) + head_ids
        seqs.append(prefix + g1)
        starts.append(len(prefix))
    # Greedy decoding: each continuation token is the argmax of one fresh forward over prefix + G1.
    width = max(map(len, seqs))
    tokens = np.zeros((len(seqs), width), np.int32)
    for i, sq in enumerate(seqs):
        tokens[i, :len(sq)] = sq
    logits = np.asarray(tiny_model(jnp.asarray(tokens), jnp.broadcast_to(jnp.arange(width), tokens.shape)))
    for i, (sq, st) in enumerate(zip(seqs, starts)):
        assert len(sq) > st
        np.testing.assert_array_equal(logits[i, st - 1:len(sq) - 1].argmax(-1), sq[st:])


def test_budget_forcing_rejects_a_buffer_smaller_than_the_marker(tiny_model):
    with pytest.raises(ValueError, match=f"must exceed the marker's {len(CONCLUSION_MARKER)} tokens"):
        budget_forcing(tiny_model, CharTokenizer(), ["hi"], jax.random.PRNGKey(0), budget=40, buffer=10)
    with pytest.raises(ValueError, match="1 <= buffer b < k"):
        budget_forcing(tiny_model, CharTokenizer(), ["hi"], jax.random.PRNGKey(0), budget=40, buffer=40)
