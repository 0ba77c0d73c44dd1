"""Mean tokens per warm-up row (prompt + target) of each format under the task BPE, trained on the task text alone
and with `tokenizer.aux_corpus` (the auxiliary rows too), at each vocabulary size asked for:

    python experiments/research/aux_token_lengths.py [--config jaxrl_reason/configs/testbed_latin_cure.py] \
        [--vocab 384,512] [--rows 200]

Prints a markdown table (docs/tasks/testbed.md quotes it). Trains a BPE per line (seconds); no model.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "jaxrl_reason",
                       "configs")
FORMATS = ("solve", "verify", "critique", "correct")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(CONFIGS, "testbed_latin_cure.py"))
    p.add_argument("--vocab", default="384,512", help="comma-separated BPE sizes")
    p.add_argument("--rows", type=int, default=200, help="rows of each format measured")
    args = p.parse_args(argv)

    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.warmup import sft_examples, tokenizer_corpus

    cfg = load_config_file(args.config)
    for k in ("verify", "critique", "correct"):  # every format present, whatever the preset mixes
        cfg.sft[f"aux_{k}_share"] = max(cfg.sft[f"aux_{k}_share"], 0.05)
    print(f"{args.config}: data.source={cfg.data.source}, verify_format={cfg.data.verify_format}\n")
    print("| BPE | " + " | ".join(FORMATS) + " |\n|---|" + "---|" * len(FORMATS))
    for vocab in [int(v) for v in args.vocab.split(",")]:
        for aux in (False, True):
            cfg.tokenizer.vocab_size, cfg.tokenizer.aux_corpus = vocab, aux
            rc = read_run_config(cfg)
            task = build_data(rc.data, rc.seed)
            corpus, corpus_prompt_fn = tokenizer_corpus(rc, task)
            tok = build_tokenizer(rc, corpus, tempfile.mkdtemp(), corpus_prompt_fn)
            rows, prompt_fn = sft_examples(rc, task)
            by_format = {f: [r for r in rows if r.meta.get("format", "solve") == f][:args.rows] for f in FORMATS}
            mean = {f: np.mean([len(tok.encode(tok.render_prompt(prompt_fn(r.question)))) + len(tok.encode(r.solution))
                                for r in rs]) if rs else float("nan") for f, rs in by_format.items()}
            label = f"task text{' + auxiliary rows' if aux else ' only'}, {vocab} entries"
            print(f"| {label} | " + " | ".join(f"{mean[f]:.0f}" for f in FORMATS) + " |", flush=True)


if __name__ == "__main__":
    main()
