"""The loss-sweep cell of colabs/04_ablation_sweep.ipynb at the notebook's full size, without its lambda sweep
(docs/results/policy_losses.md):

    python experiments/research/loss_sweep.py --out runs/loss_sweep

Runs the notebook's code cells in order in one namespace (as tests/test_colabs.py does), without the lambda
sweep's cell (its `compare` call), and stops after the loss sweep; writes <out>/loss_sweep.json (the cell's
`loss_table`) and <out>/loss_sweep.png.
"""
import argparse
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/loss_sweep")
    out = os.path.abspath(ap.parse_args().out)
    os.makedirs(out, exist_ok=True)
    nb = os.path.join(ROOT, "colabs", "04_ablation_sweep.ipynb")
    cells = [c for c in json.load(open(nb))["cells"] if c["cell_type"] == "code"]
    ns, t0 = {"__name__": "__main__"}, time.time()
    for i, c in enumerate(cells):
        src = "".join(c["source"])
        if src.lstrip().startswith("!"):
            continue  # the Colab install
        if "compare(" in src:
            continue  # the lambda sweep
        exec(compile(src, f"cell {i}", "exec"), ns)
        print(f"cell {i}: {time.time() - t0:.0f} s", flush=True)
        if "loss_table" in ns:
            break
    ns["loss_fig"].savefig(os.path.join(out, "loss_sweep.png"))
    json.dump(ns["loss_table"], open(os.path.join(out, "loss_sweep.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
