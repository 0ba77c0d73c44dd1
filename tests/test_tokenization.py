"""Tokenizer wrapper (on the real Qwen tokenizer files) and the tiny Qwen2-compatible BPE trainer."""
from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tokenizers import pre_tokenizers

from jaxrl_reason.data.tokenizer_training import (ENDOFTEXT, IM_END, IM_START, QWEN_CHATML, SPECIAL_TOKENS,
                                                  build_bpe, bytes_to_unicode, save_bpe_dir, train_bpe,
                                                  train_tiny_tokenizer)
from jaxrl_reason.tokenization import PromptBatch, Tokenizer

# Text that exercises every branch of Qwen2's split regex plus NFC and special tokens.
VARIED_TEXTS = [
    "What is 12345 + 678?",
    "The answer is \\boxed{12}.",
    "$\\frac{3}{4} + \\sqrt{2}$ and \\(x^2\\)",
    "  leading spaces,   inner   runs, trailing  ",
    "line one\nline two\n\n\nline five\r\nwindows\tTab",
    "I'm sure it's fine; they'LL say THEY'RE right, we'd see.",
    "café naïve Ωmega 数学 🤖 \u00e9 vs e\u0301 (decomposed)",
    "(parenthesised) [bracketed] {braced} \"quoted\" -dash _under",
    f"{IM_START}user\nWhat is 2+2?{IM_END}\n{IM_START}assistant\nYes{IM_END}{ENDOFTEXT}",
    "Yes No yes no Yes. No!",
    "",
    "\n",
    "x=-1.5e+10, 0.25%, 3/4",
]


def _training_corpus(n: int = 400, seed: int = 0, with_verdicts: bool = True) -> list[str]:
    rng = random.Random(seed)
    words = ["the", "answer", "solution", "correct", "step", "because", "therefore", "sum", "product", "number",
             "first", "then", "we", "compute", "so", "is", "of", "and", "total", "each"]
    texts = []
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
        texts.append(f"{IM_START}user\nWhat is {a} + {b}?{IM_END}\n{IM_START}assistant\n"
                     f"{sentence.capitalize()}, {a} + {b} = {a + b}.\nThe answer is \\boxed{{{a + b}}}.{IM_END}")
        if with_verdicts:
            texts.append(f"Is this solution correct? Answer Yes or No.\n{rng.choice(['Yes', 'No'])}")
    texts.append("café naïve Ωmega 数学 🤖")
    return texts


# ============================================================================================ real Qwen tokenizer
@pytest.fixture(scope="module")
def qwen(qwen_tokenizer_dir) -> Tokenizer:
    return Tokenizer.from_pretrained(qwen_tokenizer_dir)


def test_qwen_special_ids_match_vocabulary(qwen):
    vocab = qwen.hf.get_vocab()
    assert qwen.eos_id == vocab[IM_END]
    assert qwen.pad_id == vocab[ENDOFTEXT]
    assert vocab[IM_END] in qwen.stop_ids and vocab[ENDOFTEXT] in qwen.stop_ids
    assert qwen.stop_ids[0] == qwen.eos_id
    assert len(set(qwen.stop_ids)) == len(qwen.stop_ids)
    assert qwen.vocab_size == len(vocab) and qwen.vocab_size > max(vocab.values())
    assert qwen.token_to_id("<think>") == vocab["<think>"]
    assert qwen.token_to_id("definitely-not-a-token") is None


def test_qwen_chat_rendering(qwen):
    assert qwen.has_chat_template
    text = qwen.render_prompt("What is 2+2?", system="Be brief.", assistant_prefix="ERROR_FOUND: true")
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                    "<|im_start|>assistant\nERROR_FOUND: true")
    # The Qwen3 template writes an empty think block when thinking is off; both per call and as a default.
    no_think = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert qwen.render_prompt("Hi", enable_thinking=False) == no_think
    quiet = Tokenizer(qwen.hf, chat_template_kwargs={"enable_thinking": False})
    assert quiet.render_prompt("Hi") == no_think
    assert quiet.render_prompt("Hi", enable_thinking=True) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    # Special-token strings in rendered text become single special ids.
    ids = qwen.encode(qwen.render_prompt("Hi"))
    assert ids[0] == qwen.token_to_id(IM_START) and ids.count(qwen.eos_id) == 1


