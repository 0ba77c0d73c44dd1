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

_H100_SXM = """
gpu_device_info {
  cuda_compute_capability { major: 9 minor: 0 }
  core_count: 132
  fpus_per_core: 128
  clock_rate_ghz: 1.98
  threads_per_warp: 32
  threads_per_block_limit: 1024
  threads_per_core_limit: 2048
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
  shared_memory_per_block: 49152
  shared_memory_per_block_optin: 232448
  shared_memory_per_core: 233472
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  l2_cache_size: 52428800
  memory_bandwidth: 3350000000000
  device_memory_size: 85520809984
}
platform_name: "CUDA"
device_description_str: "NVIDIA H100 80GB HBM3"
"""

_A100_SXM_80GB = """
gpu_device_info {
  cuda_compute_capability { major: 8 minor: 0 }
  core_count: 108
  fpus_per_core: 64
  clock_rate_ghz: 1.41
  threads_per_warp: 32
  threads_per_block_limit: 1024
  threads_per_core_limit: 2048
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
  shared_memory_per_block: 49152
  shared_memory_per_block_optin: 166912
  shared_memory_per_core: 167936
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  l2_cache_size: 41943040
  memory_bandwidth: 2039000000000
  device_memory_size: 85899345920
}
platform_name: "CUDA"
device_description_str: "NVIDIA A100-SXM4-80GB"
"""

GPU_TARGETS = {"h100": _H100_SXM, "a100": _A100_SXM_80GB}  # topology prefix -> its GpuTargetConfig text


def gpu_target_config(chip: str) -> str:
    if chip not in GPU_TARGETS:
        raise KeyError(f"no GPU target {chip!r}; known: {', '.join(sorted(GPU_TARGETS))}")
    return GPU_TARGETS[chip]
