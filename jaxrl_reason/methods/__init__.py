"""Methods turn rollouts into task rows; `make_method(config)` builds one from an ml_collections config."""
from __future__ import annotations

from jaxrl_reason.methods.cure import CURE
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.methods.rlv import RLV

METHODS = {"grpo": GRPO, "rlv": RLV, "cure": CURE}


def make_method(cfg):
    """cfg: a ConfigDict/dict with `name`, `estimator`, `estimator_kwargs` and the PolicyLossConfig fields."""
    name = cfg["name"]
    if name not in METHODS:
        raise ValueError(f"config method.name={name!r} is unknown; available: {sorted(METHODS)}")
    loss = PolicyLossConfig(aggregation=cfg["aggregation"], max_len=cfg.get("max_len") or None,
                            eps_low=cfg["eps_low"], eps_high=cfg["eps_high"], dual_clip=cfg.get("dual_clip") or None,
                            beta=cfg["beta"], kl_estimator=cfg["kl_estimator"], tis=cfg.get("tis", "off"),
                            tis_cap=cfg.get("tis_cap", 2.0), overlong_buffer=cfg.get("overlong_buffer", 0),
                            overlong_penalty=cfg.get("overlong_penalty", 1.0),
                            overlong_filter=cfg.get("overlong_filter", False))
    extra = {k: v for k, v in dict(cfg.get("extra", {}) or {}).items()}
    return METHODS[name](estimator=cfg["estimator"], loss=loss, **dict(cfg.get("estimator_kwargs", {}) or {}),
                         **extra)