def test_qwen_left_padding_layout_and_lengths(qwen):
    texts = [qwen.render_prompt("What is 2+2?"), "hi", qwen.render_prompt("Compute 123 * 456 step by step.")]
    expected = [qwen.encode(t) for t in texts]
    batch = qwen.encode_prompts(texts)
    assert isinstance(batch, PromptBatch)
    assert batch.tokens.dtype == np.int32 and batch.lengths.dtype == np.int32
    width = max(len(e) for e in expected)
    assert batch.tokens.shape == (3, width)
    np.testing.assert_array_equal(batch.lengths, [len(e) for e in expected])
    for row, ids in zip(batch.tokens, expected):
        assert list(row[width - len(ids):]) == ids
        assert (row[:width - len(ids)] == qwen.pad_id).all()
    assert qwen.encode_ragged(texts) == expected

    rounded = qwen.encode_prompts(texts, pad_multiple=16)
    assert rounded.tokens.shape[1] == -(-width // 16) * 16
    np.testing.assert_array_equal(rounded.tokens[:, -width:], batch.tokens)
    # pad_multiple=max_length pins the width; a cap below the rounded width wins over the rounding.
    assert qwen.encode_prompts(texts, max_length=64, pad_multiple=64).tokens.shape == (3, 64)
    assert qwen.encode_prompts(texts, max_length=width + 1, pad_multiple=16).tokens.shape == (3, width + 1)


def test_qwen_decode_round_trip(qwen):
    for text in VARIED_TEXTS:
        if "e\u0301" in text:
            continue  # NFC composes e + combining accent into é, so the round trip is exact only on NFC text
        assert qwen.decode(qwen.encode(text)) == text
    texts = ["The answer is \\boxed{12}.", "数学 🤖"]
    batch = qwen.encode_prompts(texts)
    # Left padding decodes to leading pad strings unless specials are skipped.
    assert qwen.batch_decode(batch.tokens, skip_special_tokens=True) == texts
    rows = [qwen.encode("Yes") + [qwen.eos_id], qwen.encode("No, it is not") + [qwen.eos_id]]
    width = max(len(r) for r in rows)
    completions = np.array([r + [qwen.pad_id] * (width - len(r)) for r in rows], dtype=np.int32)
    # lengths cut each row: the first before its eos, the second just after it.
    assert qwen.batch_decode(completions, lengths=[len(rows[0]) - 1, len(rows[1])]) == ["Yes", "No, it is not" + IM_END]
    with pytest.raises(ValueError, match="batch_decode"):
        qwen.decode(completions)
    with pytest.raises(ValueError, match="2 rows but 1 lengths"):
        qwen.batch_decode(completions, lengths=[1])


def test_qwen_encode_with_offsets_gives_each_tokens_span(qwen):
    """The offsets a weighted SFT row maps its character spans with: the ids are `encode`'s, the spans tile the
    text in order, and each ASCII token's span is exactly its decoded text."""
    text = "Row 1: A x C x | A B C D ok\nCol 2: B D A C repeat\nThe answer is \\boxed{12}."
    ids, offsets = qwen.encode_with_offsets(text)
    assert ids == qwen.encode(text) and len(offsets) == len(ids)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    assert [text[a:b] for a, b in offsets] == [qwen.decode([i]) for i in ids]


def test_qwen_yes_no_single_tokens(qwen):
    vocab = qwen.hf.get_vocab()
    yes, no = qwen.single_token_id("Yes"), qwen.single_token_id("No")
    # At the start of a reply there is no leading space, so the plain entries (not 'ĠYes') are the verdict ids.
    assert (yes, no) == (vocab["Yes"], vocab["No"]) and yes != no
    assert qwen.single_token_id(" Yes", after_generation_prompt=False) == vocab["\u0120Yes"]
    assert qwen.single_token_id("Yes", after_generation_prompt=False) == yes
    with pytest.raises(ValueError, match="not one"):
        qwen.single_token_id("Incontrovertibly-yes")
    with pytest.raises(ValueError, match="non-empty"):
        qwen.single_token_id("")


def test_qwen_encode_prompt_errors(qwen):
    with pytest.raises(ValueError, match="empty list"):
        qwen.encode_prompts([])
    with pytest.raises(ValueError, match=r"Prompt 1 encodes to 0 tokens"):
        qwen.encode_prompts(["hi", ""])
    long_text = "one two three four five six"
    n = len(qwen.encode(long_text))
    with pytest.raises(ValueError, match=rf"Prompt 1 has {n} tokens, more than max_length={n - 1}"):
        qwen.encode_prompts(["hi", long_text], max_length=n - 1)
    assert qwen.encode_prompts(["hi", long_text], max_length=n).tokens.shape == (2, n)
    with pytest.raises(TypeError, match="single str"):
        qwen.encode_prompts("hi")
    with pytest.raises(ValueError, match="pad_multiple"):
        qwen.encode_prompts(["hi"], pad_multiple=0)


def test_missing_directory_errors(tmp_path):
    missing = tmp_path / "no_such_dir"
    with pytest.raises(FileNotFoundError, match="no_such_dir"):
        Tokenizer.from_pretrained(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"neither tokenizer.json.*config.json"):
        Tokenizer.from_pretrained(empty)
    with pytest.raises(NotADirectoryError):
        Tokenizer.from_pretrained(empty / "config.json")


# ================================================================================================== tiny BPE
@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _training_corpus()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("tiny_tok")
    train_tiny_tokenizer(corpus, out, vocab_size=400)
    return out


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_dir)


