"""CURE on the 4x4 Latin-square testbed with the worked check in the critique, on the 4 x 256 policy: the critique
opens with the task's check of the solution (each row and column copied, then marked), then the four fields, so
its verdict reads the marks the critic just wrote (`data.critique_format = "worked_check"`, a [choice]:
docs/methods/cure.md). In training CURE forces the true check with the verdict, the start the outcome verifier
would write, and the policy writes the fields after it; at test time the critic writes the check itself.

    python experiments/research/bench_cure.py --config jaxrl_reason/configs/testbed_latin_cure_check.py \
        --workdir runs/bench_cure_check_s0 --seeds 0

The warm-up is the `testbed_latin_cure` preset's (BPE on the critique rows, 10% critique and 10% guided rows in the
SFT, then critiques and guided re-solves of its own attempts) at the width where the worked check first read the
policy's own samples (`testbed_latin_check`, docs/results/testbed.md run 19), with run 19's check stage posed
as critiques: 1,500 steps on the contrast pairs of 4,096 warm-up questions, each a worked solution and a wrong
one whose critique opens with the check (`sft.check_rows = "critique"`), with 8,192 guided re-solve rows mixed in
(`sft.check_guided_share = 2.0`), so the short re-solve rows are not left untrained beside ~430-token critiques;
guided prompts in the paper's layout (`data.guided_layout = "after"`), which this width reads.
Whether they are needed is not measured: the re-solve that fixed none of the wrong attempts its verdict flagged
(seeds 0 at shares 0, 0.5 and 2.0) was a layout bug -- the bench's GRPO arm wrote the warm-up's guided rows in
the paper's layout while CURE and refinement asked with the guidance first (fixed 2026-12-06: the layout is
`data.guided_layout`; docs/results/cure_testbed.md). With the paper's
critique the verdict of the 4 x 128 warm-up sat at the base rate of wrong answers on three seeds
(docs/results/cure_testbed.md).
"""
from jaxrl_reason.configs.testbed_latin_check import with_check_stage
from jaxrl_reason.configs.testbed_latin_cure import get_config as testbed_latin_cure


def get_config():
    c = with_check_stage(testbed_latin_cure(), rows="critique")
    c.workdir = "runs/testbed_latin_cure_check"
    c.data.critique_format = "worked_check"
    c.sft.check_guided_share = 2.0
    # The paper's layout again: the guidance-first layout of the 4 x 128 preset was a workaround for a width that
    # lost the grid under a hint between grid and answer; this width reads it (seed 0: the re-solve fixed 20 of 51
    # flagged wrong attempts, CURE's guided accuracy in RL ~0.35; docs/results/cure_testbed.md)
    c.data.guided_layout = "after"
    # A critique pair row is ~460 tokens beside ~80 for a worked solution: one sequence per row left half of each
    # padded batch empty; packed, the same update is ~1.9x faster (docs/results/sft_packing.md)
    c.sft.pack = True
    return c
