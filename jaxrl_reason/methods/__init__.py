"""Methods turn rollouts into task rows; `make_method(config)` builds one from a config's `method` section.

The section, typed as `MethodConfig`, holds four kinds of knobs, each checked against its own source of truth
before anything is built: `name` and `estimator` (the registries), the loss (`PolicyLossConfig`'s fields, flat in
the section), `extra` (the method's own constructor keywords) and `estimator_kwargs` (the estimator's keywords).
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Mapping

from jaxrl_reason.knobs import check_known, keyword_knobs, plain, read_section, section_dict
from jaxrl_reason.methods.cipo import CIPO, CIPOV
from jaxrl_reason.methods.cure import CURE
from jaxrl_reason.methods.distill import DistillConfig, with_distillation
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.methods.ppo import PPO, PPOV
from jaxrl_reason.methods.rlv import RLV
from jaxrl_reason.methods.vineppo import VinePPO, VinePPOV
from jaxrl_reason.rl.advantages import ESTIMATORS

METHODS = {"grpo": GRPO, "rlv": RLV, "cure": CURE, "cipo": CIPO, "cipo_v": CIPOV, "vineppo": VinePPO,
           "vineppo_v": VinePPOV, "ppo": PPO, "ppo_v": PPOV}


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """The `method` section of a run config."""

    name: str = "grpo"  # grpo | rlv | cure | cipo | cipo_v | vineppo | vineppo_v | ppo | ppo_v (docs/methods/README.md)
    estimator: str = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp | grpo_batch_std (rl.advantages.ESTIMATORS)
    estimator_kwargs: Mapping = dataclasses.field(default_factory=dict)  # the estimator's keywords, e.g. {"ddof": 0}
    extra: Mapping = dataclasses.field(default_factory=dict)  # the method's own knobs (method_knobs(name))
    loss: PolicyLossConfig = dataclasses.field(default_factory=PolicyLossConfig)  # flat in the section: method.beta
    distill: DistillConfig = dataclasses.field(default_factory=DistillConfig)  # on-policy distillation (method.distill.teacher)


def method_knobs(name: str) -> dict:
    """{knob: default} of method `name`'s own constructor keywords: the valid keys of `method.extra`. A union of
    methods (e.g. `cipo_v`, CIPO + RLV) declares each knob once, in its own class: the constructors along the MRO
    are read as long as each forwards its **kwargs on (GRPO's are the estimator's, checked separately)."""
    out: dict = {}
    for cls in METHODS[name].__mro__:
        init = vars(cls).get("__init__")
        if init is None or cls is GRPO:
            continue
        for k, v in keyword_knobs(init, skip=("self", "estimator", "loss")).items():
            out.setdefault(k, v)
        if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()):
            break
    return out


def estimator_knobs(estimator: str) -> dict:
    """{knob: default} of an advantage estimator's keyword options: the valid keys of `method.estimator_kwargs`."""
    return keyword_knobs(ESTIMATORS[estimator], keyword_only=True)


def _loss_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(PolicyLossConfig)]


def read_method_config(values) -> MethodConfig:
    """A `method` section (ConfigDict or mapping) as a MethodConfig; any key that is not a knob of the section, of
    the named method (`extra`) or of the named estimator (`estimator_kwargs`) is refused, naming the valid ones."""
    values = plain(values)
    default = MethodConfig()
    own = ("name", "estimator", "estimator_kwargs", "extra", "distill")
    check_known("method", values, list(own) + _loss_keys())
    name, estimator = values.get("name", default.name), values.get("estimator", default.estimator)
    if name not in METHODS:
        raise ValueError(f"config method.name={name!r} is unknown; available: {sorted(METHODS)}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"config method.estimator={estimator!r} is unknown; available: {sorted(ESTIMATORS)}")
    extra, kwargs = plain(values.get("extra")), plain(values.get("estimator_kwargs"))
    removed = getattr(METHODS[name], "removed_knobs", {})
    gone = sorted(set(extra) & set(removed))
    if gone:
        raise ValueError("; ".join(f"config method.extra.{k} was removed (method {name!r}): {removed[k]}"
                                   for k in gone))
    check_known("method.extra", extra, method_knobs(name), what=f"method {name!r}")
    check_known("method.estimator_kwargs", kwargs, estimator_knobs(estimator), what=f"estimator {estimator!r}")
    loss = read_section(PolicyLossConfig, "method", {k: v for k, v in values.items() if k not in own})
    distill = read_section(DistillConfig, "method.distill", values.get("distill"))
    return MethodConfig(name=name, estimator=estimator, estimator_kwargs=kwargs, extra=extra, loss=loss,
                        distill=distill)


def method_section(config: MethodConfig) -> dict:
    """A MethodConfig as the plain dict of its config section (the loss knobs flat, as `read_method_config` reads
    them)."""
    out = {k: getattr(config, k) for k in ("name", "estimator")}
    out.update(estimator_kwargs=dict(config.estimator_kwargs), extra=dict(config.extra),
               distill=section_dict(config.distill))
    return {**out, **section_dict(config.loss)}


def make_method(cfg, teacher=None):
    """cfg: a MethodConfig, or a `method` section (ConfigDict/dict: `name`, `estimator`, `estimator_kwargs`,
    `extra`, `distill` and the PolicyLossConfig fields), checked by `read_method_config` first. teacher: an
    in-memory distillation teacher (a model), used in place of `distill.teacher`'s checkpoint."""
    mc = cfg if isinstance(cfg, MethodConfig) else read_method_config(cfg)
    # Both keyword sets go into one call: the checks above keep them apart (no key is valid in both).
    method = METHODS[mc.name](estimator=mc.estimator, loss=mc.loss, **dict(mc.estimator_kwargs), **dict(mc.extra))
    return with_distillation(method, mc.distill, teacher)