def _with_qwen2_config(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                                 "vocab_size": 512}))
    return dst


def test_byte_alphabet_matches_tokenizers_library():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert table[ord("A")] == "A" and table[ord(" ")] == "\u0120" and table[ord("\n")] == "\u010a"


def test_tiny_reload_through_qwen2_tokenizer_gives_identical_ids(tiny_dir, corpus, tmp_path):
    from tokenizers import Tokenizer as RawTokenizer
    from transformers import AutoTokenizer

    raw = train_bpe(corpus, vocab_size=400)  # the trained object itself, next to what was saved from it
    assert RawTokenizer.from_file(str(tiny_dir / "tokenizer.json")).to_str() == raw.to_str()
    hf = AutoTokenizer.from_pretrained(str(_with_qwen2_config(tiny_dir, tmp_path / "model")), local_files_only=True)
    # The hazard being tested: transformers swaps in its own Qwen2 pipeline for a qwen2 directory.
    assert type(hf).__name__ == "Qwen2Tokenizer"
    assert len(hf) == raw.get_vocab_size()
    for text in VARIED_TEXTS:
        ids = raw.encode(text, add_special_tokens=False).ids
        assert hf.encode(text, add_special_tokens=False) == ids, text
        assert hf.decode(ids) == raw.decode(ids, skip_special_tokens=False)
    assert [hf.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert hf.eos_token == IM_END and hf.pad_token == ENDOFTEXT


def test_reload_check_catches_a_foreign_pre_tokenizer(tiny_dir, tmp_path):
    """Negative control: the same merges under GPT-2's split regex do NOT survive a Qwen2 reload."""
    from tokenizers import Tokenizer as RawTokenizer
    from transformers import AutoTokenizer

    raw = RawTokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    foreign = tmp_path / "foreign"
    save_bpe_dir(raw, foreign)
    hf = AutoTokenizer.from_pretrained(str(_with_qwen2_config(foreign, tmp_path / "model")), local_files_only=True)
    # Qwen2's regex keeps a newline with the punctuation before it ('.\n' is one pre-token and one learned token),
    # GPT-2's splits them.
    text = "The answer is \\boxed{12}.\nThe end."
    assert raw.token_to_id(bytes_to_unicode()[ord(".")] + bytes_to_unicode()[ord("\n")]) is not None
    assert hf.encode(text, add_special_tokens=False) != raw.encode(text, add_special_tokens=False).ids


def test_tiny_special_tokens_and_wrapper(tiny, corpus):
    assert (tiny.pad_id, tiny.eos_id) == (0, 2)
    assert tiny.token_to_id(IM_START) == 1
    assert tiny.stop_ids == (2, 0)
    assert tiny.vocab_size <= 400
    # Training text is cut at special tokens, so no merge is wasted on pieces of '<|im_start|>'.
    assert {t for t in tiny.hf.get_vocab() if "|" in t and len(t) > 1} == set(SPECIAL_TOKENS)
    # Qwen2's regex isolates digits, so a number is spelled digit by digit whatever the corpus.
    assert tiny.encode("12345") == [tiny.token_to_id(bytes_to_unicode()[ord(d)]) for d in "12345"]
    for text in VARIED_TEXTS:
        if "e\u0301" not in text:
            assert tiny.decode(tiny.encode(text)) == text


def test_tiny_chat_template_renders(tiny):
    assert tiny.has_chat_template
    text = tiny.render_prompt("What is 2+2?", system="Be brief.", assistant_prefix="ERROR_FOUND: ")
    assert text == (f"{IM_START}system\nBe brief.{IM_END}\n{IM_START}user\nWhat is 2+2?{IM_END}\n"
                    f"{IM_START}assistant\nERROR_FOUND: ")
    ids = tiny.encode(text)
    assert ids.count(1) == 3 and ids.count(2) == 2 and ids[0] == 1
    batch = tiny.encode_prompts([tiny.render_prompt("a"), tiny.render_prompt("What is 12 + 7?")], pad_multiple=8)
    assert batch.tokens.shape[1] % 8 == 0 and (batch.tokens[0, :-batch.lengths[0]] == 0).all()


def test_tiny_yes_no_single_tokens(tiny):
    vocab = tiny.hf.get_vocab()
    assert tiny.single_token_id("Yes") == vocab["Yes"]
    assert tiny.single_token_id("No") == vocab["No"]


def test_required_words_learned_by_training_are_left_alone(corpus):
    # The corpus has a verdict on every other line, so training learns "Yes"/"No" by itself: forcing is a no-op.
    assert train_bpe(corpus, vocab_size=400).to_str() == train_bpe(corpus, vocab_size=400, required_words=()).to_str()


def test_required_words_forced_with_merges_within_vocab_size():
    corpus = _training_corpus(n=200, with_verdicts=False)
    assert not any("Yes" in t or "No" in t for t in corpus)
    plain = train_bpe(corpus, vocab_size=320, required_words=())
    assert len(plain.encode("Yes").ids) > 1 and plain.get_vocab_size() == 320
    forced = train_bpe(corpus, vocab_size=320, required_words=("Yes", "No", "Correct"))
    assert forced.get_vocab_size() <= 320
    for word in ("Yes", "No", "Correct"):
        assert forced.encode(word).tokens == [word]
    # Forced words are ordinary merges, not added tokens: only the three special tokens are "added".
    assert sorted(t.content for t in forced.get_added_tokens_decoder().values()) == sorted(SPECIAL_TOKENS)
    # Forcing replaces only the tail of the trained merges.
    plain_merges = json.loads(plain.to_str())["model"]["merges"]
    forced_merges = json.loads(forced.to_str())["model"]["merges"]
    n_kept = next(i for i, (a, b) in enumerate(zip(plain_merges, forced_merges)) if a != b)
    assert n_kept >= len(plain_merges) - 12


def test_bad_training_settings():
    with pytest.raises(ValueError, match="vocab_size=100"):
        train_bpe(["abc"], vocab_size=100)
    with pytest.raises(ValueError, match="'Yes No'"):
        train_bpe(["abc"], required_words=("Yes No",))


def test_no_chat_template_falls_back_to_plain_format(tmp_path, corpus):
    tok = train_tiny_tokenizer(corpus[:50], tmp_path, vocab_size=300, chat_template=None)
    assert not tok.has_chat_template
    assert tok.render_prompt("Q?", system="S", assistant_prefix="A") == "S\n\nUser: Q?\nAssistant: A"
    with pytest.raises(ValueError, match="no chat template"):
        tok.render_prompt("Q?", enable_thinking=False)


def test_pad_falls_back_to_eos(tiny):
    hf = copy.deepcopy(tiny.hf)
    hf.pad_token = None
    assert hf.pad_token_id is None
    no_pad = Tokenizer(hf)
    assert no_pad.pad_id == no_pad.eos_id == 2
    assert (no_pad.encode_prompts(["a", "a b c"]).tokens[0, :-1] == 2).all()


def test_generation_config_adds_stop_ids_and_saves(tiny_dir, tmp_path):
    d = tmp_path / "with_gen"
    shutil.copytree(tiny_dir, d)
    extra = 7
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, extra]}))
    tok = Tokenizer.from_pretrained(d)
    assert tok.stop_ids == (2, extra, 0)
    saved = tmp_path / "saved"
    tok.save_pretrained(saved)
    assert "local_files_only" not in json.loads((saved / "tokenizer_config.json").read_text())
    again = Tokenizer.from_pretrained(saved)
    assert again.stop_ids == tok.stop_ids
    assert again.render_prompt("hi") == tok.render_prompt("hi")
    for text in VARIED_TEXTS:
        assert again.encode(text) == tok.encode(text)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 10**6}))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        Tokenizer.from_pretrained(d)


def test_training_is_deterministic(corpus, tmp_path):
    a = train_bpe(corpus, vocab_size=400).to_str()
    assert train_bpe(list(reversed(corpus)), vocab_size=400).to_str() == a  # order of texts does not matter
    # A fresh process has fresh hash seeds (Python and Rust) and thread scheduling.
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from jaxrl_reason.data.tokenizer_training import save_bpe_dir, train_bpe
        corpus = json.load(open(sys.argv[1]))
        save_bpe_dir(train_bpe(corpus, vocab_size=400), sys.argv[2])
    """)
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "corpus.json"), str(tmp_path / "other")],
                   check=True, timeout=120)
    local = tmp_path / "local"
    save_bpe_dir(build_bpe(json.loads(a)["model"]["merges"]), local)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / "other" / name).read_bytes() == (local / name).read_bytes(), name
    assert (local / "chat_template.jinja").read_text() == QWEN_CHATML
