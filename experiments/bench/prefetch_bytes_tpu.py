"""How the TPU compiler bills its own prefetches into VMEM: a chain of `--layers` matmuls [rows, hidden] @
[hidden, width] compiled for one chip of the topology (libtpu, no TPU). Every weight is read from HBM once;
`cost_analysis()` bills the async moves that carry it into VMEM (read + write, then the done) and the matmul's read
of the VMEM copy besides. Prints the billed count, the op-by-op sum (`experiment.compile_check.bytes_by_op`) and
its HBM count. docs/results/tpu_compile.md, "What the decode step's bytes are made of".

    python experiments/bench/prefetch_bytes_tpu.py [--layers 8] [--rows 8] [--hidden 2048] [--width 8192]
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--topology", default="v5e:2x2")
    args = ap.parse_args(argv)
    for f in ("layers", "rows", "hidden", "width"):
        if getattr(args, f) <= 0:
            ap.error(f"--{f} must be positive, got {getattr(args, f)}")
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from jaxrl_reason.experiment.compile_check import bytes_by_op, topology_devices

    rep = NamedSharding(Mesh(np.asarray(topology_devices(args.topology)[:1]), ("x",)), P())
    spec = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=rep)  # noqa: E731

    def chain(x, *ws):
        for w in ws:  # keep the first `hidden` columns so the next weight applies
            x = jnp.tanh(x @ w)[:, :args.hidden]
        return x

    compiled = jax.jit(chain).lower(spec(args.rows, args.hidden),
                                    *[spec(args.hidden, args.width)] * args.layers).compile()
    cost = compiled.cost_analysis()
    billed = float((cost[0] if isinstance(cost, (list, tuple)) else cost)["bytes accessed"])
    rows = bytes_by_op(compiled.as_text())
    weights = args.layers * args.hidden * args.width * 2
    moves = [r for r in rows if r["op"].endswith(("-start", "-done")) or r["op"] == "custom-call"]
    print(f"weights {weights / 1e6:.1f} MB, each read once; compiler billed {billed / 1e6:.1f} MB "
          f"({billed / weights:.2f}x); op-by-op sum {sum(r['bytes'] for r in rows) / 1e6:.1f} MB, of which "
          f"{len(moves)} async moves into VMEM {sum(r['bytes'] for r in moves) / 1e6:.1f} MB; HBM count "
          f"{sum(r['hbm_bytes'] for r in rows) / 1e6:.1f} MB ({sum(r['hbm_bytes'] for r in rows) / weights:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
