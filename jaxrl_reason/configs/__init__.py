"""Run presets: plain Python modules, each with a get_config() that starts from
`experiment.config.default_config()` (every knob at its default) and sets what its run departs from, with why.

A command names a preset by its name or by its path, the two spellings of one file:

    python experiments/train.py --config grpo
    python experiments/train.py --config jaxrl_reason/configs/grpo.py

`config_path` resolves either (or the path of any other config file); `load_config_file` loads one (and applies
`--config.x=y` overrides), for the scripts that take a config and for configs that extend a file that is not a
preset.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Sequence

import ml_collections


PRESET_DIR = os.path.dirname(os.path.abspath(__file__))


def presets() -> list[str]:
    """The presets' names (the modules of this package)."""
    return sorted(f[:-3] for f in os.listdir(PRESET_DIR) if f.endswith(".py") and not f.startswith("_"))


def config_path(spec: str) -> str:
    """A preset's name (`grpo`) or a config file's path -> the file's path."""
    if os.path.isfile(spec):
        return spec
    if spec in presets():
        return os.path.join(PRESET_DIR, f"{spec}.py")
    raise FileNotFoundError(f"no config file {spec!r} and no preset of that name; give a path or one of the "
                            f"presets in jaxrl_reason/configs/: {', '.join(presets())}")


def config_argv(argv: Sequence[str], flag: str = "config") -> list[str]:
    """`argv` with the value of `--<flag> NAME` / `--<flag>=NAME` resolved by `config_path`, so that a script whose
    flag is ml_collections' DEFINE_config_file (which reads a path) also takes a preset's name."""
    out, argv = [], list(argv)
    for i, a in enumerate(argv):
        if i and argv[i - 1] in (f"--{flag}", f"-{flag}"):
            a = config_path(a)
        elif a.startswith(f"--{flag}="):
            a = f"--{flag}=" + config_path(a.split("=", 1)[1])
        out.append(a)
    return out


def fsdp_over_devices(device_memory_gb: float, *, distributed: bool = False, **plan) -> ml_collections.ConfigDict:
    """An accelerator preset's `parallel` section: the policy sharded (fsdp) over every device of the launch, on
    devices of `device_memory_gb`; distributed: join the other hosts' processes (a pod), else one process drives
    its host's devices; plan: the batch the mesh was planned for (`train_rows`, `sample_rows`, `context`,
    `prompt_tokens`), which preflight and the tests re-check against the memory."""
    out = ml_collections.ConfigDict({"mesh_shape": {"data": 1, "fsdp": -1, "tp": 1}, "distributed": distributed,
                                     "device_memory_gb": device_memory_gb})
    if plan:
        out.plan = ml_collections.ConfigDict(plan)
    return out


def load_config_file(path: str, overrides: Sequence[str] = ()):
    """The get_config() of the config file at `path` (or of the preset of that name), with `--config.a.b=value`
    overrides applied by ml_collections' own flag parser (so a value parses exactly as it does on
    experiments/train.py's command line)."""
    path = config_path(path)
    spec = importlib.util.spec_from_file_location(f"config_file_{abs(hash(os.path.abspath(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config()
    if not overrides:
        return cfg
    from absl import flags
    from ml_collections import config_flags

    argv = ["load_config_file"] + list(overrides)
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_dict("config", cfg, flag_values=flag_values, sys_argv=argv)  # argv: the overrides
    flag_values(argv)
    return flag_values.config
