"""Scale-out with JAX's own SPMD partitioner: named meshes, partition rules, sharded loading, memory planning."""
from jaxrl_reason.parallel.mesh import (AXES, BATCH_AXES, allgather_objects, batch_shards, initialize_distributed,
                                        is_main_process, make_mesh, mesh_from_config, one_device_mesh, process_rows,
                                        process_share, replicated, resolve_mesh, resolve_mesh_shape, run_mesh,
                                        to_host)
from jaxrl_reason.parallel.rules import (ACTIVATIONS, DEFAULT_RULES, ShardingError, as_sharded, batch_sharding,
                                         check_model_on_mesh, constrain, global_batch_from_local, init_opt_state,
                                         init_sharded, kv_cache_shardings, kv_cache_specs, load_pretrained_sharded,
                                         loader_place, param_shardings, shard_batch,
                                         shard_model, shard_params, shard_tree, spec_for, tree_shardings, tree_specs)

__all__ = [
    "ACTIVATIONS", "AXES", "BATCH_AXES", "DEFAULT_RULES", "ShardingError", "allgather_objects", "as_sharded",
    "batch_sharding", "batch_shards", "check_model_on_mesh", "constrain", "global_batch_from_local",
    "init_opt_state", "init_sharded", "initialize_distributed", "is_main_process", "kv_cache_shardings",
    "kv_cache_specs", "load_pretrained_sharded", "loader_place", "make_mesh",
    "mesh_from_config", "one_device_mesh", "param_shardings", "process_rows", "process_share", "replicated",
    "resolve_mesh", "resolve_mesh_shape", "run_mesh",
    "shard_batch", "shard_model", "shard_params", "shard_tree", "spec_for", "to_host", "tree_shardings",
    "tree_specs",
]
