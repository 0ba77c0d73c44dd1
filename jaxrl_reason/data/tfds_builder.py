"""A `tensorflow-datasets` builder over local JSONL files, usable without TensorFlow.

tensorflow-datasets >= 4.9 can write and read the `array_record` file format with no TensorFlow installed
(`builder.as_data_source(split)` gives random access to decoded records), so this module depends only on
`tensorflow-datasets` itself, imported lazily: nothing else in jaxrl_reason needs it.

  builder = jsonl_tfds_builder({"train": "train.jsonl", "test": "test.jsonl"}, data_dir="~/tfds")
  builder.download_and_prepare()          # validates every row (same errors as load_jsonl), writes array_record
  train = tfds_examples(builder, "train")  # list[Example]
  later: tfds_examples(load_prepared(builder.data_dir), "train")   # no source files or builder class needed

Each distinct set of source files and field settings gets its own builder config (a content hash), so preparing
another file set under the same data_dir never reuses stale data.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from jaxrl_reason.data.datasets import Example, FieldSpec, _check_unique_ids, iter_jsonl

_INSTALL_HINT = ("tensorflow-datasets is not installed; `pip install tensorflow-datasets>=4.9.8` (it pulls "
                 "array_record but not TensorFlow), or read the JSONL directly with load_jsonl.")


def _tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:  # pragma: no cover - exercised only without the optional dependency
        raise ImportError(_INSTALL_HINT) from e
    return tfds


def _as_file_lists(split_files: Mapping[str, str | os.PathLike | Sequence[str | os.PathLike]]
                   ) -> dict[str, list[str]]:
    out = {}
    for split, files in split_files.items():
        paths = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        if not paths:
            raise ValueError(f"split {split!r} lists no files.")
        resolved = []
        for p in paths:
            p = Path(p).expanduser().resolve()
            if not p.is_file():
                raise FileNotFoundError(f"split {split!r}: {p} does not exist.")
            resolved.append(str(p))
        out[split] = resolved
    if not out:
        raise ValueError("split_files is empty; map at least one split name to a JSONL file.")
    return out


def _config_name(files: Mapping[str, list[str]], spec: FieldSpec) -> str:
    h = hashlib.sha256()
    for split in sorted(files):
        h.update(split.encode())
        for path in files[split]:
            h.update(path.encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    if spec.answer_transform is not None:
        transform = getattr(spec.answer_transform, "__qualname__", repr(spec.answer_transform))
    else:
        transform = ""
    h.update(json.dumps([spec.question_field, spec.answer_field, spec.id_field, spec.solution_field,
                         list(spec.meta_fields), transform]).encode())
    return "jsonl_" + h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _builder_class():
    tfds = _tfds()

    class JsonlQa(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Question/answer examples from local JSONL files (see module docstring)."""

        VERSION = tfds.core.Version("1.0.0")
        RELEASE_NOTES = {"1.0.0": "question, answer, id, solution, meta_json."}
        # No code directory: tfds would otherwise look for (and write) a download-checksums file next to this
        # module, and its lookup imports the undeclared `importlib_resources` package.
        code_path = None

        def __init__(self, *, split_files: Mapping[str, list[str]], spec: FieldSpec, **kwargs):
            self._split_files = dict(split_files)
            self._spec = spec
            super().__init__(**kwargs)

        def _info(self):
            text = tfds.features.Text()
            return tfds.core.DatasetInfo(
                builder=self,
                description="Question/answer examples converted from local JSONL files by jaxrl_reason.",
                features=tfds.features.FeaturesDict({
                    "question": text, "answer": text, "id": text, "solution": text, "meta_json": text}),
                supervised_keys=None)

        def _split_generators(self, dl_manager):
            del dl_manager  # local files only: nothing is downloaded
            return {split: self._generate_examples(files) for split, files in self._split_files.items()}

        def _generate_examples(self, files):
            examples = [ex for path in files for ex in iter_jsonl(path, self._spec)]
            # tfds keys must be unique per split; a clash means the id_field is not an id.
            _check_unique_ids(examples, ", ".join(files))
            for ex in examples:
                yield ex.id, {"question": ex.question, "answer": ex.answer, "id": ex.id,
                              "solution": ex.solution or "", "meta_json": json.dumps(dict(ex.meta))}

    return JsonlQa


def jsonl_tfds_builder(split_files: Mapping[str, str | os.PathLike | Sequence[str | os.PathLike]],
                       data_dir: str | os.PathLike, *, spec: FieldSpec | None = None,
                       file_format: str = "array_record", **fields: Any):
    """A tfds builder whose splits are the given JSONL files (one path or a list per split).

    Field keywords are those of `FieldSpec` (question_field, answer_field, id_field, ...). Call
    `download_and_prepare()` on the result (it reads only the local files) before `tfds_examples`.
    `file_format="tfrecord"` also works but then reading needs TensorFlow.
    """
    if spec is not None and fields:
        raise TypeError("pass either spec=FieldSpec(...) or field keyword arguments, not both.")
    spec = spec or FieldSpec(**fields)
    files = _as_file_lists(split_files)
    tfds = _tfds()
    cls = _builder_class()
    config = tfds.core.BuilderConfig(name=_config_name(files, spec), description="local JSONL files")
    return cls(split_files=files, spec=spec, config=config, data_dir=os.fspath(Path(data_dir).expanduser()),
               file_format=file_format)


def load_prepared(dataset_dir: str | os.PathLike):
    """A read-only builder for a prepared directory (`builder.data_dir`), without the source files."""
    return _tfds().builder_from_directory(os.fspath(dataset_dir))


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def tfds_examples(builder, split: str) -> list[Example]:
    """The Examples of one prepared split, in the data source's (deterministic) order."""
    source = builder.as_data_source(split=split)
    out = []
    for record in source:
        meta = json.loads(_text(record["meta_json"]))
        solution = _text(record["solution"]) or None
        out.append(Example(question=_text(record["question"]), answer=_text(record["answer"]),
                           id=_text(record["id"]), solution=solution, meta=meta))
    return out
