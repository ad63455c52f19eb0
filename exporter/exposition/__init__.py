"""Metric families, per-series values and their renderings: text, OpenMetrics, protobuf."""
