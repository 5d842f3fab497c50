"""Simulator profiles: hardware x model x tensor parallelism, engine defaults and step-time constants, read from
``simulator/profiles/*.toml`` into one flat ``Profile`` (docs/concepts/simulator.md, section 3)."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "cpu-tiny"
OUTPUT_LEN_DISTRIBUTIONS = ("lognormal", "exponential", "fixed")


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    description: str
    served_model_name: str
    model_path: str
    # hardware, per GPU: dense BF16 FLOP/s, HBM bytes/s, memory bytes
    hardware: str
    flops: float
    hbm_bandwidth: float
    memory_bytes: float
    # model shape (HF config); params_experts = all routed-expert parameters (0 for dense models)
    layers: int
    q_width: int
    num_kv_heads: int
    head_dim: int
    params_total: float
    params_active: float
    params_experts: float
    num_experts: int
    experts_per_token: int
    weight_bytes: int
    kv_dtype_bytes: int
    # engine (vLLM flag names)
    tensor_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    block_size: int
    stream_interval: int
    # step-time model: model FLOP utilisation, HBM bandwidth efficiency, fixed seconds per step, relative jitter
    mfu: float
    bw_eff: float
    t_fixed: float
    jitter: float
    # output lengths of requests that may stop early (no ignore_eos): distribution, mean tokens, lognormal sigma
    output_len_distribution: str
    output_len_mean: float
    output_len_sigma: float
    # vLLM's --num-gpu-blocks-override; 0 = derive the KV block count from memory
    num_gpu_blocks_override: int = 0
    # vLLM's --enable-prefix-caching (on by default in V1)
    enable_prefix_caching: bool = True
    # vLLM's --kv-offloading-size: GiB of host memory for a CPU tier of the KV cache (engine/kvcache.py; 0: none),
    # and the host-to-device bytes/s one GPU loads its blocks back at (set in each profile, with its source)
    kv_offloading_size: float = 0.0
    kv_offload_bandwidth: float = 25e9
    # vLLM's --scheduling-policy: fcfs, or priority (the request's priority field orders the queue: priority.py)
    scheduling_policy: str = "fcfs"
    # simulated answers to benchmark questions (answers.py): chance the first answer is right, flip chance per other
    # sequence in flight
    answer_accuracy: float = 0.8
    answer_flip_rate: float = 0.0005
    # a fault for the correctness canaries' tests: with N > 0, every answer given while more than N sequences are in
    # flight (this one included) is the runner-up, as if a kernel changed its numerics above that batch (0: never)
    answer_fault_batch: int = 0
    # a vision-language model's image processor and encoder (vision.py; Qwen2-VL's defaults): pixels per patch side,
    # patches merged per token side, the resized area's bounds, the vision encoder's parameters (0: no encoder cost)
    vision_patch_size: int = 14
    vision_merge_size: int = 2
    vision_min_pixels: int = 56 * 56
    vision_max_pixels: int = 14 * 14 * 4 * 1280
    vision_params: float = 0.0
    # a video's frames (vision.py): frames per temporal patch (Qwen2-VL's vision_config.temporal_patch_size: an odd
    # frame count is padded with the last frame), and the frames vLLM keeps of a JPEG-sequence video (its
    # VideoMediaIO num_frames default, vllm/multimodal/media/video.py); an encoder's FLOPs per 3-D patch are assumed
    # the same as per image patch (an image is one temporal patch of two copies of itself in Qwen2-VL)
    vision_temporal_patch_size: int = 2
    video_max_frames: int = 32
    # a speech-to-text model's audio encoder (audioapi.py): FLOPs per second of audio, charged to the step that admits
    # the request. Assumed: Whisper-large-v3's encoder (about 0.64e9 of its 1.55e9 parameters) at 2 FLOPs per
    # parameter per encoder position, 50 positions per audio second (1500 per 30 s window): 6.4e10. Whisper pads
    # every clip to a 30 s window; charged per second here, the cost follows the audio's length
    audio_encoder_flops_per_s: float = 6.4e10
    # step-time seconds per sequence scheduled in the step, outside the roofline (per-request host work: scheduling,
    # sampling, input preparation); 0 in the bundled profiles, fitted by calibrate
    t_per_seq: float = 0.0
    # API-server seconds per request before the engine core gets it (HTTP, chat template, tokenization), one request
    # at a time, so that requests arriving together wait for each other; 0 in the bundled profiles, fitted by calibrate
    t_frontend: float = 0.0
    # disaggregated prefill/decode (disagg.py): each decode instance's KV link in Gbit/s, and a transfer's latency
    kv_transfer_gbps: float = 100.0
    kv_transfer_latency_s: float = 0.001
    # LoRA (lora.py): reading an adapter into host memory = fixed seconds + its bytes / bandwidth (vLLM reads the
    # safetensors file from local disk: 2e9 B/s is a datacenter NVMe SSD's order of sequential read; the fixed part
    # is PEFT-config parsing and tensor set-up, an assumption); copying it into a GPU slot = bytes / 25e9 B/s (PCIe
    # Gen4 x16's usable rate); each LoRA token makes its step this much longer relative to a base token (an
    # assumption: S-LoRA, arXiv 2311.03285, and Punica, arXiv 2310.18547, measure batches of distinct adapters within
    # tens of percent of the base model's throughput; set it from a measurement with --set lora_token_factor=...)
    lora_load_fixed_s: float = 0.01
    lora_load_bandwidth: float = 2e9
    lora_activate_bandwidth: float = 25e9
    lora_token_factor: float = 0.1
    # speculative decoding (specdecode.py): draft tokens per step (0: off), the chance each draft is accepted once the
    # ones before it were (one value or one per position), the drafter's time per draft token as a share of the
    # target's step time, and the drafts by batch size ("LO-HI:K,...", vLLM's num_speculative_tokens_per_batch_size)
    spec_tokens: int = 0
    spec_acceptance: str = "0.7"
    spec_draft_cost: float = 0.0
    spec_tokens_per_batch: str = ""
    # structured outputs (grammar.py): seconds to compile a new schema's grammar, and per structured sequence in a
    # step to fill its token bitmask (0: free; measured values and their sources in cpu-tiny.toml)
    grammar_compile_s: float = 0.0
    grammar_mask_s: float = 0.0
    # a twin (``python -m simulator calibrate``): the runs its step time was fitted to, and its error on them
    twin_source: str = ""
    twin_error: str = ""

    def replace(self, **changes: Any) -> Profile:
        return dataclasses.replace(self, **changes)


FIELD_TYPES = {field.name: str(field.type) for field in dataclasses.fields(Profile)}  # name -> "int", "float" ...
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


def _boolean(value: object) -> bool:
    text = str(value).lower()  # TOML booleans and command-line strings
    if text not in _BOOLEANS:
        raise ValueError(f"expected true or false, got {value!r}")
    return _BOOLEANS[text]


_CASTS: dict[str, Callable[[Any], Any]] = {"str": str, "int": int, "float": float, "bool": _boolean}


def profile_names() -> list[str]:
    return sorted(path.stem for path in PROFILE_DIR.glob("*.toml"))


def _profile_path(name: str) -> Path:
    if name.endswith(".toml"):
        return Path(name)
    path = PROFILE_DIR / f"{name}.toml"
    if not path.exists():
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(profile_names())}")
    return path


def _flatten(table: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value))
        else:
            flat[key] = value
    return flat


def coerce(key: str, value: object) -> Any:
    """Convert ``value`` (a TOML value or a command-line string) to the type of the profile field ``key`` (which a
    static type cannot name: it depends on ``key``)."""
    if key not in FIELD_TYPES:
        raise ValueError(f"unknown profile field {key!r}; known: {', '.join(FIELD_TYPES)}")
    cast = _CASTS[FIELD_TYPES[key]]
    if cast is int and isinstance(value, str):
        return int(float(value))
    return cast(value)


def load_profile(name: str = DEFAULT_PROFILE, overrides: dict[str, object] | None = None) -> Profile:
    """Read a profile by name (or ``.toml`` path) and apply ``overrides`` (field name -> value or string)."""
    path = _profile_path(name)
    with path.open("rb") as file:
        values = _flatten(tomllib.load(file))
    values.setdefault("name", path.stem)
    values.update(overrides or {})
    profile = Profile(**{key: coerce(key, value) for key, value in values.items()})
    if profile.output_len_distribution not in OUTPUT_LEN_DISTRIBUTIONS:
        raise ValueError(f"output_len_distribution must be one of {OUTPUT_LEN_DISTRIBUTIONS}")
    return profile


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """Turn ``["mfu=0.4", "t_fixed=0.01"]`` into ``{"mfu": 0.4, "t_fixed": 0.01}`` (typed by field)."""
    overrides: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {assignment!r}")
        overrides[key.strip()] = coerce(key.strip(), value.strip())
    return overrides
