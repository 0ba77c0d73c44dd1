"""Config sections as typed dataclasses: a section may leave a knob out (its default applies) but never names one
the dataclass lacks, so a misspelt knob fails at start-up, naming itself and the valid keys, instead of being
ignored or surfacing as a TypeError deep inside a run.

In an ml_collections config an `Optional[int]` / `Optional[float]` knob whose default is None is written as 0:
a ConfigDict field needs a typed value for `--config.x.y=N` to override it, and 0 is what these knobs have always
meant by "unset" (`logprob_chunk`, `max_len`, `dual_clip`).
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from typing import Any, Iterable, Mapping, Optional


class UnknownKnobError(ValueError):
    """A config section names a key its typed config does not have."""


def plain(values) -> dict:
    """A ConfigDict, a mapping or None as a plain dict (nested sections included)."""
    if values is None:
        return {}
    if hasattr(values, "to_dict"):
        return values.to_dict()
    return dict(values)


def check_known(section: str, keys: Iterable[str], valid: Iterable[str], what: str = "") -> None:
    """Raises UnknownKnobError naming every key of `keys` not in `valid`, a close match, and the valid keys.
    section: the dotted path of the section in the config ("rl", "method.extra"); what: says whose keys they are."""
    valid = sorted(valid)
    unknown = [k for k in keys if k not in valid]
    if not unknown:
        return

    def path(key):
        return f"{section}.{key}" if section else key

    named = []
    for k in unknown:
        # a knob cut short or run on (`hidden`, `mesh`) is a close match even where difflib's ratio is low
        close = [v for v in valid if v.startswith(k) or k.startswith(v)] or difflib.get_close_matches(k, valid, n=1)
        named.append(path(k) + (f" (did you mean {path(close[0])}?)" if close else ""))
    whose = f"{section}{f' ({what})' if what else ''}" if section else "the config's top level"
    raise UnknownKnobError(f"unknown config key{'s' if len(unknown) > 1 else ''} {', '.join(named)}; the valid "
                           f"keys of {whose} are: {', '.join(valid) or '(none)'}")


def _optional_number(hint) -> Optional[type]:
    """int / float for Optional[int] / Optional[float], else None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and rest[0] in (int, float):
            return rest[0]
    return None


def _dataclass_of(hint) -> Optional[type]:
    """The dataclass of a `D` or `Optional[D]` annotation, else None."""
    candidates = [hint] + list(typing.get_args(hint))
    return next((c for c in candidates if dataclasses.is_dataclass(c) and isinstance(c, type)), None)


def read_section(cls, section: str, values, **fixed):
    """`values` (a ConfigDict, mapping or None) as the dataclass `cls`; knobs left out keep their defaults.
    fixed: fields set by the caller, not by this section (e.g. the run's seed); they are not valid keys here."""
    values = plain(values)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in fixed]
    check_known(section, values, names)
    kwargs = dict(fixed)
    for key, value in values.items():
        hint = hints[key]
        sub = _dataclass_of(hint)
        if sub is not None and value is not None:
            value = read_section(sub, f"{section}.{key}" if section else key, value)
        elif _optional_number(hint) is not None and value == 0:
            value = None
        kwargs[key] = value
    return cls(**kwargs)


def section_dict(obj, skip: Iterable[str] = ()) -> dict:
    """A dataclass instance as the plain dict of its config section: Optional numbers at None become 0, nested
    dataclasses nested dicts; a nested section at None is left out (a config adds it when it needs one)."""
    hints = typing.get_type_hints(type(obj))
    out = {}
    for f in dataclasses.fields(obj):
        if not f.init or f.name in skip:
            continue
        value = getattr(obj, f.name)
        if value is None:
            number = _optional_number(hints[f.name])
            if number is None:
                continue
            value = number(0)
        elif dataclasses.is_dataclass(value):
            value = section_dict(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def keyword_knobs(fn, skip: Iterable[str] = (), keyword_only: bool = False) -> dict[str, Any]:
    """{name: default} of the named parameters of a function or class constructor: what a config may pass it by
    keyword. Keywords a functools.partial already binds are left out (they are the partial's identity, e.g. the
    `scale` of `dr_grpo`); so are *args / **kwargs and the names in `skip`.
    keyword_only: only keyword-only parameters (the options of a function whose leading arguments are data)."""
    bound = set(getattr(fn, "keywords", None) or ())
    out = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) or p.name in bound or p.name in skip:
            continue
        if keyword_only and p.kind is not p.KEYWORD_ONLY:
            continue
        out[p.name] = None if p.default is p.empty else p.default
    return out
