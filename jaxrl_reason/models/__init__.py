"""Decoders (Qwen2 / Qwen2.5 / Qwen3 / Llama in one NNX module) and their checkpoints (Hugging Face, GGUF)."""
from jaxrl_reason.models.hf_port import config_from_hf, load_pretrained, save_pretrained
from jaxrl_reason.models.qwen2 import KVCache, ModelConfig, Qwen2, init_model

__all__ = ["KVCache", "ModelConfig", "Qwen2", "config_from_hf", "init_model", "load_pretrained", "save_pretrained"]
