"""The device mesh, the tokenizer and the policy of a run: built from its config, loaded from a checkpoint, saved
in Hugging Face format."""
from __future__ import annotations

import dataclasses
import os

from jaxrl_reason.experiment.config import ModelSection, ParallelSection, RunConfig


def build_mesh(parallel: ParallelSection):
    """The device mesh of the `parallel` section (the one-device mesh without one). First joins the other processes of a
    multi-host run: those named by JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, or, with
    `parallel.distributed`, the ones JAX detects itself (TPU pods, SLURM). So it must run before anything else
    touches JAX devices."""
    from jaxrl_reason.parallel.mesh import initialize_distributed, run_mesh

    initialize_distributed(auto=bool(parallel.distributed))
    return run_mesh({"mesh_shape": dict(parallel.mesh_shape)})


def build_tokenizer(rc: RunConfig, train, workdir: str, prompt_fn):
    """The configured tokenizer, the GGUF file's, or a small BPE trained on the task text (kept in the workdir)."""
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
    from jaxrl_reason.tokenization import Tokenizer

    if rc.tokenizer.path:
        return Tokenizer.from_pretrained(rc.tokenizer.path)
    if rc.model.gguf_path:
        from jaxrl_reason.models.gguf_port import load_gguf_tokenizer

        return load_gguf_tokenizer(rc.model.gguf_path)
    path = os.path.join(workdir, "tokenizer")
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return Tokenizer.from_pretrained(path)
    # Task text only. Prompts of other methods (the RL^V verify prompt) still encode, byte-level, and the words
    # they must produce as single tokens ("Yes", "No") are forced into the vocabulary; adding their text here
    # changed the vocabulary size, hence the model's initialisation, and moved the default's SFT accuracy from
    # 33.6% to 9.8% -- the tiny model's warm-up is that sensitive to its initial draw.
    texts = []
    for e in train[:5000]:
        texts.append(prompt_fn(e.question))
        texts.append(e.solution or e.answer)
    return train_tiny_tokenizer(texts, path, vocab_size=rc.tokenizer.vocab_size)


def with_runtime_flags(model, m: ModelSection):
    """Config knobs that change how the model runs, not what it computes (not stored in checkpoints)."""
    if m.remat:
        model.config = dataclasses.replace(model.config, remat=True)
    if m.decode_weights != model.config.decode_weights:
        model.config = dataclasses.replace(model.config, decode_weights=m.decode_weights)
    return model


def load_hf(path: str, m: ModelSection, mesh=None):
    """An HF checkpoint, each tensor placed straight into its shardings on `mesh` (None: the one-device mesh)."""
    from jaxrl_reason.parallel.mesh import resolve_mesh
    from jaxrl_reason.parallel.rules import load_pretrained_sharded

    model = load_pretrained_sharded(path, resolve_mesh(mesh), dtype=m.dtype, compute_dtype=m.compute_dtype or None)
    return with_runtime_flags(model, m)


def save_hf(model, path: str, **kw) -> None:
    """`save_pretrained` from process 0; a model sharded over several processes is gathered first (every
    process joins the gather)."""
    import jax
    from flax import nnx

    from jaxrl_reason.models.hf_port import save_pretrained
    from jaxrl_reason.parallel.mesh import is_main_process, to_host

    if jax.process_count() > 1:
        graphdef, state = nnx.split(model)
        model = nnx.merge(graphdef, jax.tree.map(to_host, state))
    if is_main_process():
        save_pretrained(model, path, **kw)


def scratch_model_config(m: ModelSection, vocab_size: int):
    """The ModelConfig of the from-scratch model the `model` section describes."""
    from jaxrl_reason.models.qwen2 import ModelConfig

    return ModelConfig(vocab_size=vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
                       num_hidden_layers=m.num_hidden_layers, num_attention_heads=m.num_attention_heads,
                       num_key_value_heads=m.num_key_value_heads, max_position_embeddings=m.max_position_embeddings,
                       tie_word_embeddings=m.tie_word_embeddings, rope_theta=10000.0, param_dtype=m.dtype,
                       dtype=m.compute_dtype or m.dtype, remat=m.remat, decode_weights=m.decode_weights)


def build_model(rc: RunConfig, tokenizer, mesh=None):
    """The policy before any training, laid out on `mesh` (None: the one-device mesh): the GGUF or HF checkpoint,
    else a from-scratch model seeded by `rc.setup_seed`."""
    from jaxrl_reason.parallel.mesh import resolve_mesh
    from jaxrl_reason.parallel.rules import init_sharded, shard_model

    m, mesh = rc.model, resolve_mesh(mesh)
    if m.gguf_path:
        from jaxrl_reason.models.gguf_port import load_gguf

        model = with_runtime_flags(load_gguf(m.gguf_path, dtype=m.dtype, compute_dtype=m.compute_dtype or None)[0], m)
        return shard_model(model, mesh)
    if m.hf_path:
        return load_hf(m.hf_path, m, mesh)
    return init_sharded(scratch_model_config(m, tokenizer.vocab_size), mesh, seed=rc.setup_seed)
