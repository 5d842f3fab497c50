"""A pure, clock-free model of vLLM's V1 engine core: one ``step()`` schedules and "runs" one forward pass, with
vLLM's token budget, preemption, FCFS or priority admission (priority.py) and prefix caching
(docs/concepts/simulator.md, section 4)."""

from __future__ import annotations

from typing import NamedTuple

from ..model.grammar import GrammarCache
from ..model.profiles import Profile
from .kvcache import HostTier, KVCache, num_cpu_blocks, num_gpu_blocks
from .leak import Leak
from .lora import LoraSlots
from .priority import WaitingQueue, preempt_for, waiting_queue
from .residency import Residency
from .sequence import Sequence
from .specdecode import spec_decode
from .steptime import StepTimeModel, kv_bytes_per_token_per_rank


class StepResult(NamedTuple):
    duration: float  # seconds of engine time the step took
    outputs: list[Sequence]  # sequences that produced tokens in this step (finished ones have finish_reason)


class Engine:
    def __init__(self, profile: Profile, seed: int = 0) -> None:
        self.max_num_seqs = profile.max_num_seqs
        self.max_num_batched_tokens = profile.max_num_batched_tokens
        self.max_model_len = profile.max_model_len
        host = (
            HostTier(num_cpu_blocks(profile)) if profile.kv_offloading_size and profile.enable_prefix_caching else None
        )
        self.kv = KVCache(num_gpu_blocks(profile), profile.block_size, profile.enable_prefix_caching, host)
        # seconds to copy one token's KV from the CPU tier back to one GPU (each rank over its own link, in parallel)
        self.onload_s_per_token = kv_bytes_per_token_per_rank(profile) / profile.kv_offload_bandwidth
        self.onload_tokens = 0  # tokens the step being scheduled loads from the CPU tier
        self.onloaded_tokens = 0  # tokens loaded from the CPU tier since the start (re-admissions included)
        self.offload_bandwidth = profile.kv_offload_bandwidth
        self.steptime = StepTimeModel(profile, seed)
        self.spec = spec_decode(profile, seed)
        self.clock = 0.0
        self.policy = profile.scheduling_policy  # fcfs or priority: the waiting order and the preemption victim
        self.waiting: WaitingQueue = waiting_queue(self.policy)
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.prefix_cache_queries = 0  # prompt tokens looked up in the prefix cache, at first admission
        self.prefix_cache_hits = 0  # of which found cached
        self.external_prefix_cache_queries = 0  # with a CPU tier: prompt tokens the GPU missed, looked up there
        self.external_prefix_cache_hits = 0  # of which found there (loaded, not recomputed)
        self.last_num_scheduled_tokens = 0
        self.last_num_output_tokens = 0  # of the last step: one per output, more with speculative decoding
        self.t_frontend = profile.t_frontend
        self.frontend_free_at = 0.0  # when the API server has handled every request it was given
        self.lora: LoraSlots | None = None  # --enable-lora's adapters (lora.py)
        self.grammars = GrammarCache(profile)
        self.leak: Leak | None = None  # --leak-step-ms-per-min, --leak-mb-per-min (leak.py)

    def track_residency(self, sample: float, seed: int = 0) -> None:
        """Follow a ``sample`` of the cached blocks in engine time (--kv-cache-metrics: residency.py)."""
        self.kv.residency = Residency(sample, lambda: self.clock, seed)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def advance_to(self, now: float) -> None:
        """Move the engine clock forward to ``now`` (idle time); never backwards."""
        self.clock = max(self.clock, now)

    def add_request(self, *seqs: Sequence, arrival: float | None = None) -> None:
        """One request (its ``n`` sequences) arriving at ``arrival`` (default: now). The API server takes
        ``t_frontend`` seconds for it, one request at a time, before the engine may schedule it."""
        arrival = self.clock if arrival is None else arrival
        self.frontend_free_at = max(self.frontend_free_at, arrival) + self.t_frontend
        for seq in seqs:
            seq.arrival = arrival
            seq.ready = self.frontend_free_at
            seq.max_tokens = min(seq.max_tokens, self.max_model_len - seq.prompt_len)
            if seq.grammar:
                seq.grammar_ready = self.grammars.compiled_at(seq.grammar, seq.ready)
            self.waiting.append(seq)
            if self.lora:
                self.lora.queued(seq)

    def abort(self, seq: Sequence) -> None:
        """Drop an unfinished sequence (client went away); it finishes with ``abort``."""
        if seq.finish_reason is not None:
            return
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self._finish(seq, "abort")

    def step(self) -> StepResult:
        """One forward pass. With nothing to run but requests still in the API server, the clock moves to when the
        first of them reaches the engine, and nothing is scheduled (a zero-duration result)."""
        if not self.running and self.waiting and (ready := self._first_ready()) > self.clock:
            self.clock = ready
            return StepResult(0.0, [])
        scheduled: list[tuple[Sequence, int]] = []
        self.onload_tokens = 0
        budget, preempted = self._schedule_running(scheduled)
        if not preempted:
            self._schedule_waiting(scheduled, budget)
        if not scheduled:
            return StepResult(0.0, [])
        num_tokens = kv_tokens = 0
        attention_pairs = encoder_flops = 0.0
        masked = 0
        for seq, n in scheduled:
            num_tokens += n
            masked += bool(seq.grammar)
            attention_pairs += n * (seq.num_computed + n / 2)
            kv_tokens += seq.num_computed + n
            encoder_flops += seq.encoder_flops  # once: its first step
            seq.encoder_flops = 0.0
        duration = self.steptime.duration(num_tokens, attention_pairs, kv_tokens, len(scheduled), encoder_flops)
        if self.lora:
            duration = self.lora.step_seconds(duration, scheduled, num_tokens)
        duration *= self.spec.step_factor(len(scheduled)) if self.spec else 1.0
        duration += self.grammars.mask_cost(masked)
        duration += self.onload_tokens * self.onload_s_per_token  # loads from the CPU tier, before the forward pass
        duration += self.leak.step_s(self.clock) if self.leak else 0.0
        self.clock += duration
        self.last_num_scheduled_tokens = num_tokens
        return StepResult(duration, self._apply(scheduled))

    def offload_transfers(self) -> dict[str, tuple[float, float]]:
        """The CPU tier's copies since the start by vLLM's transfer type: (bytes over all ranks, seconds summed over
        ranks, each copying its share over its own link); empty without a tier."""
        if self.kv.host is None:
            return {}
        tokens = {"GPU_to_CPU": self.kv.host.num_stored * self.kv.block_size, "CPU_to_GPU": self.onloaded_tokens}
        sizes = {kind: count * self.steptime.kv_bytes_per_token for kind, count in tokens.items()}
        return {kind: (size, size / self.offload_bandwidth) for kind, size in sizes.items()}

    def _schedule_running(self, scheduled: list[tuple[Sequence, int]]) -> tuple[int, bool]:
        budget = self.max_num_batched_tokens
        preempted = False
        running = self.running
        index = 0
        while index < len(running) and budget > 0:
            seq = running[index]
            n = min(seq.prompt_len + seq.num_output - seq.num_computed + seq.num_drafts, budget)
            while not self.kv.allocate(seq, seq.num_computed + n):
                victim, index, restored = preempt_for(running, scheduled, index, self.policy)
                budget += restored
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    return budget, preempted
            scheduled.append((seq, n))
            budget -= n
            index += 1
        return budget, preempted

    def _first_ready(self) -> float:
        """When the first waiting sequence may be scheduled (through the API server, its grammar compiled)."""
        return min(max(seq.ready, seq.grammar_ready) for seq in self.waiting)

    def _schedule_waiting(self, scheduled: list[tuple[Sequence, int]], budget: int) -> None:
        skipped: list[Sequence] = []  # waiting requests vLLM skips: grammar still compiling, or no LoRA slot
        batch = {seq.adapter for seq, _ in scheduled if seq.adapter} if self.lora else set()  # adapters in the step
        try:
            self._admit_waiting(scheduled, budget, skipped, batch)
        finally:  # back to the front in their order (a priority queue places them by their key), as vLLM does
            for seq in reversed(skipped):
                self.waiting.appendleft(seq)

    def _admit_waiting(
        self, scheduled: list[tuple[Sequence, int]], budget: int, skipped: list[Sequence], batch: set[str]
    ) -> None:
        waiting, kv = self.waiting, self.kv
        while waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = waiting[0]
            if seq.grammar_ready > self.clock or (self.lora and not self.lora.admits(seq, batch)):
                skipped.append(waiting.popleft())  # its grammar compiles, or no LoRA slot: passed over this step
                continue
            if seq.ready > self.clock:
                return
            hits = kv.lookup(seq)
            local = len(hits) * kv.block_size
            loaded = kv.host_hits(seq, len(hits))
            onload = len(loaded) * kv.block_size
            held = kv.host_prefix(seq)  # before this admission stores its blocks there
            if seq.external_computed > local + onload:  # a P/D prefill instance sent more than the tiers hold
                loaded, onload = [], 0
            computed = max(local + onload, seq.external_computed)  # as vLLM's scheduler takes a connector's tokens
            total = seq.prompt_len + seq.num_output
            n = min(total - computed, budget)
            if not kv.allocate(seq, computed + n, reserve_tokens=total, hits=hits):
                break
            waiting.popleft()
            self.running.append(seq)
            seq.num_computed = computed
            scheduled.append((seq, n))
            budget -= n
            seq.external_computed = 0  # a preempted sequence recomputes them
            if loaded:
                kv.loaded_from_host(loaded)
                self.onload_tokens += onload
                self.onloaded_tokens += onload
            if self.lora and seq.adapter:
                batch.add(seq.adapter)
                self.lora.scheduled(seq)
            if seq.first_scheduled is None:
                seq.first_scheduled = self.clock
                seq.num_cached_tokens = computed  # vLLM's num_cached_tokens counts the connector's too
                seq.num_external_tokens = computed - local
                if kv.caching:
                    self.prefix_cache_queries += total
                    self.prefix_cache_hits += local
                if kv.host is not None:  # vLLM's connector_prefix_cache_stats: the tokens past the GPU's hits
                    self.external_prefix_cache_queries += total - local
                    self.external_prefix_cache_hits += onload
                    kv.host.lookup_tokens += seq.prompt_len
                    kv.host.lookup_hits += held

    def reset_prefix_cache(self, reset_running_requests: bool, reset_external: bool) -> bool:
        """vLLM's ``Scheduler.reset_prefix_cache``: with ``reset_running_requests`` every running sequence is first
        preempted (last first, so they come back in order; counted as preemptions, recomputed when readmitted), else
        the reset fails while one holds blocks; ``reset_external`` empties the CPU tier too. Whether it was reset."""
        if reset_running_requests:
            while self.running:
                self._preempt(self.running.pop())
        success = self.kv.reset_prefix_cache()
        if reset_external and self.kv.host is not None:
            self.kv.host.clear()
        return success

    def _preempt(self, seq: Sequence) -> None:
        self.kv.release(seq)
        seq.num_computed = 0
        seq.num_drafts = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        if self.lora:
            self.lora.queued(seq)

    def _apply(self, scheduled: list[tuple[Sequence, int]]) -> list[Sequence]:
        now = self.clock
        outputs = []
        any_finished = False
        tokens = 0
        for seq, n in scheduled:
            drafts = n - (seq.prompt_len + seq.num_output - seq.num_computed)  # > 0: draft tokens it verified
            seq.num_computed += n
            if seq.num_computed < seq.prompt_len + seq.num_output:
                continue  # a prefill chunk that did not reach the end of the prompt
            if not seq.max_tokens:  # a pooling request (embeddings, scores) ends with its prefill, sampling nothing
                new = 0
            else:
                new = self.spec.advance(seq, drafts, len(scheduled)) if self.spec else 1
            seq.num_output += new
            tokens += new
            if seq.first_token is None:
                seq.first_token = now
            seq.previous_token = seq.last_token
            seq.last_token = now
            outputs.append(seq)
            if not seq.max_tokens:  # vLLM finishes a pooled request as stopped
                self._finish(seq, "stop")
                any_finished = True
            elif seq.num_output >= seq.max_tokens:
                self._finish(seq, "length")
                any_finished = True
            elif seq.num_output == seq.stop_after:
                self._finish(seq, "stop")
                any_finished = True
        if any_finished:
            self.running = [seq for seq in self.running if seq.finish_reason is None]
        self.last_num_output_tokens = tokens
        return outputs

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        seq.finished_at = self.clock
        self.kv.release(seq)
        if self.lora:
            self.lora.finished(seq)
