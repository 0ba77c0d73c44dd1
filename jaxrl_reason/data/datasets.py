"""Datasets of (question, answer) examples: local files, deterministic splits, and a resumable epoch iterator.

Sources:
  load_jsonl / load_parquet / load_hf_disk / load_examples   local files (no network, ever)
  arithmetic.arithmetic_examples                             built-in generator with worked solutions
  procedural.reasoning_gym_examples                          reasoning-gym tasks (offline)
  tfds_builder.JsonlQA                                       a tensorflow-datasets builder over local JSONL

Every malformed row fails with a `DatasetFormatError` naming the file, the 1-based line (JSONL) or row (Parquet,
Arrow) and the field, so a bad file is fixed in one edit rather than found by a crash mid-training.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Example:
    """One problem.

    question: the problem text (no instruction suffix: templates in `prompts.py` add those).
    answer: the gold final answer as text (`42`, `\\frac{1}{2}`, a reasoning-gym answer string).
    id: stable identifier, unique within its source.
    solution: an optional worked solution ending in `\\boxed{answer}`, for SFT warm-up.
    meta: free-form provenance (source name, generator settings, a reasoning-gym entry, ...).
    """

    question: str
    answer: str
    id: str
    solution: str | None = None
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __hash__(self) -> int:
        # `meta` is a dict and cannot be hashed; equal examples still hash equal since eq compares these too.
        return hash((self.question, self.answer, self.id, self.solution))


_EXAMPLE_FIELDS = frozenset(f.name for f in dataclasses.fields(Example))


class DatasetFormatError(ValueError):
    """A row of a dataset file is malformed; the message names file, row and field."""


def _where(path: str | os.PathLike, row: int, unit: str) -> str:
    return f"{os.fspath(path)}:{unit} {row}"


def get_field(record: Any, dotted: str) -> Any:
    """`record["a"]["b"][0]` for `dotted = "a.b.0"`; raises KeyError naming the first missing part."""
    value = record
    for part in dotted.split("."):
        if isinstance(value, Mapping):
            if part not in value:
                raise KeyError(part)
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.lstrip("-").isdigit():
            index = int(part)
            if not -len(value) <= index < len(value):
                raise KeyError(part)
            value = value[index]
        else:
            raise KeyError(part)
    return value


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """Which record fields make an Example. Dotted paths (`"problem.text"`, `"answers.0"`) reach nested values.

    answer_transform maps the raw answer text to the final answer (e.g. `gsm8k_final_answer`); solution_field,
    if set, must name a worked solution; meta_fields are copied into `Example.meta`.
    """

    question_field: str = "question"
    answer_field: str = "answer"
    id_field: str | None = None
    solution_field: str | None = None
    meta_fields: tuple[str, ...] = ()
    answer_transform: Callable[[str], str] | None = None


def gsm8k_final_answer(text: str) -> str:
    """The number after GSM8K's `####` marker, without thousands separators."""
    if "####" not in text:
        raise ValueError("no '####' marker (GSM8K answers end with '#### <number>')")
    return text.rsplit("####", 1)[1].strip().replace(",", "")


def example_from_record(record: Any, spec: FieldSpec, *, where: str, default_id: str,
                        source: str) -> Example:
    """Builds an Example from a decoded record, or raises DatasetFormatError mentioning `where`."""
    if not isinstance(record, Mapping):
        raise DatasetFormatError(f"{where}: expected a JSON object per row, got {type(record).__name__}.")

    def fetch(field: str) -> Any:
        try:
            return get_field(record, field)
        except KeyError as e:
            keys = ", ".join(sorted(map(str, record)))[:200]
            raise DatasetFormatError(
                f"{where}: field '{field}' is missing (no key {e.args[0]!r}; the row has keys: {keys}). "
                f"Fix the row or choose the field with question_field/answer_field.") from None

    question = fetch(spec.question_field)
    if not isinstance(question, str):
        raise DatasetFormatError(f"{where}: field '{spec.question_field}' must be a string, got "
                                 f"{type(question).__name__} ({str(question)[:60]!r}).")
    if not question.strip():
        raise DatasetFormatError(f"{where}: field '{spec.question_field}' is empty.")
    answer = fetch(spec.answer_field)
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise DatasetFormatError(f"{where}: field '{spec.answer_field}' must be a string or a number, got "
                                 f"{type(answer).__name__}; for several gold answers pick one with a dotted path "
                                 f"such as '{spec.answer_field}.0'.")
    answer = str(answer).strip()
    if spec.answer_transform is not None:
        try:
            answer = spec.answer_transform(answer).strip()
        except Exception as e:  # noqa: BLE001 - report any transform failure with its location
            raise DatasetFormatError(f"{where}: field '{spec.answer_field}': answer_transform failed: {e}") from e
    if not answer:
        raise DatasetFormatError(f"{where}: field '{spec.answer_field}' is empty; every example needs a gold "
                                 "answer to be rewarded.")
    solution = None
    if spec.solution_field is not None:
        solution = fetch(spec.solution_field)
        if not isinstance(solution, str) or not solution.strip():
            raise DatasetFormatError(f"{where}: field '{spec.solution_field}' must be a non-empty string.")
    if spec.id_field is not None:
        raw_id = fetch(spec.id_field)
        if raw_id is None or isinstance(raw_id, (dict, list)) or str(raw_id) == "":
            raise DatasetFormatError(f"{where}: field '{spec.id_field}' must be a non-empty scalar id.")
        example_id = str(raw_id)
    else:
        example_id = default_id
    meta: dict[str, Any] = {"source": source}
    for field in spec.meta_fields:
        meta[field] = fetch(field)
    return Example(question=question, answer=answer, id=example_id, solution=solution, meta=meta)


