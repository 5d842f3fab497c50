"""Duration of one engine step from a roofline model: the slower of compute and memory traffic, plus a fixed cost
(docs/concepts/simulator.md, section 6)."""

from __future__ import annotations

import random

from ..model.profiles import Profile


def kv_bytes_per_token_per_rank(profile: Profile) -> int:
    """KV bytes one token takes on one GPU; KV heads are replicated when TP exceeds their number."""
    kv_heads_per_rank = max(1.0, profile.num_kv_heads / profile.tensor_parallel_size)
    return int(2 * profile.layers * kv_heads_per_rank * profile.head_dim * profile.kv_dtype_bytes)


class StepTimeModel:
    """Step duration in seconds for a batch described by its token sums; seeded multiplicative jitter."""

    def __init__(self, profile: Profile, seed: int = 0) -> None:
        tp = profile.tensor_parallel_size
        self.t_fixed = profile.t_fixed
        self.t_per_seq = profile.t_per_seq
        self.jitter = profile.jitter
        self.flops_per_token = 2.0 * profile.params_active
        self.flops_per_attention_pair = 4.0 * profile.layers * profile.q_width
        self.compute_rate = tp * profile.flops * profile.mfu
        self.memory_rate = tp * profile.hbm_bandwidth * profile.bw_eff
        self.dense_weight_bytes = profile.weight_bytes * (profile.params_total - profile.params_experts)
        self.expert_weight_bytes = profile.weight_bytes * profile.params_experts
        self.expert_miss = 1.0 - profile.experts_per_token / profile.num_experts if profile.num_experts else 1.0
        self.kv_bytes_per_token = kv_bytes_per_token_per_rank(profile) * tp
        self._rng = random.Random(seed)

    def ideal(
        self, num_tokens: int, attention_pairs: float, kv_tokens: int, num_seqs: int = 0, encoder_flops: float = 0.0
    ) -> float:
        """Step time without jitter.

        ``attention_pairs`` = sum over scheduled items of ``n * (ctx_before + n / 2)``;
        ``kv_tokens`` = sum of ``ctx_before + n`` (KV entries read or written); ``num_seqs`` = scheduled items;
        ``encoder_flops``: the vision encoder's work on the images of the sequences this step admits.
        """
        flops = self.flops_per_token * num_tokens + self.flops_per_attention_pair * attention_pairs + encoder_flops
        experts_touched = 1.0 - self.expert_miss**num_tokens
        weight_bytes = self.dense_weight_bytes + experts_touched * self.expert_weight_bytes
        memory_bytes = weight_bytes + self.kv_bytes_per_token * kv_tokens
        roofline = max(flops / self.compute_rate, memory_bytes / self.memory_rate)
        return self.t_fixed + self.t_per_seq * num_seqs + roofline

    def duration(
        self, num_tokens: int, attention_pairs: float, kv_tokens: int, num_seqs: int, encoder_flops: float = 0.0
    ) -> float:
        noise = min(1.5, max(0.5, self._rng.gauss(1.0, self.jitter))) if self.jitter else 1.0
        return self.ideal(num_tokens, attention_pairs, kv_tokens, num_seqs, encoder_flops) * noise
