"""Command line: serve (default), check, probe, bench, simulate.

Commands import the heavy modules they need (asyncio, pydantic, aiohttp…) themselves, inside
their function — the one place function-level imports are allowed (tests/test_imports.py):
loading them takes ~0.3 s, and `serve` installs its signal handlers before that, so a SIGHUP or
SIGTERM right after start is handled rather than killing the process; and a command never loads
another's modules.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from exporter import __version__
from exporter.serve.signals import ProcessSignals

if TYPE_CHECKING:
    from exporter.commands.selection import Selection
    from exporter.config import Config

COMMANDS = ("serve", "check", "probe", "bench", "simulate")
# promslog's levels and formats (`warning` kept as an alias of `warn`).
LOG_LEVELS = ("debug", "info", "warn", "warning", "error")
LOG_FORMATS = ("logfmt", "json", "console")


def _shard(text: str) -> str:
    from exporter.config.shard import parse_shard

    try:
        parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _names(text: str) -> list[str]:
    """`a,b` → ["a", "b"] (a selection option, given once or repeated)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name")
    return names


def _add_selection(parser: argparse.ArgumentParser) -> None:
    for flag, dest, what in (("--target", "target", "target"), ("--model", "model", "model"),
                             ("--probe", "probe_name", "probe")):
        parser.add_argument(flag, dest=dest, action="extend", type=_names, default=[],
                            metavar="NAME[,NAME…]",
                            help=f"only this {what} (several: comma-separated or repeated)")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config.file", dest="config_file", default="config.yaml",
                        help="path to the YAML config (default: config.yaml)")
    parser.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                        help="probe only shard I of N (0-based; overrides global.shard)")
    parser.add_argument("--log.level", dest="log_level", default="info", choices=LOG_LEVELS,
                        help="only log lines at this level or above (default: info)")
    parser.add_argument("--log.format", dest="log_format", default=None, choices=LOG_FORMATS,
                        help="log line format (default: json for serve, console otherwise)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command."""
    parser = argparse.ArgumentParser(
        prog="llm-probe-exporter",
        description="Measure how LLM endpoints feel to their users; export it to Prometheus.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command")

    serve = commands.add_parser("serve", help="run the exporter daemon (default)")
    _add_common(serve)
    serve.add_argument("--web.listen-address", dest="listen", default=":9471",
                       help="address to serve /metrics and the status page on (default :9471)")
    serve.add_argument("--web.config.file", dest="web_config", default=None,
                       help="exporter-toolkit web config: TLS and basic auth on every endpoint")
    serve.add_argument("--web.disable-probe-endpoint", dest="probe_endpoint",
                       action="store_false",
                       help="turn off /probe (on-demand probes cost money)")
    serve.add_argument("--config.auto-reload", dest="auto_reload", action="store_true",
                       help="reload when the config file (or a key file) changes")
    serve.add_argument("--shutdown.grace", dest="shutdown_grace", type=float, default=10.0,
                       help="seconds to let in-flight probes finish on SIGTERM (default 10)")

    check = commands.add_parser(
        "check", help="validate the config and print its plan: probes, tokens and cost per "
                      "day, Prometheus series")
    _add_common(check)
    check.add_argument("--output", choices=("table", "json"), default="table",
                       help="table (default) or json (for CI)")
    check.add_argument("--discover", action="store_true",
                       help="ask each discovering target's gateway for its models now (one "
                            "GET /models each, with the target's key) and plan them")
    check.add_argument("--warn.series", dest="warn_series", type=int, default=None,
                       metavar="N", help="warn above N Prometheus series (default 10000)")
    check.add_argument("--allow-missing-secrets", dest="allow_missing_secrets",
                       action="store_true",
                       help="validate without the secrets (CI): an unset key variable or "
                            "unreadable key file is a warning, not an error")

    probe = commands.add_parser("probe", help="run probes once and print a table")
    _add_common(probe)
    _add_selection(probe)
    probe.add_argument("--json", action="store_true", help="print JSON instead of a table")
    probe.add_argument("--repeat", type=int, default=1, metavar="N",
                       help="run every selected probe N times, one round after another")
    probe.add_argument("--show-request", dest="show_request", action="store_true",
                       help="print the request each selected probe would send (key redacted) "
                            "and exit without sending it")

    bench = commands.add_parser(
        "bench", help="benchmark series at concurrency or rate levels; compare with a baseline")
    _add_common(bench)
    _add_selection(bench)
    bench.add_argument("--requests", type=int, default=None, metavar="N",
                       help="requests per level (default 20; with --duration: at most N)")
    bench.add_argument("--duration", default=None, metavar="D",
                       help="run each level this long (30s, 2m) instead of a request count")
    bench.add_argument("--warmup", type=int, default=1, metavar="K",
                       help="uncounted requests before each level (default 1)")
    bench.add_argument("--input-tokens", dest="input_tokens", default=None,
                       metavar="N,N,...",
                       help="sweep these prompt sizes: each selected series' prompt after a "
                            "generated context of about N input tokens (a nonce first)")
    bench.add_argument("--concurrency", default=None, metavar="K,K,...",
                       help="closed-loop levels: K requests in flight (default 1)")
    bench.add_argument("--rate", default=None, metavar="R,R,...",
                       help="open-loop levels: Poisson arrivals per second")
    bench.add_argument("--slo", default=None, metavar="ttft=500ms,tpot=50ms,e2e=10s",
                       help="objectives for goodput (ttft, tfa, tpot, e2e; tps as a minimum)")
    bench.add_argument("--knee-threshold", dest="knee_threshold", default="50%",
                       help="p95 TTFT rise over the lowest level that marks the knee "
                            "(default 50%%)")
    bench.add_argument("--seed", type=int, default=None,
                       help="seed for the Poisson arrivals of --rate")
    bench.add_argument("--connections", choices=("reuse", "fresh"), default="reuse",
                       help="reuse: keep-alive pool, as real clients (default); fresh: a new "
                            "TCP/TLS connection per request, as the daemon's probes")
    bench.add_argument("--workers", type=int, default=1, metavar="N",
                       help="run each level in N processes (past one CPU core), merged as one")
    bench.add_argument("--ramp", default="auto", metavar="auto|0|D",
                       help="spread the start of a closed loop's K streams over D (auto: one "
                            "warm-up request's mean duration; 0: all at once)")
    bench.add_argument("--output", type=Path, default=None, metavar="run.json",
                       help="write config, raw records and summaries as JSON")
    bench.add_argument("--csv", type=Path, default=None, metavar="run.csv",
                       help="write one CSV row per request")
    bench.add_argument("--report", type=Path, default=None, metavar="report.html",
                       help="write a self-contained HTML report with charts")
    bench.add_argument("--baseline", type=Path, default=None, metavar="base.json",
                       help="compare with an earlier --output run")
    bench.add_argument("--yes", action="store_true",
                       help="run even when the run's cost ceiling passes global.budget")
    bench.add_argument("--fail-on", dest="fail_on", default=None,
                       metavar="ttft_p95=+20%,cost=+15%",
                       help="exit 1 when a metric regressed beyond its limit vs --baseline, "
                            "3 when the requests are too few to decide")
    bench.add_argument("--confidence", default="95%", metavar="95%",
                       help="confidence of the --fail-on decisions' intervals (default 95%%)")

    simulate = commands.add_parser("simulate", help="run the embedded simulator standalone")
    simulate.add_argument("--listen", default=None, help="address (default 127.0.0.1:9472)")
    simulate.add_argument("--config.file", dest="config_file", default=None,
                          help="a file holding a simulator: section (alone, or in a whole "
                               "config: only that section is read)")
    simulate.add_argument("--log.level", dest="log_level", default="info", choices=LOG_LEVELS)
    simulate.add_argument("--log.format", dest="log_format", default=None, choices=LOG_FORMATS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llm-probe-exporter` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0] not in COMMANDS
                         and args_list[0] not in ("-h", "--help", "--version")):
        args_list.insert(0, "serve")
    signals = None
    if args_list[0] == "serve" and argv is None:  # the process's own command line
        signals = ProcessSignals()
        signals.install()
    args = build_parser().parse_args(args_list)
    from exporter.log import configure_logging, redacted_stdio

    with redacted_stdio():  # whatever prints, ours or a library's, passes the redactor
        configure_logging(args.log_level,
                          args.log_format or ("json" if args.command == "serve" else "console"))
        return _run(args, signals)


def _run(args: argparse.Namespace, signals: ProcessSignals | None) -> int:
    """Run the parsed command; one line on stderr for what stops it."""
    handlers = {"check": cmd_check, "probe": cmd_probe, "bench": cmd_bench,
                "simulate": cmd_simulate}
    try:
        if args.command == "serve":
            return cmd_serve(args, signals)
        return handlers[args.command](args)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # e.g. the simulator's port is taken
        print(f"error: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: one line, never a traceback (it could show a key)
        print(f"error: unexpected {type(exc).__name__} (a bug; please report it)",
              file=sys.stderr)
        return 70


def _load(path: str, shard: str | None = None) -> Config | None:
    from exporter.config import ConfigError, load_config

    try:
        return load_config(path, shard=shard)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def cmd_serve(args: argparse.Namespace, signals: ProcessSignals | None = None) -> int:
    """Run the daemon until SIGTERM/SIGINT; exit 0 after a graceful stop, 1 if it cannot start."""
    from exporter.config import ConfigError
    from exporter.config.address import parse_listen_address
    from exporter.log import get_logger
    from exporter.serve.daemon import Daemon, StartError, serve

    try:
        parse_listen_address(args.listen)
    except ValueError as exc:
        print(f"error: --web.listen-address: {exc}", file=sys.stderr)
        return 2
    log = get_logger()
    log.info("starting llm-probe-exporter", version=__version__,
             python_version=platform.python_version())
    config = _load(args.config_file, getattr(args, "shard", None))
    if config is None:
        return 1
    if args.web_config:
        from exporter.serve.webconfig import load_web_config

        try:
            load_web_config(args.web_config)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    daemon = Daemon(Path(args.config_file), args.listen, shutdown_grace=args.shutdown_grace,
                    shard=args.shard, probe_endpoint=args.probe_endpoint,
                    auto_reload=args.auto_reload, signals=signals,
                    web_config=Path(args.web_config) if args.web_config else None)
    try:
        serve(daemon, config)
    except (StartError, ConfigError) as exc:
        log.error("cannot start", error=str(exc))
        return 1
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the config and print its plan: probes, tokens, cost and Prometheus series.
    With `--output json` the answer is JSON whatever happens (errors inside, exit non-zero)."""
    from exporter.commands.check import print_failure_json, run_check
    from exporter.config import ConfigError, load_config
    from exporter.config.offline import Unresolved, load_without_secrets

    shard = getattr(args, "shard", None)
    unresolved: list[Unresolved] = []
    try:
        if args.allow_missing_secrets:
            config, unresolved = load_without_secrets(args.config_file, shard=shard)
        else:
            config = load_config(args.config_file, shard=shard)
        return run_check(config, args.config_file, output=args.output,
                         series_warning=args.warn_series, discover=args.discover,
                         unresolved=unresolved)
    except ConfigError as exc:
        if args.output != "json":
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print_failure_json(args.config_file, exc.message, exc.details)
        return 1
    except Exception as exc:  # a bug: still JSON for a CI that parses it, never a traceback
        if args.output != "json":
            raise
        print_failure_json(args.config_file,
                           f"unexpected {type(exc).__name__} (a bug; please report it)")
        return 70


def _selection(args: argparse.Namespace) -> Selection:
    from exporter.commands.selection import Selection

    return Selection(*(tuple(dict.fromkeys(names))
                       for names in (args.target, args.model, args.probe_name)))


def cmd_probe(args: argparse.Namespace) -> int:
    """Run the selected probes once; exit 1 unless all succeeded."""
    import asyncio

    from exporter.commands.probe import run_probe_command

    config = _load(args.config_file, getattr(args, "shard", None))
    if config is None:
        return 1
    if args.show_request:
        return _show_requests(config, _selection(args))
    return asyncio.run(run_probe_command(config, _selection(args), as_json=args.json,
                                         repeat=args.repeat))


def _show_requests(config: Config, selection: Selection) -> int:
    """`probe --show-request`: print the requests, send nothing."""
    from exporter.commands.selection import select_series
    from exporter.commands.show import show_requests

    try:
        series = select_series(config, selection)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(show_requests(config, series), end="")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Benchmark the selected series; exit 1 on a regression against --baseline."""
    import asyncio

    from exporter.bench.command import BenchOutputs, run_bench_command
    from exporter.bench.options import parse_confidence, parse_input_tokens, parse_options

    try:
        sizes = parse_input_tokens(args.input_tokens)
        confidence = parse_confidence(args.confidence)
        options = parse_options(
            concurrency=args.concurrency, rate=args.rate, requests=args.requests,
            duration=args.duration, warmup=args.warmup, slo=args.slo,
            knee_threshold=args.knee_threshold, seed=args.seed, connections=args.connections,
            workers=args.workers, ramp=args.ramp)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = _load(args.config_file, getattr(args, "shard", None))
    if config is None:
        return 1
    outputs = BenchOutputs(output=args.output, csv=args.csv, report=args.report,
                           baseline=args.baseline, fail_on=args.fail_on,
                           confidence=confidence)
    return asyncio.run(run_bench_command(config, _selection(args), options=options,
                                         outputs=outputs, yes=args.yes,
                                         input_tokens=sizes))


def cmd_simulate(args: argparse.Namespace) -> int:
    """Serve the simulator until interrupted."""
    import asyncio
    import contextlib

    from exporter.config import ConfigError, SimulatorConfig
    from exporter.config.address import parse_listen_address
    from exporter.config.simfile import load_simulator
    from exporter.simulator import serve_forever

    simulator = SimulatorConfig()
    if args.config_file:
        try:
            simulator = load_simulator(args.config_file)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if args.listen:
        try:
            parse_listen_address(args.listen)
        except ValueError as exc:
            print(f"error: --listen: {exc}", file=sys.stderr)
            return 2
        simulator = simulator.model_copy(update={"listen": args.listen})
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(
            simulator, api_key=simulator.api_key,
            reload=(lambda: load_simulator(args.config_file)) if args.config_file else None))
    return 0