def _spec(spec: FieldSpec | None, kwargs: dict[str, Any]) -> FieldSpec:
    if spec is not None and kwargs:
        raise TypeError("pass either spec=FieldSpec(...) or field keyword arguments, not both.")
    return spec if spec is not None else FieldSpec(**kwargs)


def _check_unique_ids(examples: Sequence[Example], source: str) -> None:
    seen: dict[str, int] = {}
    for i, ex in enumerate(examples):
        if ex.id in seen:
            raise DatasetFormatError(f"{source}: id {ex.id!r} appears in rows {seen[ex.id] + 1} and {i + 1}; "
                                     "ids must be unique (choose another id_field or leave it unset).")
        seen[ex.id] = i


def _example_dump(record: Any, spec: FieldSpec, *, where: str, source: str) -> Example | None:
    """The Example a `write_jsonl` row holds (exactly its five fields, a dict meta), read back whole -- id,
    solution and meta included, so that a run's heldout.jsonl keeps what its reward reads (a testbed task's
    source, a reasoning-gym entry, code tests) -- or None for any other record or a non-default `spec`."""
    if (spec != FieldSpec() or not isinstance(record, Mapping) or set(record) != _EXAMPLE_FIELDS
            or not isinstance(record["meta"], Mapping)):
        return None
    if record["solution"] is not None and not isinstance(record["solution"], str):
        raise DatasetFormatError(f"{where}: field 'solution' must be a string or null.")
    ex = example_from_record(record, FieldSpec(id_field="id"), where=where, default_id="", source=source)
    return dataclasses.replace(ex, solution=record["solution"], meta=dict(record["meta"]))


