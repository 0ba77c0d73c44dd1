"""Methods turn rollouts into task rows; `make_method(config)` builds one from a config's `method` section.

The section, typed as `MethodConfig`, holds four kinds of knobs, each checked against its own source of truth
before anything is built: `name` and `estimator` (the registries), the loss (`PolicyLossConfig`'s fields, flat in
the section), `extra` (the method's own constructor keywords) and `estimator_kwargs` (the estimator's keywords).

A method brings its own loss (`default_loss` on its class, e.g. CURE's paper loss): a loss knob the section leaves
unset (None, as `default_config()` writes every one) takes the method's value, so `--config.method.name=cure` on a
GRPO config trains CURE's loss, and `--config.method.beta=0.01` changes that one knob of it (`method_loss`).
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Mapping, Optional

from jaxrl_reason.knobs import check_known, keyword_knobs, plain, read_section, section_dict
from jaxrl_reason.methods.cipo import CIPO, CIPOV
from jaxrl_reason.methods.cure import CURE
from jaxrl_reason.methods.distill import DistillConfig, with_distillation
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.rl.policy_losses import VERL_NAMES
from jaxrl_reason.methods.ppo import PPO, PPOV
from jaxrl_reason.methods.rlv import RLV
from jaxrl_reason.methods.self_check import SelfCheck
from jaxrl_reason.methods.vineppo import VinePPO, VinePPOV
from jaxrl_reason.rl.advantages import ESTIMATORS

METHODS = {"grpo": GRPO, "rlv": RLV, "cure": CURE, "cipo": CIPO, "cipo_v": CIPOV, "vineppo": VinePPO,
           "vineppo_v": VinePPOV, "ppo": PPO, "ppo_v": PPOV, "self_check": SelfCheck}


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """The `method` section of a run config."""

    # grpo | rlv | cure | cipo | cipo_v | vineppo | vineppo_v | ppo | ppo_v | self_check (docs/methods/README.md)
    name: str = "grpo"
    estimator: str = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp | grpo_batch_std (rl.advantages.ESTIMATORS)
    estimator_kwargs: Mapping = dataclasses.field(default_factory=dict)  # the estimator's keywords, e.g. {"ddof": 0}
    extra: Mapping = dataclasses.field(default_factory=dict)  # the method's own knobs (method_knobs(name))
    # flat in the section (method.beta); None: the method's own (its class's `default_loss`)
    loss: Optional[PolicyLossConfig] = None
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


# The knobs that belong to one policy loss: a config that names another loss starts them from their defaults,
# not from the method's (CURE's PPO-clip eps_high 0.28 is no knob of GSPO).
_OWN_KNOBS_OF_A_LOSS = ("eps_low", "eps_high", "dual_clip", "policy_loss_kwargs")


def method_loss(name: str, knobs: Mapping) -> PolicyLossConfig:
    """Method `name`'s loss with the loss knobs a `method` section sets (`knobs`, flat; a knob at None, or an
    empty `policy_loss_kwargs`, is unset) in place of its own. Naming another `policy_loss` than the method's also
    resets that loss's own knobs (`eps_low`, `eps_high`, `dual_clip`, `policy_loss_kwargs`) to their defaults."""
    own = METHODS[name].default_loss
    knobs = {k: v for k, v in plain(knobs).items() if v is not None and not (k == "policy_loss_kwargs" and not v)}
    check_known("method", knobs, _loss_keys())
    base = section_dict(own)
    if "policy_loss" in knobs and VERL_NAMES.get(knobs["policy_loss"], knobs["policy_loss"]) != own.policy_loss:
        base.update({k: v for k, v in section_dict(PolicyLossConfig()).items() if k in _OWN_KNOBS_OF_A_LOSS})
    return read_section(PolicyLossConfig, "method", {**base, **knobs})


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
    loss = method_loss(name, {k: v for k, v in values.items() if k not in own})
    distill = read_section(DistillConfig, "method.distill", values.get("distill"))
    return MethodConfig(name=name, estimator=estimator, estimator_kwargs=kwargs, extra=extra, loss=loss,
                        distill=distill)


def method_section(config: MethodConfig) -> dict:
    """A MethodConfig as the plain dict of its config section (the loss knobs flat, as `read_method_config` reads
    them). A loss at None (the method's own) is written as its knobs at None, unset
    (`experiment.config.default_config` types them, so that `--config.method.<knob>=v` can still set them)."""
    out = {k: getattr(config, k) for k in ("name", "estimator")}
    out.update(estimator_kwargs=dict(config.estimator_kwargs), extra=dict(config.extra),
               distill=section_dict(config.distill))
    if config.loss is not None:
        return {**out, **section_dict(config.loss)}
    return {**out, **{k: None for k in _loss_keys()}, "policy_loss_kwargs": {}}


def make_method(cfg, teacher=None):
    """cfg: a MethodConfig, or a `method` section (ConfigDict/dict: `name`, `estimator`, `estimator_kwargs`,
    `extra`, `distill` and the PolicyLossConfig fields), checked by `read_method_config` first; a loss the config
    leaves unset is the method class's own (`default_loss`). teacher: an
    in-memory distillation teacher (a model), used in place of `distill.teacher`'s checkpoint."""
    mc = cfg if isinstance(cfg, MethodConfig) else read_method_config(cfg)
    # Both keyword sets go into one call: the checks above keep them apart (no key is valid in both).
    method = METHODS[mc.name](estimator=mc.estimator, loss=mc.loss, **dict(mc.estimator_kwargs), **dict(mc.extra))
    return with_distillation(method, mc.distill, teacher)
