"""docs/extending.md's examples run as written: each fenced python block executes on its own, without any edit
to a library file, and is at most 30 lines of user code."""
import os
import re

import pytest

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "extending.md")


def _blocks():
    text = open(PAGE).read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_page_has_the_three_examples():
    assert len(_blocks()) == 3


@pytest.fixture
def registries():
    """The examples register a term kind, an estimator and a task; other tests must not see them."""
    from jaxrl_reason.rl.advantages import ESTIMATORS
    from jaxrl_reason.rl.batch import TASKS
    from jaxrl_reason.rl.losses import TERM_KINDS

    saved = [(d, dict(d)) for d in (ESTIMATORS, TASKS, TERM_KINDS)]
    yield
    for d, old in saved:
        d.clear()
        d.update(old)


@pytest.mark.parametrize("i", range(3), ids=["loss_term", "estimator", "method"])
def test_example_runs(i, registries):
    code = _blocks()[i]
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) <= 30 + 8, f"example {i} has {len(lines)} lines"  # 30 of user code, plus its checks
    exec(compile(code, f"docs/extending.md[{i}]", "exec"), {"__name__": f"extending_example_{i}"})