def iter_jsonl(path: str | os.PathLike, spec: FieldSpec | None = None, **fields: Any) -> Iterator[Example]:
    """Streams Examples from a JSON-lines file; blank lines are skipped but still counted in line numbers. Rows
    written by `write_jsonl` are read back whole when no field spec is given (`_example_dump`)."""
    spec = _spec(spec, fields)
    path = Path(path)
    stem = path.stem
    with open(path, "r", encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = _where(path, line_no, "line")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetFormatError(f"{where}: bad JSON ({e.msg} at column {e.colno}).") from None
            yield (_example_dump(record, spec, where=where, source=str(path))
                   or example_from_record(record, spec, where=where, default_id=f"{stem}:{line_no}",
                                          source=str(path)))


def load_jsonl(path: str | os.PathLike, spec: FieldSpec | None = None, **fields: Any) -> list[Example]:
    """All Examples of a JSON-lines file. Field keywords are those of FieldSpec. Default ids are `<stem>:<line>`."""
    examples = list(iter_jsonl(path, spec, **fields))
    _check_unique_ids(examples, os.fspath(path))
    return examples


def _examples_from_rows(rows: Iterable[Any], spec: FieldSpec, *, path: str, stem: str) -> list[Example]:
    examples = [example_from_record(row, spec, where=_where(path, i, "row"), default_id=f"{stem}:{i}", source=path)
                for i, row in enumerate(rows, start=1)]
    _check_unique_ids(examples, path)
    return examples


def load_parquet(path: str | os.PathLike, spec: FieldSpec | None = None, **fields: Any) -> list[Example]:
    """All Examples of a Parquet file (nested struct/list columns work with dotted paths). Rows are 1-based."""
    import pyarrow.parquet as pq

    spec = _spec(spec, fields)
    table = pq.read_table(path)
    return _examples_from_rows(table.to_pylist(), spec, path=os.fspath(path), stem=Path(path).stem)


def _read_arrow_table(path: Path):
    import pyarrow as pa

    # `datasets` writes Arrow IPC *streams* (not the random-access file format); accept both.
    with pa.memory_map(os.fspath(path), "r") as source:
        try:
            return pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            pass
    with pa.memory_map(os.fspath(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


def load_hf_disk(path: str | os.PathLike, split: str | None = None, spec: FieldSpec | None = None,
                 **fields: Any) -> list[Example]:
    """Examples from a directory written by HF `datasets` `save_to_disk`, read with pyarrow only.

    The format: a `Dataset` directory holds `state.json` (its `_data_files` list names the `.arrow` shards, in
    order) next to `dataset_info.json`; a `DatasetDict` directory holds `dataset_dict.json` (`{"splits": [...]}`)
    and one such directory per split — pass `split` to choose (required when there are several). Rows use
    the table's column order; `indices` mappings (from `.select()` without flatten) are not supported.
    """
    root = Path(path)
    dict_file = root / "dataset_dict.json"
    if dict_file.is_file():
        splits = json.loads(dict_file.read_text())["splits"]
        if split is None:
            if len(splits) != 1:
                raise ValueError(f"{root} is a DatasetDict with splits {splits}; pass split=<one of them>.")
            split = splits[0]
        if split not in splits:
            raise ValueError(f"{root} has splits {splits}, not {split!r}.")
        root = root / split
    elif split is not None:
        if not (root / split / "state.json").is_file():
            raise ValueError(f"{root} is a single Dataset without splits; omit split={split!r}.")
        root = root / split
    state_file = root / "state.json"
    if not state_file.is_file():
        raise FileNotFoundError(f"{root} is not a `save_to_disk` directory: no state.json (nor dataset_dict.json).")
    state = json.loads(state_file.read_text())
    if state.get("_indices_data_files"):
        raise ValueError(f"{root} stores an indices mapping; call `.flatten_indices()` before `save_to_disk`.")
    files = [root / f["filename"] for f in state.get("_data_files", [])]
    if not files:
        raise DatasetFormatError(f"{state_file}: `_data_files` lists no arrow files.")
    spec = _spec(spec, fields)
    rows: list[Any] = []
    for file in files:
        rows.extend(_read_arrow_table(file).to_pylist())
    return _examples_from_rows(rows, spec, path=os.fspath(root), stem=root.name)


def load_examples(path: str | os.PathLike, spec: FieldSpec | None = None, *, split: str | None = None,
                  **fields: Any) -> list[Example]:
    """Dispatches on the path: `.jsonl`/`.json` lines, `.parquet`, or a `save_to_disk` directory."""
    p = Path(path)
    if p.is_dir():
        return load_hf_disk(p, split, spec, **fields)
    if p.suffix in (".jsonl", ".json", ".ndjson"):
        return load_jsonl(p, spec, **fields)
    if p.suffix in (".parquet", ".pq"):
        return load_parquet(p, spec, **fields)
    raise ValueError(f"don't know how to read {p}: expected .jsonl, .parquet or a save_to_disk directory.")


def write_jsonl(examples: Iterable[Example], path: str | os.PathLike) -> None:
    """Writes Examples as JSON lines (question, answer, id, solution, meta); `load_jsonl` / `load_examples`
    without a field spec read them back equal, meta included."""
    with open(path, "w", encoding="utf-8") as f:
        for ex in examples:
            f.write(json.dumps(dataclasses.asdict(ex), ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# Splits
# ----------------------------------------------------------------------------------------------------------------
def question_key(question: str) -> str:
    """Whitespace- and case-normalised question text: what makes two questions 'the same' for splitting."""
    return " ".join(question.split()).casefold()


def heldout_score(question: str, salt: str = "") -> float:
    """A uniform number in [0, 1) determined by the normalised question (and a salt)."""
    digest = hashlib.sha256((salt + "\x00" + question_key(question)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_train_heldout(examples: Sequence[Example], heldout_fraction: float, *,
                        salt: str = "") -> tuple[list[Example], list[Example]]:
    """Deterministic split by a hash of the normalised question: the same question always lands on the same side
    (whatever its id, position or duplicates), so no question is in both. The held-out share is `heldout_fraction`
    in expectation. Input order is kept within each side."""
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1], got {heldout_fraction}.")
    train, heldout = [], []
    for ex in examples:
        (heldout if heldout_score(ex.question, salt) < heldout_fraction else train).append(ex)
    return train, heldout


def dedupe(examples: Iterable[Example]) -> list[Example]:
    """Keeps the first example of each normalised question."""
    seen: set[str] = set()
    out = []
    for ex in examples:
        key = question_key(ex.question)
        if key not in seen:
            seen.add(key)
            out.append(ex)
    return out


# ----------------------------------------------------------------------------------------------------------------
# The resumable iterator
# ----------------------------------------------------------------------------------------------------------------
def dataset_fingerprint(examples: Sequence[Example]) -> str:
    """A short hash of the ids and questions, stored in iterator state so a resume on other data is caught."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(ex.id.encode("utf-8"))
        h.update(b"\x00")
        h.update(ex.question.encode("utf-8"))
        h.update(b"\x01")
    return h.hexdigest()[:16]


def epoch_order(num_examples: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The visiting order of one epoch: a permutation drawn from (seed, epoch) alone, so any epoch can be
    recomputed on resume without replaying the ones before it."""
    if not shuffle:
        return np.arange(num_examples)
    return np.random.default_rng([int(seed), int(epoch)]).permutation(num_examples)


class DataIterator:
    """Batches of Examples over epochs, with exact resumption.

    Each epoch visits the examples in `epoch_order(n, seed, epoch)`. A batch never spans two epochs: with
    `drop_last` (default — compiled steps want one batch shape) an epoch's last partial batch is skipped; otherwise
    it is yielded short. `batch_size` is global; with `process_count > 1` each process receives its contiguous
    `batch_size / process_count` slice of every global batch, so all hosts stay in step.

    `state()` is a small JSON-able dict (epoch, position within the epoch, seed, fingerprint); after
    `restore(state)` the iterator yields exactly the batches the original would have yielded next.
    """

    def __init__(self, examples: Sequence[Example], batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True, num_epochs: int | None = None, process_index: int = 0,
                 process_count: int = 1):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if process_count < 1 or not 0 <= process_index < process_count:
            raise ValueError(f"need 0 <= process_index < process_count, got {process_index}, {process_count}.")
        if batch_size % process_count:
            raise ValueError(f"batch_size {batch_size} is not divisible by process_count {process_count}.")
        if len(examples) == 0:
            raise ValueError("DataIterator needs at least one example.")
        if drop_last and len(examples) < batch_size:
            raise ValueError(f"batch_size {batch_size} exceeds the {len(examples)} examples and drop_last=True "
                             "would yield nothing; lower batch_size or pass drop_last=False.")
        if num_epochs is not None and num_epochs < 0:
            raise ValueError(f"num_epochs must be >= 0 or None, got {num_epochs}.")
        self.examples = examples
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.num_epochs = num_epochs
        self.process_index = int(process_index)
        self.process_count = int(process_count)
        self.fingerprint = dataset_fingerprint(examples)
        self._epoch = 0
        self._position = 0  # examples of the current epoch already consumed (globally)
        self._order = epoch_order(len(examples), self.seed, 0, self.shuffle)

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def batches_per_epoch(self) -> int:
        n = len(self.examples)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _advance_epoch(self) -> None:
        self._epoch += 1
        self._position = 0
        self._order = epoch_order(len(self.examples), self.seed, self._epoch, self.shuffle)

    def __iter__(self) -> "DataIterator":
        return self

    def __next__(self) -> list[Example]:
        n = len(self.examples)
        while True:
            if self.num_epochs is not None and self._epoch >= self.num_epochs:
                raise StopIteration
            left = n - self._position
            if left >= self.batch_size or (left > 0 and not self.drop_last):
                break
            self._advance_epoch()
        take = min(self.batch_size, n - self._position)
        idx = self._order[self._position:self._position + take]
        self._position += take
        per = take // self.process_count if take == self.batch_size else -(-take // self.process_count)
        mine = idx[self.process_index * per:(self.process_index + 1) * per]
        return [self.examples[int(i)] for i in mine]

    def state(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "position": self._position, "seed": self.seed, "shuffle": self.shuffle,
                "num_examples": len(self.examples), "fingerprint": self.fingerprint}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continues from `state`; raises ValueError if it was taken on different data or a different seed."""
        for key in ("epoch", "position", "seed", "fingerprint"):
            if key not in state:
                raise ValueError(f"iterator state lacks '{key}'; it must come from DataIterator.state().")
        if state["fingerprint"] != self.fingerprint:
            raise ValueError(f"iterator state was taken on different data (fingerprint {state['fingerprint']} vs "
                             f"{self.fingerprint}); load the same examples in the same order before restoring.")
        if int(state["seed"]) != self.seed or bool(state.get("shuffle", self.shuffle)) != self.shuffle:
            raise ValueError(f"iterator state has seed={state['seed']}, shuffle={state.get('shuffle')} but this "
                             f"iterator has seed={self.seed}, shuffle={self.shuffle}.")
        position = int(state["position"])
        if not 0 <= position <= len(self.examples):
            raise ValueError(f"iterator state position {position} is outside [0, {len(self.examples)}].")
        self._epoch = int(state["epoch"])
        self._position = position
        self._order = epoch_order(len(self.examples), self.seed, self._epoch, self.shuffle)
