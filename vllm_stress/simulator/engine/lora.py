"""LoRA adapters in the simulated engine, as vLLM serves them (``--enable-lora``): adapters are models by name
(``--lora-modules``, ``/v1/load_lora_adapter``), at most ``max_loras`` distinct adapters in one batch (vLLM's
``vllm/v1/core/sched/scheduler.py`` skips a waiting request whose adapter would exceed it), ``max_cpu_loras``
resident in host memory (an LRU: an adapter not resident is read from disk first), ``max_loras`` GPU slots (an LRU:
an adapter not in a slot is copied in), both paid in the step that needs them, and a step time longer by
``lora_token_factor`` per LoRA token. The counts behind ``vllm:lora_requests_info`` are kept as vLLM's
``LoRARequestStates`` keeps them (``vllm/v1/metrics/stats.py``)."""

from __future__ import annotations

import argparse
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

from vllm_stress.core.lora import ADAPTER_PREFIX, numbered_adapters

from ..model.errors import ApiError
from ..model.profiles import Profile

if TYPE_CHECKING:
    from .sequence import Sequence

MAX_INFO_LABEL_SETS = 1000  # vLLM's gauge keeps every label set it ever set; the simulator its most recent 1000


@dataclass(frozen=True)
class LoraConfig:
    """vLLM's LoRA flags: the served adapters (name -> path), ``--max-loras`` (vLLM's default 1),
    ``--max-cpu-loras`` (default: max_loras) and ``--max-lora-rank`` (default 16)."""

    modules: dict[str, str]
    max_loras: int = 1
    max_cpu_loras: int = 0
    max_lora_rank: int = 16

    def __post_init__(self) -> None:
        if self.max_loras < 1:
            raise ValueError(f"--max-loras must be at least 1, got {self.max_loras}")
        if self.max_cpu_loras and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"--max-cpu-loras ({self.max_cpu_loras}) must be >= --max-loras ({self.max_loras})")

    @property
    def cpu_capacity(self) -> int:
        return self.max_cpu_loras or self.max_loras


def parse_modules(specs: list[str], count: int) -> dict[str, str]:
    """``--lora-modules name=path ...`` and ``--lora-adapters N`` as {name: path}; ValueError for a spec without '='."""
    modules = {name: f"/adapters/{name}" for name in numbered_adapters(count)}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            raise ValueError(f"--lora-modules expects NAME=PATH, got {spec!r}")
        modules[name] = path
    return modules


def adapter_bytes(profile: Profile, rank: int) -> float:
    """Bytes of one rank-``rank`` adapter on the attention projections: A (d_in x r) and B (r x d_out) per module and
    layer, in the weights' dtype; the hidden size taken as the query width."""
    kv_width = profile.num_kv_heads * profile.head_dim
    hidden = profile.q_width
    in_out = (hidden + profile.q_width) + 2 * (hidden + kv_width) + (profile.q_width + hidden)
    return float(rank * in_out * profile.layers * profile.weight_bytes)


