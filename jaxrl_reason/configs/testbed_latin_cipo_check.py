"""CIPO on the 4x4 Latin-square testbed with the worked check in the correction, on the 4 x 256 policy: a
correction opens with the task's check of the earlier attempt (each row and column copied, then marked), then the
corrected solution (`data.correction_format = "worked_check"`, a [choice]: docs/methods/cipo.md), so the rewrite
can follow the marks instead of re-solving blind.

    python experiments/research/bench_cipo.py --config jaxrl_reason/configs/testbed_latin_cipo_check.py \
        --workdir runs/bench_cipo_check_s0 --seeds 0

The warm-up is the `testbed_latin_cipo` preset's (25% correction rows of spread injected errors in the SFT) at the
width where the worked check first read the policy's own samples (`testbed_latin_check`, docs/results/testbed.md
run 19), with run 19's check stage posed as corrections: 1,500 steps on the contrast pairs of 4,096 warm-up
questions, each question's worked solution under review (kept) and a wrong one (corrected), both targets opening
with the check of the attempt (`sft.check_rows = "correction"`). With the paper's correction the 4 x 128 policy
fixed about as many of its own wrong attempts as a fresh sample does (docs/results/cipo_testbed.md).
"""
from jaxrl_reason.configs.testbed_latin_check import with_check_stage
from jaxrl_reason.configs.testbed_latin_cipo import get_config as testbed_latin_cipo


def get_config():
    c = with_check_stage(testbed_latin_cipo(), rows="correction")
    c.workdir = "runs/testbed_latin_cipo_check"
    c.data.correction_format = "worked_check"
    c.sft.pack = True  # check rows of ~400 tokens beside worked solutions of ~25 (docs/results/sft_packing.md)
    # a correction writes the check (up to ~130 tokens under the task BPE) before its grid (22)
    c.method.extra.correction_max_new_tokens = 192
    return c
