"""Decoders (Qwen2 / Qwen2.5 / Qwen3 / Llama in one NNX module), their LoRA adapters and their checkpoints
(Hugging Face, PEFT, GGUF)."""
from jaxrl_reason.models.hf_port import config_from_hf, load_pretrained, save_peft_adapter, save_pretrained
from jaxrl_reason.models.lora import LoraConfig, attach_lora
from jaxrl_reason.models.qwen2 import KVCache, ModelConfig, Qwen2, init_model

__all__ = ["KVCache", "LoraConfig", "ModelConfig", "Qwen2", "attach_lora", "config_from_hf", "init_model",
           "load_pretrained", "save_peft_adapter", "save_pretrained"]
