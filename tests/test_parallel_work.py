"""Data and FSDP parallelism divide the work: every executable of an RL step, compiled for 4 simulated CPU devices,
does about a quarter of one device's FLOPs on a quarter of its rows and holds a fraction of its temporaries
(tests/parallel_work_checks.py, in a subprocess). Equal results alone once hid an update in which every device
computed every row: the row-split batch was stacked into micro-batches along the split, so each micro-batch sat
on one device and was gathered to all (`rl.batch.stack_micro_batches`, before its `groups`)."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_reason.rl.batch import build_token_batch, scored_size, stack_micro_batches

HERE = os.path.dirname(os.path.abspath(__file__))
SHARDED = ("data", "fsdp")
ROW_EXECUTABLES = ("update_mb4", "update_mb1", "ppo_update_mb2", "reference", "verdict")
SAMPLER = ("prefill", "decode")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel_work") / "results.json"
    sys.path.insert(0, HERE)
    from processes import cpu_devices_env

    proc = subprocess.run([sys.executable, os.path.join(HERE, "parallel_work_checks.py"), str(out)],
                          env=cpu_devices_env(4), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def ratio(work, mesh, executable, field):
    return work[mesh][executable][field] / work["one"][executable][field]


@pytest.mark.slow
@pytest.mark.parametrize("executable", ROW_EXECUTABLES + SAMPLER)
@pytest.mark.parametrize("mesh", SHARDED)
def test_each_device_computes_a_quarter_of_the_rows(work, mesh, executable):
    assert ratio(work, mesh, executable, "flops") <= 0.35
    one, four = work["one"][executable]["attention_rows"], work[mesh][executable]["attention_rows"]
    assert four * 4 == one, (one, four)  # the attention dots see a quarter of the rows on each device


@pytest.mark.slow
@pytest.mark.parametrize("executable", ROW_EXECUTABLES + ("prefill",))
@pytest.mark.parametrize("mesh", SHARDED)
def test_each_device_holds_a_fraction_of_the_temporaries(work, mesh, executable):
    assert ratio(work, mesh, executable, "temp") <= 0.5


@pytest.mark.slow
@pytest.mark.parametrize("mesh", SHARDED)
def test_the_sampler_kv_cache_is_split_by_rows(work, mesh):
    # The decode loop's temporaries are its per-layer weight slices (parameter-sized under `data`, gathered under
    # `fsdp`); what grows with rows is the carried KV cache, an output of prefill and the state of decode.
    for executable in SAMPLER:
        assert ratio(work, mesh, executable, "output") <= 0.3


@pytest.mark.slow
def test_data_parallel_programs_gather_nothing(work):
    # Rows stay where they are: no all-gather at all under pure data parallelism (gradients are all-reduced).
    for executable in ROW_EXECUTABLES + SAMPLER:
        assert work["data"][executable]["all_gathers"] == 0, executable


def test_micro_batches_take_a_slice_of_every_row_group():
    """Group g (a device's block of rows) contributes its i-th slice to micro-batch i; one group is the plain
    contiguous split, so one device is unchanged."""
    rows = 16
    batch = build_token_batch([[1, 2]] * rows, [[3, 4, 5]] * rows, np.arange(rows, dtype=np.float32), None,
                              "solve", length=8)
    batch = jax.tree.map(jnp.asarray, batch)
    grouped = stack_micro_batches(batch, 2, groups=4)
    np.testing.assert_array_equal(grouped.advantages.max(-1), [[0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15]])
    plain = stack_micro_batches(batch, 2)
    np.testing.assert_array_equal(plain.advantages.max(-1), np.arange(rows).reshape(2, 8))
    # The update's scored-position sizing reads the same micro-batch x group blocks.
    assert scored_size(batch, 2, 4) == scored_size(batch, 8)
    with pytest.raises(ValueError, match="pad_rows_to"):
        stack_micro_batches(batch, 3, groups=2)
