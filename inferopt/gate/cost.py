"""Cost per successful task (SPEC G3): device time x hourly price plus energy x electricity price, divided by the
requests that succeeded — so throughput, failures and power fold into one number.

    device_cost_usd = device_seconds / 3600 x price_per_hour_usd
    energy_cost_usd = energy_j / 3.6e6 x usd_per_kwh
    cost_per_success_usd = (device_cost_usd + energy_cost_usd) / n_successful

Failed, rejected and timed-out requests cost device time but are not in the denominator: a change that fails
more requests costs more per success, as it should. Cloud prices usually include power: set `usd_per_kwh=0`
there to avoid counting energy twice; on owned hardware use the machine's amortised hourly cost and the tariff.

What this module deliberately does not do: measure power (`energy_estimate_j` is a TDP-based ESTIMATE, labelled
as such; feed measured joules from NVML or RAPL when you have them), or know prices (they come from the hardware
config and are rough estimates).
"""

from __future__ import annotations

import math
from typing import Any

J_PER_KWH = 3.6e6


def energy_estimate_j(duration_s: float, tdp_w: float, utilisation: float, idle_fraction: float = 0.0) -> float:
    """ESTIMATED energy in joules: duration x TDP x (idle_fraction + (1 - idle_fraction) x utilisation).

    `utilisation` (0..1) is the share of TDP drawn above idle, e.g. the measured busy fraction or MBU.
    With the default `idle_fraction=0` this is simply duration x TDP x utilisation; real devices draw
    roughly 10-30 % of TDP at idle, so pass that to avoid under-counting lightly loaded runs.
    """
    if duration_s < 0 or tdp_w < 0:
        raise ValueError("duration_s and tdp_w must be >= 0")
    if not 0.0 <= utilisation <= 1.0 or not 0.0 <= idle_fraction <= 1.0:
        raise ValueError("utilisation and idle_fraction must be in [0, 1]")
    return duration_s * tdp_w * (idle_fraction + (1.0 - idle_fraction) * utilisation)


def cost_per_successful_task(
    device_seconds: float,
    price_per_hour_usd: float,
    energy_j: float | None,
    usd_per_kwh: float,
    n_successful: int,
) -> dict[str, Any]:
    """The cost breakdown in USD and the cost per successful task.

    Returns device_cost_usd, energy_cost_usd (0 when `energy_j` is None; `energy_included` says so),
    total_cost_usd, n_successful and cost_per_success_usd — None when nothing succeeded (infinite cost
    per success, reported as None so tables and JSON stay valid).
    """
    if device_seconds < 0 or price_per_hour_usd < 0 or usd_per_kwh < 0 or n_successful < 0:
        raise ValueError("device_seconds, price_per_hour_usd, usd_per_kwh and n_successful must be >= 0")
    device_cost = device_seconds / 3600.0 * price_per_hour_usd
    energy_included = energy_j is not None and math.isfinite(energy_j)
    energy_cost = (energy_j / J_PER_KWH * usd_per_kwh) if energy_included else 0.0  # type: ignore[operator]
    total = device_cost + energy_cost
    return {
        "device_cost_usd": device_cost,
        "energy_cost_usd": energy_cost,
        "energy_included": energy_included,
        "total_cost_usd": total,
        "n_successful": int(n_successful),
        "cost_per_success_usd": total / n_successful if n_successful > 0 else None,
    }
