"""llm-probe-exporter: measure how LLM endpoints feel to their users, for Prometheus."""

__version__ = "0.1.0"
