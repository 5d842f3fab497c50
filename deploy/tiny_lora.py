"""Build a tiny random LoRA adapter for the tiny model (deploy/tiny_model.py): python deploy/tiny_lora.py MODEL_DIR
OUTPUT_DIR [RANK]

Runs in the vLLM venv (``torch`` and ``safetensors``; PEFT is not needed). It writes what PEFT's ``save_pretrained``
writes and vLLM's ``--lora-modules`` and ``/v1/load_lora_adapter`` read: ``adapter_config.json`` and
``adapter_model.safetensors`` holding ``lora_A`` (rank x in) and ``lora_B`` (out x rank) of every layer's q_proj and
v_proj, small random values (a real adapter's B starts at zero: random here, so the adapter changes the output).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

TARGET_MODULES = ("q_proj", "v_proj")


def build(model_dir: Path, out: Path, rank: int = 8) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    widths = {"q_proj": config["num_attention_heads"] * head_dim, "v_proj": config["num_key_value_heads"] * head_dim}
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module in TARGET_MODULES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(widths[module], rank, generator=generator) * 0.01
    out.mkdir(parents=True, exist_ok=True)
    save_file({name: tensor.to(torch.bfloat16) for name, tensor in tensors.items()}, out / "adapter_model.safetensors")
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model_dir),
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(TARGET_MODULES),
        "fan_in_fan_out": False,
        "modules_to_save": None,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 8)
