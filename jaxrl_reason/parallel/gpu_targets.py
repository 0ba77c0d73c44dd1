"""Compile targets for NVIDIA GPUs that are not attached: XLA's `GpuTargetConfig` of a part, which
`jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=..., topology="1xHxG")` turns into
compile-only devices (the CUDA PJRT plugin, `pip install jax-cuda12-plugin==<jax version>`, is all it needs: no
GPU, no driver, no CUDA libraries).

Each entry is the part's datasheet figures in XLA's text format: the SM count, compute capability, shared memory
and register limits the GPU compiler tiles for, the L2 size, the HBM bandwidth its cost model reads and the device
memory its buffer assignment is checked against. The device description names the part as a real device of it
reports itself (so `parallel.roofline.chip_for` finds its peaks).
"""
from __future__ import annotations

def _target(name: str, capability: tuple, sms: int, fp32_per_sm: int, clock_ghz: float, smem_optin: int,
            smem_per_sm: int, l2_bytes: int, hbm_bytes_per_s: int, hbm_bytes: int) -> str:
    """A GpuTargetConfig in XLA's text format; the limits every recent NVIDIA part shares are written once."""
    return f"""
gpu_device_info {{
  cuda_compute_capability {{ major: {capability[0]} minor: {capability[1]} }}
  core_count: {sms}
  fpus_per_core: {fp32_per_sm}
  clock_rate_ghz: {clock_ghz}
  threads_per_warp: 32
  threads_per_block_limit: 1024
  threads_per_core_limit: 2048
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
  shared_memory_per_block: 49152
  shared_memory_per_block_optin: {smem_optin}
  shared_memory_per_core: {smem_per_sm}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  l2_cache_size: {l2_bytes}
  memory_bandwidth: {hbm_bytes_per_s}
  device_memory_size: {hbm_bytes}
}}
platform_name: "CUDA"
device_description_str: "{name}"
"""


_H100_SXM = _target("NVIDIA H100 80GB HBM3", (9, 0), 132, 128, 1.98, 232448, 233472, 50 << 20, 3_350_000_000_000,
                    85_520_809_984)
_A100_SXM_80GB = _target("NVIDIA A100-SXM4-80GB", (8, 0), 108, 64, 1.41, 166912, 167936, 40 << 20,
                         2_039_000_000_000, 80 << 30)

GPU_TARGETS = {"h100": _H100_SXM, "a100": _A100_SXM_80GB}  # topology prefix -> its GpuTargetConfig text


def gpu_target_config(chip: str) -> str:
    if chip not in GPU_TARGETS:
        raise KeyError(f"no GPU target {chip!r}; known: {', '.join(sorted(GPU_TARGETS))}")
    return GPU_TARGETS[chip]
