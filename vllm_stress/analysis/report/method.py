"""The report's Method section: how every number in it was obtained, in the words and with the limits the analysis
uses (each limit read from where it is defined), and the glossary of the level fields."""

from __future__ import annotations

from vllm_stress.analysis import levels as level_defs
from vllm_stress.analysis import stats
from vllm_stress.analysis.report.render import Block, Bullets, Heading
from vllm_stress.analysis.summary import Summary
from vllm_stress.core import bound, capacity
from vllm_stress.core import steady as steady_rule
from vllm_stress.core.numbers import dollars, seconds
from vllm_stress.core.schema import CLIENT_CPU_LIMIT_PERCENT, CLIENT_LOOP_LAG_LIMIT_MS, CLIENT_READ_BEHIND_SHARE


def method_blocks(summary: Summary) -> list[Block]:
    """How every number was obtained."""
    definitions = [
        "Window: with levels.csv, [hold_start, hold_end) of each level (ramp-up and the drain after hold_end "
        "excluded); without it, from the level's first request start plus a warm-up margin (its median e2e, at most "
        "half the level) to its last request start (the drain after it excluded). A level the run never held (it "
        "stopped during the level's ramp or warm-up) gets a window from its rows and is never steady.",
        f"Steady state: a window is steady when it holds at least {steady_rule.MIN_LIFETIMES:.0f} request lifetimes "
        f"(window / e2e p50), each half has at least {steady_rule.MIN_PER_HALF} measured requests, and its two halves "
        f"agree: completions, output tok/s and requests in flight within {steady_rule.RATE_TOLERANCE:.0%} (or, "
        f"when more, {steady_rule.NOISE_Z:.0f} standard deviations of the halves' Poisson completion count), and "
        "e2e p50 and TTFT p50 moving by at most "
        f"{steady_rule.LATENCY_TOLERANCE:.0%} of the e2e p50. Levels that are not steady are shown with the first "
        "check they failed and are never the peak, the saturation point, the knee or a recommendation.",
        "Attribution: a request belongs to the level in its users column (the level it started in) and counts where "
        "it ended. Aborted requests (the run stopped its users mid-stream) are neither successes nor failures; "
        "failures are every other error; successful requests whose usage is off their token targets, or that the "
        "server aborted, are counted but not timed; the rest (measured requests) give req/s, goodput and every "
        "latency percentile. Rows merged from several workers are treated as one population with one window.",
        "Throughput (tok/s): what the server produced during the window, from every request whatever its level or "
        "outcome, / window length. Each request's output tokens are spread evenly from its first token (its start "
        "when it has no TTFT) to its end and the part inside the window counts; its prompt tokens count when its "
        "first token came. Failed or aborted streams count the output they received (chunks when the server sent no "
        "usage). This stays right when requests last as long as the window or longer (long outputs, queueing at high "
        "concurrency), where counting the requests that ended in the window would be lumpy or empty. The timeline "
        "plots spread output tokens per second the same way.",
        "Percentiles: linear interpolation between samples (numpy's default, as vllm bench serve); ITL from "
        "itl_histogram.csv buckets (smallest bucket reaching the quantile), filled by the load generators from the "
        "level's successful streams that ended during its hold.",
        f"Peak: the steady level with the highest mean output tok/s (requests/s when no level has token counts). "
        f"Saturation point: the smallest steady level within {capacity.SATURATION_TOLERANCE:.0%} of the peak.",
        f"Knee: Kneedle — users and output tok/s scaled to [0, 1], the level where throughput exceeds the diagonal "
        f"most; none when that excess is below {stats.KNEE_MIN_EXCESS} or with fewer than three levels.",
        "Scaling: output tok/s at the second level divided by output tok/s at the first (total tok/s gives the same "
        "ratio when prompt and output lengths are fixed).",
        f"Underloaded: a level whose requests in flight (time-averaged over its window) stay under "
        f"{bound.UNDERLOADED_RATIO:.0%} of its users — the server never saw the target concurrency (think time, a "
        "client connection cap, a gateway limit or a client that cannot keep up), so its numbers describe a lower load.",
        "Why a level is bound (the flag after its users, and 'Why it saturates there'): 'server-bound: waiting "
        "requests' when requests queue inside the server's engine (server_waiting_mean ≥ 1 and ≥ "
        f"{bound.QUEUED_SHARE:.0%} of server_in_system_mean), named 'batch-bound: max_num_seqs N reached' when "
        f"the running batch sat at {bound.BATCH_FULL_SHARE:.0%} of the launch's --max-num-seqs (or one sequence short of "
        "it), 'memory-bound' when "
        f"the KV cache was {bound.KV_FULL_SHARE:.0%} full or the server preempted; "
        f"'client-bound' when a load generator reached {CLIENT_CPU_LIMIT_PERCENT} % CPU (Locust's warning limit) "
        f"or its event loop ran its timers {CLIENT_LOOP_LAG_LIMIT_MS:.0f} ms late on average ('Client lag': it "
        "waited for a core that something else held, such as a server on the same host, and its timestamps are late "
        "by as much), or read its chunks (p99 of the read time - the kernel's arrival time) "
        f"{CLIENT_READ_BEHIND_SHARE:.0%} of the level's e2e p50 and {CLIENT_LOOP_LAG_LIMIT_MS:.0f} ms late (its closed-loop users sent their next requests "
        "about as late, so the server was offered less load), and the server did not queue; 'client/gateway-bound' "
        "when vLLM's HTTP layer held under "
        f"{bound.UNDERLOADED_RATIO:.0%} of the users (requests were held back before they reached it), "
        "'gateway/frontend-bound' instead when the load generators' CPU and loop lag were under their limits and "
        "they kept that many requests in flight (concurrency_mean); "
        "'frontend-bound' when the HTTP layer held the users but the engine did not (the rest of each request's time "
        "was in vLLM's frontend: HTTP, chat template, tokenization, detokenization, streaming), or when vLLM's API "
        f"server process used {bound.FRONTEND_CPU_LIMIT_PERCENT} % of a core (requests then wait in its event loop "
        "before its HTTP layer times them; short of that, time before vLLM's HTTP layer cannot be told apart from a "
        "gateway by vLLM's metrics). What a layer held "
        "comes from Little's law on the server's own histograms: the sum of the latencies it recorded in the scrape "
        "intervals wholly inside the window divided by the time they cover, known to ± server_load_margin (the mean "
        'e2e / that time) of itself; a shortfall is judged only beyond that margin ("held 89 ± 36 of 100"). With the server\'s request spans (--otlp-port) their TTFT split '
        f"decides the first: 'server-bound: N % of TTFT waiting in the scheduler' when the median request waited "
        f"{bound.QUEUE_TTFT_SHARE:.0%} of the median TTFT or more in vLLM's queue.",
        "Repeats: several runs of one label; per level the mean, sample standard deviation and 95 % CI half-width "
        f"t(0.975, n-1)·sd/√n. A level is flagged unstable when, for output tok/s, total tok/s or p99 e2e, the "
        f"coefficient of variation or the CI half-width exceeds {stats.UNSTABLE_LIMIT:.0%} of the mean.",
    ]
    if summary["slo"]:
        limits = ", ".join(f"{name} ≤ {seconds(limit)}" for name, limit in summary["slo"].items())
        definitions.append(
            f"Goodput: share of requests that succeeded with {limits} (TPOT counts as met when undefined)."
        )
    prices = {label: c for label, c in summary["configs"].items() if "gpu_hour_price" in c}
    if prices:
        priced = ", ".join(
            f"{label}: {c['gpus']} GPUs at {dollars(c['gpu_hour_price'])}/h" for label, c in prices.items()
        )
        definitions.append(
            f"Cost ({priced}): $ per million tokens = price per GPU-hour × GPUs / (tok/s × 3600) × 1e6, from a level's "
            "mean output (or total) tok/s: what serving at that level's throughput costs, the GPUs busy all hour."
        )
    glossary = [f"{name}: {text}" for name, text in level_defs.LEVEL_FIELDS.items()]
    return [Heading("Method"), Bullets(definitions), Heading("Fields", 3), Bullets(glossary)]
