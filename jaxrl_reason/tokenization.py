"""A thin wrapper over a Hugging Face tokenizer stored in a local directory.

Everything the RL loop needs from a tokenizer lives here: the chat-rendered prompt, left-padded prompt batches for
the sampler, the ids that end a response, and the single-token ids the verifier scores ("Yes" / "No"). Only local
directories are read; nothing is ever fetched from a hub.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

# Tokens that end an assistant turn in ChatML-family models (Qwen2/2.5/3 and our tiny BPE). They are stop ids
# whenever the vocabulary has them, because a model trained on ChatML ends its turn with one or the other.
CHAT_END_TOKENS = ("<|im_end|>", "<|endoftext|>")

# Files that identify a loadable tokenizer directory (a `tokenizers` serialisation, or GPT-2 style vocab + merges).
_TOKENIZER_FILE_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"))

# Load-time arguments that transformers 5 writes back into tokenizer_config.json on save.
_LOAD_TIME_KEYS = ("is_local", "local_files_only")


class PromptBatch(NamedTuple):
    """Prompts ready for the sampler.

    tokens:  int32 [batch, width] — each prompt right-aligned, left-padded with `pad_id`, so that every row's last
             prompt token sits in the last column and generation starts at the same column for all rows.
    lengths: int32 [batch] — the number of real (non-pad) tokens in each row.
    """

    tokens: np.ndarray
    lengths: np.ndarray


def _check_tokenizer_dir(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"Tokenizer directory {str(path)!r} does not exist; pass a local directory that "
                                "holds tokenizer.json (hub names are not resolved here).")
    if not path.is_dir():
        raise NotADirectoryError(f"Tokenizer path {str(path)!r} is not a directory; pass the directory that holds "
                                 "tokenizer.json, not a file.")
    if not any(all((path / name).is_file() for name in names) for names in _TOKENIZER_FILE_SETS):
        present = sorted(p.name for p in path.iterdir())
        raise FileNotFoundError(f"Tokenizer directory {str(path)!r} has neither tokenizer.json nor vocab.json + "
                                f"merges.txt (it holds {present}).")


def _generation_config_eos(path: Path) -> tuple[dict[str, Any] | None, list[int]]:
    """The raw generation config (or None) and its `eos_token_id` entries as a list."""
    gen_path = path / "generation_config.json"
    if not gen_path.is_file():
        return None, []
    with open(gen_path, encoding="utf-8") as f:
        gen = json.load(f)
    eos = gen.get("eos_token_id")
    if eos is None:
        return gen, []
    ids = eos if isinstance(eos, list) else [eos]
    return gen, [int(i) for i in ids]


def _dedupe(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(int(i) for i in ids))


class Tokenizer:
    """A Hugging Face tokenizer plus the conventions of this library.

    Build it with `Tokenizer.from_pretrained(local_dir)`. `chat_template_kwargs` are passed to every chat-template
    rendering (e.g. `{"enable_thinking": False}` for Qwen3 templates); per-call kwargs of `render_prompt` override
    them.
    """

    def __init__(self, hf_tokenizer: Any, *, generation_config: Mapping[str, Any] | None = None,
                 extra_stop_ids: Sequence[int] = (), chat_template_kwargs: Mapping[str, Any] | None = None):
        self._hf = hf_tokenizer
        self._generation_config = dict(generation_config) if generation_config is not None else None
        self._chat_template_kwargs = dict(chat_template_kwargs or {})
        if hf_tokenizer.eos_token_id is None:
            raise ValueError("The tokenizer has no eos_token; set `eos_token` in tokenizer_config.json (ChatML models "
                             "use '<|im_end|>').")
        # Cached: building the vocab dict of a 150k-entry tokenizer takes tens of milliseconds.
        self._vocab = vocab = hf_tokenizer.get_vocab()
        chat_ends = [vocab[t] for t in CHAT_END_TOKENS if t in vocab]
        self._stop_ids = _dedupe([hf_tokenizer.eos_token_id, *extra_stop_ids, *chat_ends])
        bad = [i for i in self._stop_ids if not 0 <= i < len(hf_tokenizer)]
        if bad:
            raise ValueError(f"Stop ids {bad} (from generation_config.json eos_token_id) are outside the vocabulary "
                             f"of size {len(hf_tokenizer)}.")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *,
                        chat_template_kwargs: Mapping[str, Any] | None = None) -> "Tokenizer":
        """Loads the tokenizer in local directory `path` (tokenizer files, optional generation_config.json)."""
        from transformers import AutoTokenizer

        path = Path(path)
        _check_tokenizer_dir(path)
        hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        gen, gen_eos = _generation_config_eos(path)
        return cls(hf, generation_config=gen, extra_stop_ids=gen_eos, chat_template_kwargs=chat_template_kwargs)

    # ----------------------------------------------------------------------------------------------- properties
    @property
    def hf(self) -> Any:
        """The underlying `transformers` tokenizer."""
        return self._hf

    @property
    def eos_id(self) -> int:
        return int(self._hf.eos_token_id)

    @property
    def pad_id(self) -> int:
        """The pad token's id, or eos when the tokenizer defines no pad (pad positions are masked anyway)."""
        pad = self._hf.pad_token_id
        return int(pad) if pad is not None else self.eos_id

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a response: eos, generation_config.json's eos ids, then ChatML end tokens; no repeats."""
        return self._stop_ids

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can emit, added tokens included; a model's embedding needs at least this."""
        return len(self._hf)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self._hf, "chat_template", None))

    def token_to_id(self, token: str) -> int | None:
        """The id of vocabulary entry `token` (e.g. '<think>'), or None when absent."""
        return self._vocab.get(token)

    # ------------------------------------------------------------------------------------------------ rendering
    def render_prompt(self, user_text: str, *, system: str | None = None, assistant_prefix: str = "",
                      **template_kwargs: Any) -> str:
        """The text the model sees before it answers `user_text`, ending at the start of its reply.

        Goes through the chat template (with the generation prompt) when the tokenizer has one, else through a plain
        "User: ... / Assistant:" format. `assistant_prefix` is appended after the generation prompt, so that the
        first tokens of the response can be teacher-forced (CURE writes the verdict there). Extra keyword arguments
        reach the template (e.g. `enable_thinking=False`).
        """
        if not isinstance(user_text, str):
            raise TypeError(f"user_text must be a str, got {type(user_text).__name__}.")
        if self.has_chat_template:
            messages = []
            if system is not None:
                messages.append({"role": "system", "content": system})
            messages.append({"role": "user", "content": user_text})
            kwargs = {**self._chat_template_kwargs, **template_kwargs}
            text = self._hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
        else:
            if template_kwargs:
                raise ValueError(f"Template kwargs {sorted(template_kwargs)} were given but the tokenizer has no "
                                 "chat template to pass them to.")
            head = f"{system}\n\n" if system is not None else ""
            text = f"{head}User: {user_text}\nAssistant: "
        return text + assistant_prefix

    def render_env_turn(self, content: str, *, role: str = "tool") -> str:
        """The text between a model reply cut mid-turn (at a tool call) and its next reply: the end of the model's
        turn, an environment turn `content` in `role`, and the start of the model's next turn, as the chat template
        writes them (the part of a rendered conversation after the assistant's text). Without a template, plain
        "User: ... / Assistant:" lines."""
        if not self.has_chat_template:
            return f"\nUser: {content}\nAssistant: "
        marker = "\x00MODEL_TURN\x00"
        messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": marker},
                    {"role": role, "content": content}]
        text = self._hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                            **self._chat_template_kwargs)
        if marker not in text:
            raise ValueError("the chat template does not write the assistant's text verbatim; environment turns "
                             "cannot be placed after it")
        return text[text.index(marker) + len(marker):]

    # ------------------------------------------------------------------------------------------------- encoding
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; no bos/eos is added. Special-token strings in `text` map to their ids."""
        return list(self._hf.encode(text, add_special_tokens=False))

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """`encode(text)` and, per token, the [start, end) character span of `text` it covers."""
        enc = self._hf(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def encode_ragged(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (no special tokens added), unpadded."""
        if isinstance(texts, str):
            raise TypeError("encode_ragged takes a sequence of strings, got a single str; wrap it in a list.")
        if not texts:
            return []
        return [list(ids) for ids in self._hf(list(texts), add_special_tokens=False)["input_ids"]]

    def encode_prompts(self, texts: Sequence[str], *, max_length: int | None = None,
                       pad_multiple: int | None = None) -> PromptBatch:
        """Encodes rendered prompts into one left-padded batch.

        The width is the longest prompt rounded up to `pad_multiple` (so a few widths cover many batches and the
        sampler compiles few shapes), capped at `max_length`; `pad_multiple=max_length` gives a fixed width. A prompt
        longer than `max_length` is an error, never silently truncated: a cut prompt loses the question or the
        generation prompt.
        """
        if isinstance(texts, str):
            raise TypeError("encode_prompts takes a sequence of strings, got a single str; wrap it in a list.")
        if len(texts) == 0:
            raise ValueError("encode_prompts got an empty list of prompts; pass at least one prompt.")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be a positive int or None, got {max_length}.")
        if pad_multiple is not None and pad_multiple < 1:
            raise ValueError(f"pad_multiple must be a positive int or None, got {pad_multiple}.")
        ids = self.encode_ragged(texts)
        lengths = np.array([len(row) for row in ids], dtype=np.int32)
        for i, n in enumerate(lengths):
            if n == 0:
                raise ValueError(f"Prompt {i} encodes to 0 tokens (text {texts[i]!r}); every prompt needs at least "
                                 "one token for the sampler to condition on.")
            if max_length is not None and n > max_length:
                raise ValueError(f"Prompt {i} has {n} tokens, more than max_length={max_length}; raise max_length "
                                 "or shorten/filter the prompt.")
        width = int(lengths.max())
        if pad_multiple is not None:
            width = -(-width // pad_multiple) * pad_multiple
        if max_length is not None:
            width = min(width, max_length)
        tokens = np.full((len(ids), width), self.pad_id, dtype=np.int32)
        for i, row in enumerate(ids):
            tokens[i, width - len(row):] = row
        return PromptBatch(tokens=tokens, lengths=lengths)

    # ------------------------------------------------------------------------------------------------- decoding
    def decode(self, ids: Sequence[int] | np.ndarray, *, skip_special_tokens: bool = False) -> str:
        """Text of one sequence of ids [time]; use `batch_decode` for [batch, time]."""
        ids = np.asarray(ids)
        if ids.ndim != 1:
            raise ValueError(f"decode takes one sequence of ids [time], got shape {ids.shape}; use batch_decode for "
                             "[batch, time].")
        return self._hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def batch_decode(self, ids: Sequence[Sequence[int]] | np.ndarray, *, lengths: Sequence[int] | None = None,
                     skip_special_tokens: bool = False) -> list[str]:
        """Decodes each row; with `lengths` [batch], row i is cut to its first `lengths[i]` ids (sampler output)."""
        rows = [np.asarray(row) for row in ids]
        if lengths is not None:
            lengths = [int(n) for n in np.asarray(lengths).reshape(-1)]
            if len(lengths) != len(rows):
                raise ValueError(f"batch_decode got {len(rows)} rows but {len(lengths)} lengths; pass one length "
                                 "per row.")
            rows = [row[:n] for row, n in zip(rows, lengths)]
        return [self.decode(row, skip_special_tokens=skip_special_tokens) for row in rows]

    # ------------------------------------------------------------------------------------------ verifier tokens
    def single_token_id(self, word: str, *, after_generation_prompt: bool = True) -> int:
        """The id of `word` as one token, as the model would emit it at the start of its reply.

        BPE splits depend on context (a leading space or newline changes the pieces), so by default the word is
        tokenized right after a rendered prompt and the ids are diffed. Raises when the word is not exactly one token
        there, because a one-token verdict is what the verifier scores.
        """
        if not word:
            raise ValueError("single_token_id needs a non-empty word.")
        if after_generation_prompt:
            prefix = self.render_prompt("Is this correct?")
            prefix_ids = self.encode(prefix)
            full_ids = self.encode(prefix + word)
            if full_ids[:len(prefix_ids)] != prefix_ids:
                raise ValueError(f"{word!r} merges with the end of the generation prompt {prefix[-20:]!r}, so it has "
                                 "no token of its own there.")
            word_ids = full_ids[len(prefix_ids):]
        else:
            word_ids = self.encode(word)
        if len(word_ids) != 1:
            pieces = [self._hf.convert_ids_to_tokens(i) for i in word_ids]
            raise ValueError(f"{word!r} is {len(word_ids)} tokens {pieces} (ids {word_ids}) at the start of a reply, "
                             "not one; pick a word the vocabulary holds as a single token.")
        return int(word_ids[0])

    # ---------------------------------------------------------------------------------------------------- saving
    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Writes the tokenizer files (and generation_config.json if one was loaded) into directory `path`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._hf.save_pretrained(str(path))
        # transformers 5 records how this copy was loaded; that says nothing about the saved files, so drop it.
        config_path = path / "tokenizer_config.json"
        if config_path.is_file():
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
            if any(k in config for k in _LOAD_TIME_KEYS):
                for k in _LOAD_TIME_KEYS:
                    config.pop(k, None)
                with open(config_path, "w", encoding="utf-8") as f:
                    json.dump(config, f, indent=2, ensure_ascii=False)
                    f.write("\n")
        if self._generation_config is not None:
            with open(path / "generation_config.json", "w", encoding="utf-8") as f:
                json.dump(self._generation_config, f, indent=2, sort_keys=True)

    def __repr__(self) -> str:
        return (f"Tokenizer({type(self._hf).__name__}, vocab_size={self.vocab_size}, eos_id={self.eos_id}, "
                f"pad_id={self.pad_id}, stop_ids={self.stop_ids}, chat_template={self.has_chat_template})")
