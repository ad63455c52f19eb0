"""What a discovering target made of its gateway's list: listed, kept, probed — one count that
`check --discover`, the discovery metrics, the status page, `/api/v1/results` and `/config` all
show, so no surface counts the same list its own way.

- listed: entries the gateway sent (`Catalog.listed`);
- refused: names refused (not a usable label: empty, too long, control characters, a secret);
- kept: listed models the target keeps — named in `models:`, or passing `discover.include` /
  `exclude` (a configured model on the list counts here: it is on the list and it is probed);
- probed: kept models that have series here (after the caps, the probes each model can serve
  and the shard);
- trimmed: kept models left out by `discover.max_models` or `global.max_series`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from exporter.config.expand import discovered
from exporter.config.model import Config, Target
from exporter.providers.gateway import Catalog


@dataclass(frozen=True, slots=True)
class DiscoveryCounts:
    """One discovering target's list, counted once for every surface."""

    listed: int
    refused: int
    kept: int
    probed: int
    trimmed: int
    bad_prices: int

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return asdict(self)


def discovery_counts(config: Config, target: Target, catalog: Catalog) -> DiscoveryCounts:
    """The counts of `target`'s list `catalog` under `config` (its series after expansion)."""
    on_list = catalog.by_name
    configured = {m for m in (*target.models, *target.model_probes) if m in on_list}
    kept = len(configured) + len(discovered(target, catalog))
    probed = len({s.model for s in config.series
                  if s.target.name == target.name and s.model in on_list})
    return DiscoveryCounts(catalog.listed, catalog.refused, kept, probed,
                           config.trimmed.get(target.name, 0), catalog.bad_prices)
