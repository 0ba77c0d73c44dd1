"""GRPO^V on the 4x4 Latin-square testbed with the worked check, on the 4 x 256 policy: the verifier writes the
task's check of a solution (each row and column copied, then marked) before its verdict, and RL^V trains that
whole target on the policy's own rollouts. docs/tasks/testbed.md.

    python experiments/train.py --config jaxrl_reason/configs/testbed_latin_check.py
    python experiments/research/bench_rlv.py --grpo-config jaxrl_reason/configs/testbed_latin_check.py \
        --rlv-config jaxrl_reason/configs/testbed_latin_check.py --workdir runs/bench_rlv_latin_check_s0 --seed 0

The warm-up is docs/results/testbed.md run 19's, the first that met both preconditions: 1,500 SFT steps on 8,000
worked solutions (greedy 51.6%), then 1,500 steps of the worked-check warm-up (train/check_warmup.py) on the
contrast pairs of 4,096 of those questions, one worked solution per check row -- the verifier it left read the
policy's own samples at within-question AUROC 0.93. The 4 x 128 policy of configs/testbed_latin.py never passed
0.75 with any check format (runs 11-18). The stage trains until its held-out pairs reach 90% balanced accuracy
(`sft.check_target`, up to three rounds of 1,500 steps): after one round seeds 0 / 1 / 2 left 94 / 85.5 / 78.5%,
and GRPO^V's verifier read the policy's own samples at within-question AUROC 0.98 / 0.81 / 0.64 -- only the seed
that met #24's precondition (>= 0.85) met its checks (docs/results/rlv_testbed.md).
"""

from jaxrl_reason.configs.testbed_latin import get_config as testbed_latin


def with_check_stage(c, rows: str = "verify"):
    """Run 19's width and worked-check stage on a Latin-square preset `c`: the 4 x 256 policy, its SFT lr, and
    1,500 steps on the contrast pairs of 4,096 warm-up questions whose check is written under the `rows` prompt
    (`sft.check_rows`: verify | critique | correction); a verdict's stage (verify, critique) is repeated until the
    held-out pairs reach 90% (at most three rounds). The CURE and CIPO worked-check presets share it."""
    c.model.hidden_size = 256
    c.model.intermediate_size = 768
    c.sft.lr = 1.5e-3  # 3e-3 (the 4 x 128's) diverged at this width
    c.sft.check_steps = 1500
    c.sft.check_questions = 4096
    c.sft.check_rows = rows
    if rows != "correction":  # a correction's held-out score needs the wrong attempts solved: ~50% of them at best
        c.sft.check_target, c.sft.check_rounds = 0.90, 3
    return c


def get_config():
    c = with_check_stage(testbed_latin())
    c.workdir = "runs/testbed_latin_check"
    c.data.verify_format = "worked_check"
    c.sft.verify_steps = 0  # the one-token verdict's warm-up; the check is taught by the stage below
    # The per-step verifier metric writes the check of every verify row (~130 greedy tokens each) before the update;
    # it changes nothing in training, and the benchmark measures the verifier on held-out samples at the end.
    c.method.extra.measure_verifier = False
    return c