class LoraSlots:
    """The engine's adapters: which are resident (host LRU) and in GPU slots (LRU), the requests of each (waiting,
    running), and the deferred requests (skipped for want of a slot, not yet scheduled)."""

    def __init__(self, config: LoraConfig, profile: Profile) -> None:
        self.config = config
        self.max_loras = config.max_loras
        size = adapter_bytes(profile, config.max_lora_rank)
        self.load_s = profile.lora_load_fixed_s + size / profile.lora_load_bandwidth
        self.activate_s = size / profile.lora_activate_bandwidth
        self.token_factor = profile.lora_token_factor
        self.resident: OrderedDict[str, None] = OrderedDict()
        self.slots: OrderedDict[str, None] = OrderedDict()
        self.pending_s = 0.0  # load time owed by runtime loads (/v1/load_lora_adapter), paid by the next step
        self.loads = 0  # adapters read from disk
        self.activations = 0  # adapters copied into a GPU slot (swaps, once the slots are full)
        self.requests: dict[str, dict[Sequence, bool]] = {}  # adapter -> {its request: running}
        self.deferred: set[Sequence] = set()
        self.info: OrderedDict[tuple[str, str], float] = OrderedDict()  # label set -> unix time it was last set

    # --- admission: vLLM's max_loras rule
    def admits(self, seq: Sequence, batch: set[str]) -> bool:
        """Whether ``seq`` may join a step whose scheduled requests use the adapters ``batch``; when not, it is
        deferred, as vLLM's scheduler defers it."""
        if not seq.adapter or seq.adapter in batch or len(batch) < self.max_loras:
            return True
        self.deferred.add(seq)
        return False

    # --- host and GPU residency, paid in step time
    def load(self, name: str) -> None:
        """A runtime load (/v1/load_lora_adapter): vLLM reads it into its host cache at once."""
        self.pending_s += self._make_resident(name)

    def _make_resident(self, name: str) -> float:
        if name in self.resident:
            self.resident.move_to_end(name)
            return 0.0
        self.resident[name] = None
        if len(self.resident) > self.config.cpu_capacity:
            self.resident.popitem(last=False)
        self.loads += 1
        return self.load_s

    def step_seconds(self, duration: float, scheduled: list[tuple[Sequence, int]], num_tokens: int) -> float:
        """The step's ``duration`` with LoRA: its LoRA tokens' extra cost, and the load and slot copies of the
        adapters it uses that are not resident or not in a slot."""
        extra, self.pending_s = self.pending_s, 0.0
        lora_tokens = 0
        for name in dict.fromkeys(seq.adapter for seq, _ in scheduled if seq.adapter):
            extra += self._make_resident(name)
            if name in self.slots:
                self.slots.move_to_end(name)
            else:
                self.slots[name] = None
                if len(self.slots) > self.max_loras:
                    self.slots.popitem(last=False)
                self.activations += 1
                extra += self.activate_s
        lora_tokens = sum(n for seq, n in scheduled if seq.adapter)
        return duration * (1.0 + self.token_factor * lora_tokens / max(num_tokens, 1)) + extra

    # --- vLLM's LoRARequestStates: the requests of each adapter
    def queued(self, seq: Sequence) -> None:
        self._set(seq, False)

    def scheduled(self, seq: Sequence) -> None:
        self.deferred.discard(seq)
        self._set(seq, True)

    def finished(self, seq: Sequence) -> None:
        self.deferred.discard(seq)
        self._set(seq, None)

    def _set(self, seq: Sequence, running: bool | None) -> None:
        if not seq.adapter:
            return
        seqs = self.requests.setdefault(seq.adapter, {})
        if running is None:
            seqs.pop(seq, None)
        else:
            seqs[seq] = running
        if not seqs:
            del self.requests[seq.adapter]

    def in_flight(self) -> list[str]:
        """The adapters with a waiting or running request, in the order they got one. vLLM lists these same names
        in both labels of vllm:lora_requests_info (its per-adapter table holds both counts, and the labels are
        its keys)."""
        return list(self.requests)

    def record_info(self) -> None:
        """Set the gauge of the current label set to now, as vLLM does after every engine step."""
        names = ",".join(self.in_flight())
        self.info[(names, names)] = time.time()
        self.info.move_to_end((names, names))
        if len(self.info) > MAX_INFO_LABEL_SETS:
            self.info.popitem(last=False)

    def info_family(self) -> GaugeMetricFamily:
        """vllm:lora_requests_info as vLLM exports it (vllm/v1/metrics/loggers.py): one sample per label set it ever
        set, valued the unix time it was last set (the current set is the newest), adapter names comma-joined."""
        family = GaugeMetricFamily(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
        )
        for (running, waiting), when in self.info.items():
            family.add_metric([str(self.max_loras), waiting, running], when)
        return family


def adapter_request(body: dict, modules: dict[str, str], base: str, loading: bool) -> tuple[str, str]:
    """The (name, path) of a /v1/load_lora_adapter (``loading``) or /v1/unload_lora_adapter body, with vLLM's errors
    (vllm/entrypoints/openai/models/serving.py): both fields needed to load, not the base model's name, not loaded
    twice without load_inplace; an unknown name cannot be unloaded (404)."""
    name, path = body.get("lora_name"), body.get("lora_path")
    if not loading:
        if not isinstance(name, str) or not name:
            raise ApiError("'lora_name' needs to be provided to unload a LoRA adapter.", param="lora_name")
        if name not in modules:
            raise ApiError(f"The lora adapter '{name}' cannot be found.", status=404, param="lora_name")
        return name, modules[name]
    if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
        raise ApiError("Both 'lora_name' and 'lora_path' must be provided.", param="lora_name")
    if name == base:
        raise ApiError(f"The lora adapter '{name}' conflicts with a served base model.", param="lora_name")
    if name in modules and body.get("load_inplace") is not True:
        raise ApiError(
            f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, set "
            "'load_inplace' to True.",
            param="lora_name",
        )
    return name, path


def adapter_cards(models: dict, modules: dict[str, str], base: str) -> dict:
    """/v1/models with a card per adapter after the base model's, its ``parent`` the base model and no max_model_len
    (as vLLM's vllm/entrypoints/openai/models/serving.py lists them)."""
    base_card = models["data"][0]
    cards = [
        base_card | {"id": name, "root": path, "parent": base, "max_model_len": None} for name, path in modules.items()
    ]
    return models | {"data": [base_card, *cards]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """vllm serve's LoRA flags, and ``--lora-adapters N`` to serve N adapters without naming them."""
    parser.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters as models (lora.py)")
    parser.add_argument(
        "--lora-modules", nargs="+", default=[], metavar="NAME=PATH", help="adapters served from the start"
    )
    parser.add_argument(
        "--lora-adapters", type=int, default=0, metavar="N", help=f"also serve {ADAPTER_PREFIX}0 .. N-1 (implies LoRA)"
    )
    parser.add_argument("--max-loras", type=int, default=1, help="most distinct adapters in one batch (%(default)s)")
    parser.add_argument(
        "--max-cpu-loras", type=int, default=0, help="adapters kept in host memory (default: --max-loras)"
    )
    parser.add_argument("--max-lora-rank", type=int, default=16, help="adapter rank: its size (%(default)s)")


def config_from_args(args: argparse.Namespace) -> LoraConfig | None:
    """The LoRA configuration the flags ask for, None without --enable-lora, --lora-modules or --lora-adapters."""
    if not (args.enable_lora or args.lora_modules or args.lora_adapters):
        return None
    modules = parse_modules(args.lora_modules, args.lora_adapters)
    return LoraConfig(modules, args.max_loras, args.max_cpu_loras, args.max_lora_rank)
