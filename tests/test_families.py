"""The one declaration of every metric family: consistent in itself, and the docs follow it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.config import LABEL_NAME, RESERVED_LABELS
from exporter.exposition.families import (
    BY_KEY,
    FAMILIES,
    OBJECTIVE_FAMILY,
    PREFIX,
    PROBE_LABELS,
    PROCESS_FAMILIES,
    Family,
    MetricType,
    Objective,
    Scope,
    bucket_families,
    families,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"


def served_name(spec) -> str:
    """The name a family has on the text page (counters with `_total`)."""
    return spec.name + "_total" if spec.type is MetricType.COUNTER else spec.name


def test_every_key_has_exactly_one_family() -> None:
    assert [spec.key for spec in FAMILIES] == list(dict.fromkeys(spec.key for spec in FAMILIES))
    assert set(BY_KEY) == set(Family)


def test_names_are_unique_and_never_another_familys_sample() -> None:
    names = [spec.name for spec in FAMILIES]
    assert len(names) == len(set(names))
    for spec in FAMILIES:
        assert spec.name.startswith(PREFIX), spec.name
        assert not spec.name.endswith("_total"), "a counter's name is served with _total added"
        others = {sample for other in FAMILIES if other is not spec
                  for sample in (other.name, *other.sample_names)}
        assert not {spec.name, *spec.sample_names} & others, spec.name


def test_on_demand_families_are_gauges_of_their_own_names() -> None:
    for spec in families(Scope.ONDEMAND):
        assert spec.type is MetricType.GAUGE
        assert spec.name.startswith(f"{PREFIX}ondemand_")
    for spec in (*families(Scope.PROBE), *families(Scope.EXPORTER)):
        assert not spec.name.startswith(f"{PREFIX}ondemand_")


@pytest.mark.parametrize("spec", FAMILIES, ids=lambda s: s.key.value)
def test_labels_and_values(spec) -> None:
    for label in spec.labels:
        assert LABEL_NAME.match(label) and label != "le", label
        # (the exporter's own families about a target or model name them as probes do)
        assert label not in PROBE_LABELS or spec.scope is Scope.EXPORTER
    if spec.scope is not Scope.EXPORTER:
        assert len(spec.labels) <= 1 or spec.info  # an info family: its labels per series
        # A constant label of the config must never take the name of a family's own label.
        assert set(spec.labels) <= RESERVED_LABELS
    assert len(spec.values) == len(set(spec.values))
    assert not spec.values or len(spec.labels) == 1
    assert spec.help.strip() and "\n" not in spec.help


@pytest.mark.parametrize("spec", FAMILIES, ids=lambda s: s.key.value)
def test_buckets_belong_to_histograms_only(spec) -> None:
    if spec.type is MetricType.HISTOGRAM:
        assert spec.buckets and list(spec.buckets) == sorted(set(spec.buckets))
        assert all(edge > 0 for edge in spec.buckets)
    else:
        assert spec.buckets == ()


def test_bucket_keys_and_objectives_are_histograms() -> None:
    assert set(bucket_families()) == {spec.key for spec in FAMILIES
                                      if spec.type is MetricType.HISTOGRAM}
    assert set(OBJECTIVE_FAMILY) == set(Objective)
    for objective, family in OBJECTIVE_FAMILY.items():
        spec = BY_KEY[family]
        assert spec.type is MetricType.HISTOGRAM and spec.scope is Scope.PROBE
        assert family.value == objective.value


# -- the docs' tables --------------------------------------------------------------------------

def _section(text: str, heading: str) -> str:
    """From `heading` to the next heading of the same or a higher level."""
    start = text.index(heading)
    level = len(heading.split(" ", 1)[0])
    following = re.search(rf"^#{{1,{level}}} ", text[start + len(heading):], flags=re.MULTILINE)
    return text[start:start + len(heading) + following.start()] if following else text[start:]


def _table_names(section: str) -> set[str]:
    """The metric names in the first column of a section's tables (labels stripped)."""
    names = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names |= {re.sub(r"\{.*\}", "", name) for name in re.findall(r"`([^`]+)`", first)}
    return names


def test_the_metrics_page_lists_exactly_the_declared_families() -> None:
    table = _section((DOCS / "metrics.md").read_text(encoding="utf-8"), "## The families")
    declared = {served_name(spec) for spec in (*families(Scope.PROBE), *families(Scope.EXPORTER))}
    assert _table_names(table) == declared | {"process_*"}
    assert all(name.startswith("process_") for name in PROCESS_FAMILIES)


def test_the_on_demand_table_lists_exactly_the_declared_families() -> None:
    section = _section((DOCS / "operating.md").read_text(encoding="utf-8"),
                       "### On-demand probes")
    assert _table_names(section) == {spec.name for spec in families(Scope.ONDEMAND)}
