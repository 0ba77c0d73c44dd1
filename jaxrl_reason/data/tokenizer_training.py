"""Trains a tiny byte-level BPE that is Qwen2-compatible, for the small CPU models of tests and colabs.

`transformers` (5.x) loads the tokenizer of a `qwen2` model directory as `Qwen2Tokenizer`, which rebuilds the
normaliser, pre-tokenizer and decoder from its own constants and keeps only the vocabulary and merges of
tokenizer.json. So the BPE is trained under exactly those rules (NFC, Qwen2's split regex, byte-level alphabet, no
unknown token); then a directory we write reloads to the very same ids whichever loader reads it.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as RawTokenizer
from tokenizers.models import BPE

from jaxrl_reason.tokenization import Tokenizer

# Qwen2's pre-tokenizer regex. `\p{N}` alone (no `+`) makes every digit its own pre-token, so numbers are
# spelled digit by digit and arithmetic is tokenized uniformly.
QWEN2_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                       r"|\s*[\r\n]+|\s+(?!\S)|\s+")

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
_SPECIAL_SPLIT = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))

# ChatML with no default system message (Qwen2.5's template injects one; a tiny model has no identity to state).
QWEN_CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The verifier reads its verdict off these (RL^V); each must be one token at the start of a reply.
DEFAULT_REQUIRED_WORDS = ("Yes", "No")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table that byte-level BPE works in.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, soft hyphen, ...) are moved
    to code points 256 and up, in byte order, so no byte is ever whitespace or invisible inside a token.
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _configure_pipeline(tok: RawTokenizer) -> None:
    """Exactly the pipeline `transformers.Qwen2Tokenizer` rebuilds on load."""
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    # Touches offsets only, never ids; kept because Qwen's own tokenizer.json carries the same one.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)


def _special_tokens() -> list[AddedToken]:
    return [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]


def _vocab_from_merges(merges: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Ids: special tokens, then the 256 byte symbols in byte order, then each merge's result in merge order.

    Rebuilding the vocabulary from the merges (rather than keeping the trainer's ids) ties every id to the merge
    list alone, and makes id - 3 the byte value for the single-byte tokens.
    """
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *bytes_to_unicode().values()):
        vocab[token] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def _byte_level(word: str) -> str:
    table = bytes_to_unicode()
    return "".join(table[b] for b in word.encode("utf-8"))


def _forcing_merges(merges: list[tuple[str, str]], words: Sequence[str]) -> list[tuple[str, str]]:
    """Merges to append after `merges` so that each word becomes one token.

    Each word's current pieces are joined left to right. New merges rank after all trained ones, so they only fire
    once no trained merge applies; a word made whole earlier stays whole when later words add merges.
    """
    extra: list[tuple[str, str]] = []
    for word in words:
        model = BPE(vocab=_vocab_from_merges(merges + extra), merges=merges + extra)
        pieces = [t.value for t in model.tokenize(_byte_level(normalizers.NFC().normalize_str(word)))]
        joined = pieces[0]
        for piece in pieces[1:]:
            if (joined, piece) not in extra:
                extra.append((joined, piece))
            joined += piece
    return extra


def _ordinary_segments(texts: Iterable[str]) -> Iterator[str]:
    """The text between special tokens, which is all that BPE ever sees at encode time.

    `tokenizers` trains on raw text even when special tokens are registered, so chat-formatted training text would
    otherwise spend merges on pieces such as '<|im_' that can never occur.
    """
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__}, not a str; decode bytes before training.")
        yield from (segment for segment in _SPECIAL_SPLIT.split(text) if segment)


def _check_required_words(words: Sequence[str]) -> None:
    splitter = pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False)
    for word in words:
        pieces = [p for p, _ in splitter.pre_tokenize_str(normalizers.NFC().normalize_str(word))] if word else []
        if len(pieces) != 1:
            raise ValueError(f"required word {word!r} splits into pre-tokens {pieces} under Qwen2's regex, so no BPE "
                             "merge can make it one token; required_words must be single pre-tokens like 'Yes'.")


