"""The design review's numbers of a commit (issue #55): lines in experiments/ and experiments/research/, sys.path
inserts in experiments/, tests that load a script by its path, lines per method module, the package's largest
functions; with --trace, the files and distinct lines of jaxrl_reason one GRPO train step executes (the second
step of a tiny trainer; the first compiles).

    python experiments/bench/design_numbers.py REV [REV ...]            # static numbers, read from git
    python experiments/bench/design_numbers.py --trace CHECKOUT_DIR     # a checkout of the commit to trace
"""
import argparse
import ast
import collections
import os
import re
import subprocess
import sys
import tempfile


def static_numbers(rev: str) -> dict:
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True,
                           check=True).stdout.split()

    def text(f):
        return subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True, check=True).stdout

    py = {f: text(f) for f in files if f.endswith(".py")}
    exp = [f for f in py if f.startswith("experiments/")]
    research = [f for f in exp if f.startswith("experiments/research/")]
    functions = []
    for f, src in py.items():
        if f.startswith("jaxrl_reason/"):
            functions += [(n.end_lineno - n.lineno + 1, f"{f}:{n.name}") for n in ast.walk(ast.parse(src))
                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return {
        "experiments_files": len(exp), "experiments_lines": sum(len(py[f].splitlines()) for f in exp),
        "research_files": len(research), "research_lines": sum(len(py[f].splitlines()) for f in research),
        "sys_path_inserts_in_experiments": sum(py[f].count("sys.path.insert") for f in exp),
        "tests_loading_scripts": sorted(f for f in py if f.startswith("tests/") and re.search(
            r"spec_from_file_location|runpy\.run_path", py[f])),
        "method_module_lines": {f.rsplit("/", 1)[1]: len(py[f].splitlines()) for f in sorted(py)
                                if f.startswith("jaxrl_reason/methods/")},
        "largest_functions": sorted(functions, reverse=True)[:6],
    }


def traced_step(root: str) -> tuple:
    """(files, distinct lines) of `root`/jaxrl_reason that the second step of a tiny GRPO trainer executes."""
    sys.path[:0] = [root, os.path.join(root, "tests")]
    import numpy as np
    from tiny import ARITH, arith_tokenizer, tiny_model

    from jaxrl_reason.data.arithmetic import arithmetic_examples
    from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
    from jaxrl_reason.rewards.base import RewardResult
    from jaxrl_reason.train.trainer import Trainer, TrainerConfig

    def reward(texts, examples):
        return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{}] * len(texts))

    tok = arith_tokenizer(tempfile.mkdtemp())
    cfg = TrainerConfig(steps=3, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=12, lr=1e-2,
                        checkpoint_every=100, progress=False, seed=11)
    trainer = Trainer(tiny_model(tok, seed=3), tok, GRPO("grpo", PolicyLossConfig()),
                      arithmetic_examples(64, seed=7, config=ARITH), reward, cfg, tempfile.mkdtemp())
    trainer.train_step()
    lines = collections.defaultdict(set)
    pkg = os.path.join(os.path.abspath(root), "jaxrl_reason")

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.startswith(pkg):
            return None
        if event in ("call", "line"):
            lines[frame.f_code.co_filename].add(frame.f_lineno)
        return tracer

    sys.settrace(tracer)
    trainer.train_step()
    sys.settrace(None)
    return len(lines), sum(map(len, lines.values()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("revs", nargs="*", help="commits to read the static numbers of")
    p.add_argument("--trace", help="a checkout (its root directory) whose GRPO step to trace")
    args = p.parse_args()
    for rev in args.revs:
        print(rev, static_numbers(rev))
    if args.trace:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        files, lines = traced_step(args.trace)
        print(f"{args.trace}: one GRPO step executes {lines} distinct lines in {files} files")


if __name__ == "__main__":
    main()
