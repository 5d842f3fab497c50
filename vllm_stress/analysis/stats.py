"""Statistics over per-level tables (one row per level): repeat means with Student-t intervals, Welch's interval of
a difference, and the peak, saturation point, knee, scaling and recommendations that docs/concepts/analysis.md
defines."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vllm_stress.analysis.levels import COST_FIELDS
from vllm_stress.core import bound, capacity

KNEE_MIN_EXCESS = 0.1
UNSTABLE_LIMIT = 0.10
BALANCED_SHARE = 0.6  # the share of the peak's throughput a balanced level delivers at least
TRUST_FIELDS = ("output_tokens_per_s", "total_tokens_per_s", "e2e_p99_s")
PEAK_FIELD = "output_tokens_per_s"
NOT_AVERAGED = ("users", "run", "partial", "steady", "steady_reason")

# Student t 0.975 quantiles for 1..30 degrees of freedom; above 30 the Cornish-Fisher expansion is exact to 1e-4.
T_975 = (
    12.7062,
    4.3027,
    3.1824,
    2.7764,
    2.5706,
    2.4469,
    2.3646,
    2.3060,
    2.2622,
    2.2281,
    2.2010,
    2.1788,
    2.1604,
    2.1448,
    2.1314,
    2.1199,
    2.1098,
    2.1009,
    2.0930,
    2.0860,
    2.0796,
    2.0739,
    2.0687,
    2.0639,
    2.0595,
    2.0555,
    2.0518,
    2.0484,
    2.0452,
    2.0423,
)
Z_975 = 1.959964


def t_975(df: int) -> float:
    """The two-sided 95 % Student t quantile for ``df`` degrees of freedom (NaN for df < 1)."""
    if df < 1:
        return math.nan
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def welch_ci95(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """The half-width of the 95 % confidence interval of the difference of two means, from each sample's standard
    deviation and size (Welch-Satterthwaite degrees of freedom, rounded down); 0 when neither sample varies."""
    var_a, var_b = sd_a**2 / n_a, sd_b**2 / n_b
    if var_a + var_b == 0:
        return 0.0
    dof = (var_a + var_b) ** 2 / ((var_a**2 / (n_a - 1) if var_a else 0) + (var_b**2 / (n_b - 1) if var_b else 0))
    return t_975(max(1, math.floor(dof))) * math.sqrt(var_a + var_b)


def aggregate_repeats(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per level: the mean of every field over the runs that reached it, ``runs``, ``partial`` (any run), and with
    more than one run ``<field>_std`` (sample standard deviation), ``<field>_ci95`` (CI half-width) and
    ``unstable`` (the TRUST_FIELDS whose spread is too wide)."""
    fields = [c for c in per_run.columns if c not in NOT_AVERAGED]
    by_level = per_run.groupby("users")
    parts = [
        by_level[fields].mean(),
        pd.DataFrame(
            {
                "runs": by_level.size(),
                "partial": by_level["partial"].any(),
                "steady": by_level["steady"].all(),
                "steady_reason": pd.Series({users: repeat_reason(runs) for users, runs in by_level}),
            }
        ),
    ]
    if per_run["run"].nunique() > 1:
        std = by_level[fields].std(ddof=1)
        samples = by_level[fields].count()  # per field: the runs where it has a value
        ci95 = std * (samples - 1).map(t_975) / samples**0.5
        parts += [std.add_suffix("_std"), ci95.add_suffix("_ci95")]
    result = pd.concat(parts, axis=1).rename_axis("users").copy()  # few blocks: the summary adds columns to it
    if per_run["run"].nunique() > 1:
        result["unstable"] = unstable_fields(result)
    return result.reset_index()


def repeat_reason(runs: pd.DataFrame) -> str:
    """A level's steady_reason over its runs: the first unsteady run's (with how many runs were unsteady), else the
    first run's."""
    unsteady = runs.loc[~runs["steady"], "steady_reason"]
    if unsteady.empty:
        return str(runs["steady_reason"].iloc[0])
    return unsteady.iloc[0] if len(runs) == 1 else f"{len(unsteady)} of {len(runs)} runs unsteady: {unsteady.iloc[0]}"


def unstable_fields(levels: pd.DataFrame) -> pd.Series:
    """Per level, the TRUST_FIELDS whose CV or relative CI half-width exceeds UNSTABLE_LIMIT."""
    too_wide = pd.DataFrame(
        {
            name: (levels[f"{name}_std"] > UNSTABLE_LIMIT * levels[name].abs())
            | (levels[f"{name}_ci95"] > UNSTABLE_LIMIT * levels[name].abs())
            for name in TRUST_FIELDS
            if name in levels
        }
    )
    return too_wide.apply(lambda flags: [name for name, wide in flags.items() if wide], axis=1)


def underloaded(levels: pd.DataFrame) -> pd.Series:
    """Levels whose requests in flight averaged under UNDERLOADED_RATIO x users: the server never saw the target
    concurrency (think time, a client connection cap, a gateway limit or a client that cannot keep up). An open loop
    or a trace replay (its rows have a schedule lag) sets its own load: its users are only a pool."""
    closed = levels["schedule_lag_p50_s"].isna() if "schedule_lag_p50_s" in levels else True
    return (levels["concurrency_mean"] < bound.UNDERLOADED_RATIO * levels["users"]) & closed


