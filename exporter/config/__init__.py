"""The config: load `config.yaml` into a validated, frozen `Config`; every problem is located.

`load` (bounded bytes → YAML → `${VAR}` → per-section models → cross-field checks → a flat plan of
`Series`), `schema` (the file as written), `model` (the resolved config), `network` (each target's
proxy and TLS context), `types` (durations, secrets, limits), `errors` (`ConfigError` with located
problems), `secrets` (where credentials sit).
"""

from __future__ import annotations

from exporter.config.errors import ConfigError, ConfigProblem, format_location
from exporter.config.load import (
    MAX_CONFIG_BYTES,
    MAX_IMAGE_BYTES,
    MAX_KEY_BYTES,
    Loc,
    load_config,
    parse_config,
    reuse_unchanged,
    sources_digest,
)
from exporter.config.model import Config, Series, Target, redacted
from exporter.config.network import TLS, Proxy
from exporter.config.schema import (
    CONTROL,
    Api,
    AwsSigV4Config,
    BudgetConfig,
    Case,
    Expect,
    Family,
    GlobalConfig,
    ImageSpec,
    Message,
    NativeHistogramsConfig,
    Price,
    ProbeConfig,
    RawConfig,
    SimulatedModel,
    SimulatorConfig,
    TargetConfig,
    TLSConfig,
)
from exporter.config.types import (
    LABEL_NAME,
    MAX_BUCKETS,
    MAX_DURATION,
    MAX_LABEL_VALUE,
    MAX_MODEL_NAME,
    MAX_PROBE_NAME,
    MIN_INTERVAL,
    RESERVED_LABELS,
    Duration,
    PositiveDuration,
    Secret,
    format_duration,
    parse_duration,
)

__all__ = [
    "CONTROL",
    "LABEL_NAME",
    "MAX_BUCKETS",
    "MAX_CONFIG_BYTES",
    "MAX_DURATION",
    "MAX_IMAGE_BYTES",
    "MAX_KEY_BYTES",
    "MAX_LABEL_VALUE",
    "MAX_MODEL_NAME",
    "MAX_PROBE_NAME",
    "MIN_INTERVAL",
    "RESERVED_LABELS",
    "TLS",
    "Api",
    "AwsSigV4Config",
    "BudgetConfig",
    "Case",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "Duration",
    "Expect",
    "Family",
    "GlobalConfig",
    "ImageSpec",
    "Loc",
    "Message",
    "NativeHistogramsConfig",
    "PositiveDuration",
    "Price",
    "ProbeConfig",
    "Proxy",
    "RawConfig",
    "Secret",
    "Series",
    "SimulatedModel",
    "SimulatorConfig",
    "TLSConfig",
    "Target",
    "TargetConfig",
    "format_duration",
    "format_location",
    "load_config",
    "parse_config",
    "parse_duration",
    "redacted",
    "reuse_unchanged",
    "sources_digest",
]
