"""The jitted sampler: one prefill per prompt shared by its samples, a `lax.while_loop` decode, exact log-probs."""
from jaxrl_reason.sampling.sampler import FINISH_NAMES, SampleOutput, sample

__all__ = ["FINISH_NAMES", "SampleOutput", "sample"]
