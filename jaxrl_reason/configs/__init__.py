"""Run presets: plain Python modules, each with a get_config() that starts from
`experiment.config.default_config()` (every knob at its default) and sets what its run departs from, with why.
The files under experiments/configs/ are these presets under the paths the commands use.

`load_config_file` loads any config file by path (and applies `--config.x=y` overrides), for the scripts that take
a config and for configs that extend a config file that is not a preset.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Sequence


def load_config_file(path: str, overrides: Sequence[str] = ()):
    """The get_config() of the config file at `path`, with `--config.a.b=value` overrides applied by
    ml_collections' own flag parser (so a value parses exactly as it does on experiments/train.py's command line)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no config file {path}")
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