def bounds(levels: pd.DataFrame) -> pd.Series:
    """Why each level's throughput is what it is (vllm_stress.core.bound.level_bound), "" where nothing says."""
    return (
        levels.apply(bound.level_bound, axis=1).astype(str) if not levels.empty else pd.Series("", index=levels.index)
    )


def router_bounds(levels: pd.DataFrame, replicas: pd.DataFrame) -> pd.Series:
    """Each level's bound, led by vllm_stress.core.bound.router_note when one replica behind the router finished far
    more than its share of the level's requests or queued while another idled (``replicas``: REPLICA_LEVEL_COLUMNS
    rows of the config)."""
    notes = [
        bound.router_note(rows.astype({"request_share": float}).to_dict("records"))
        for rows in (replicas[replicas["users"] == users] for users in levels["users"])
    ]
    return pd.Series(
        ["; ".join(filter(None, (note, verdict))) for note, verdict in zip(notes, levels["bound"], strict=True)],
        index=levels.index,
    )


def costs(levels: pd.DataFrame, gpu_hour_price: float, gpus: int) -> pd.DataFrame:
    """The COST_FIELDS of each level: what a million tokens cost at its mean throughput (a mean of per-run costs
    would weigh the slow runs more: cost is the inverse of throughput)."""
    return pd.DataFrame(
        {
            cost: levels[field].map(
                lambda tokens_per_s: capacity.usd_per_million_tokens(tokens_per_s, gpu_hour_price, gpus)
            )
            for field, cost in COST_FIELDS.items()
        },
        index=levels.index,
    )


def steady_levels(levels: pd.DataFrame) -> pd.DataFrame:
    """The levels that can be the peak, the saturation point, the knee or a recommendation."""
    return levels[levels["steady"].astype(bool)]


def throughput_field(levels: pd.DataFrame) -> str:
    """What the peak is measured in: output tok/s, or requests/s when no level has token counts (no usage)."""
    return PEAK_FIELD if levels[PEAK_FIELD].notna().any() else "requests_per_s"


def peak_level(levels: pd.DataFrame, field: str = PEAK_FIELD) -> pd.Series:
    """The row of the level with the highest mean ``field`` (the smallest such level on ties)."""
    return levels.iloc[int(np.nanargmax(levels[field].to_numpy(float)))]


def saturation_users(levels: pd.DataFrame, field: str = PEAK_FIELD) -> int:
    """The smallest level whose ``field`` is within SATURATION_TOLERANCE of the best level's
    (vllm_stress.core.capacity.saturation_users)."""
    return capacity.saturation_users(dict(zip(levels["users"].astype(int), levels[field].astype(float), strict=True)))


def knee_users(levels: pd.DataFrame, field: str = PEAK_FIELD) -> int | None:
    """The Kneedle knee of ``field`` against users: the level whose min-max scaled throughput exceeds the diagonal most;
    None below KNEE_MIN_EXCESS or with fewer than three levels."""
    curve = levels.sort_values("users")
    if len(curve) < 3:
        return None
    x = scaled(curve["users"].to_numpy(float))
    y = scaled(curve[field].to_numpy(float))
    excess = y - x
    if not np.nanmax(excess) >= KNEE_MIN_EXCESS:
        return None
    return int(curve["users"].iloc[int(np.nanargmax(excess))])


def scaled(values: np.ndarray) -> np.ndarray:
    """Min-max scaling to [0, 1] (all zeros for a constant series)."""
    span = np.nanmax(values) - np.nanmin(values)
    return (values - np.nanmin(values)) / span if span > 0 else np.zeros_like(values)


def scaling_factor(levels: pd.DataFrame, low: int, high: int, field: str = PEAK_FIELD) -> float:
    """``field`` at level ``high`` divided by ``field`` at level ``low`` (the MI325X tuning guide's "Scaling (10->200)", docs/concepts/sources.md §1.1); NaN when
    the low level has no throughput."""
    by_users = levels.set_index("users")[field]
    return float(by_users[high] / by_users[low]) if by_users[low] else math.nan


def recommendations(levels: pd.DataFrame, field: str = PEAK_FIELD) -> dict[str, int]:
    """Low latency (the smallest level), balanced (balanced_users) and high throughput (the saturation point)
    concurrency."""
    ordered = levels.sort_values("users")
    return {
        "low_latency": int(ordered["users"].iloc[0]),
        "balanced": balanced_users(ordered, field),
        "high_throughput": saturation_users(ordered, field),
    }


def balanced_users(levels: pd.DataFrame, field: str = PEAK_FIELD) -> int:
    """The level with the lowest p99 e2e among those whose ``field`` is at least BALANCED_SHARE of the best level's
    (the smallest on ties, and the smallest of them when none has a p99 e2e)."""
    enough = levels[levels[field] >= BALANCED_SHARE * levels[field].max()]
    return int(enough.sort_values(["e2e_p99_s", "users"], na_position="last")["users"].iloc[0])