def build_bpe(merges: Sequence[tuple[str, str]]) -> RawTokenizer:
    """A Qwen2-compatible byte-level BPE `tokenizers.Tokenizer` from a merge list (ids as in `_vocab_from_merges`)."""
    merges = [tuple(m) for m in merges]
    tok = RawTokenizer(BPE(vocab=_vocab_from_merges(merges), merges=merges, dropout=None, unk_token=None,
                           fuse_unk=False, byte_fallback=False))
    _configure_pipeline(tok)
    tok.add_special_tokens(_special_tokens())
    return tok


def train_bpe(texts: Iterable[str], *, vocab_size: int = 1024, min_frequency: int = 2,
              required_words: Sequence[str] = DEFAULT_REQUIRED_WORDS) -> RawTokenizer:
    """Trains the BPE in memory; `train_tiny_tokenizer` adds the files around it.

    `vocab_size` counts everything (3 special tokens + 256 bytes + merges) and is an upper bound. Each required word
    that training did not already make one token is forced in with ordinary merges, which replace the last (least
    frequent) trained merges so the size bound still holds.
    """
    base = len(SPECIAL_TOKENS) + 256
    if vocab_size < base:
        raise ValueError(f"vocab_size={vocab_size} is below {base} (3 special tokens + 256 byte symbols); raise it.")
    _check_required_words(required_words)

    trainer_tok = RawTokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    _configure_pipeline(trainer_tok)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=_special_tokens(), initial_alphabet=list(bytes_to_unicode().values()),
                                  show_progress=False)
    trainer_tok.train_from_iterator(_ordinary_segments(texts), trainer=trainer)
    merges = [tuple(m) for m in json.loads(trainer_tok.to_str())["model"]["merges"]]

    # Find how many trailing merges to give up: forcing needs `n` new tokens, but dropping merges can raise `n`
    # (a dropped merge may have built part of a word), so grow the drop until it covers the need. `n` is bounded by
    # the total length of the words, so this ends.
    drop = 0
    while True:
        kept = merges[:len(merges) - drop]
        extra = _forcing_merges(kept, required_words)
        kept_vocab = _vocab_from_merges(kept)
        new_tokens = len({a + b for a, b in extra} - kept_vocab.keys())
        if new_tokens <= drop or drop >= len(merges):
            break
        drop = new_tokens
    return build_bpe(kept + extra)


def _write_json(path: Path, obj: object) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def save_bpe_dir(tok: RawTokenizer, out_dir: str | os.PathLike, *, chat_template: str | None = QWEN_CHATML,
                 model_max_length: int = 32768) -> Path:
    """Writes a directory that `transformers.AutoTokenizer` (and `Tokenizer.from_pretrained`) loads as Qwen2's.

    tokenizer_config.json names `Qwen2Tokenizer` and lists the special tokens in `added_tokens_decoder`, because
    that loader takes only vocab and merges from tokenizer.json; the chat template goes both inline (transformers
    4.x) and in chat_template.jinja (5.x).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "unk_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "additional_special_tokens": [IM_START, IM_END],
        "extra_special_tokens": [IM_START, IM_END],
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": True} for t, i in ids.items()
        },
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "model_max_length": model_max_length,
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
        (out / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
    _write_json(out / "tokenizer_config.json", config)
    _write_json(out / "special_tokens_map.json", {
        "eos_token": IM_END, "pad_token": ENDOFTEXT, "additional_special_tokens": [IM_START, IM_END]})
    return out


def train_tiny_tokenizer(texts: Iterable[str], out_dir: str | os.PathLike, *, vocab_size: int = 1024,
                         min_frequency: int = 2, required_words: Sequence[str] = DEFAULT_REQUIRED_WORDS,
                         chat_template: str | None = QWEN_CHATML) -> Tokenizer:
    """Trains a Qwen2-compatible byte-level BPE on `texts`, saves it to `out_dir` and loads it back.

    Special tokens `<|endoftext|>` (pad, id 0), `<|im_start|>` (1), `<|im_end|>` (eos, 2). Deterministic: the same
    texts and settings give a byte-identical tokenizer.json.
    """
    tok = train_bpe(texts, vocab_size=vocab_size, min_frequency=min_frequency, required_words=required_words)
    save_bpe_dir(tok, out_dir, chat_template=chat_template)
    return Tokenizer.from_pretrained(out_dir)
