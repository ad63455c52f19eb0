"""Command line: serve (default), check, probe, simulate."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from exporter import __version__
from exporter.config import Config, ConfigError, format_duration, load_config
from exporter.log import configure_logging, get_logger

COMMANDS = ("serve", "check", "probe", "simulate")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config.file", dest="config_file", default="config.yaml",
                        help="path to the YAML config (default: config.yaml)")
    parser.add_argument("--log.level", dest="log_level", default="info",
                        choices=("debug", "info", "warning", "error"))
    parser.add_argument("--log.format", dest="log_format", default=None,
                        choices=("json", "console"),
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
    serve.add_argument("--shutdown.grace", dest="shutdown_grace", type=float, default=10.0,
                       help="seconds to let in-flight probes finish on SIGTERM (default 10)")

    check = commands.add_parser("check", help="validate the config and print the probe plan")
    _add_common(check)

    probe = commands.add_parser("probe", help="run probes once and print a table")
    _add_common(probe)
    probe.add_argument("--target", help="only this target")
    probe.add_argument("--model", help="only this model")
    probe.add_argument("--probe", dest="probe_name", help="only this probe")
    probe.add_argument("--json", action="store_true", help="print JSON instead of a table")

    simulate = commands.add_parser("simulate", help="run the embedded simulator standalone")
    simulate.add_argument("--listen", default=None, help="address (default 127.0.0.1:9472)")
    simulate.add_argument("--config.file", dest="config_file", default=None,
                          help="take the simulator section (models) from this config")
    simulate.add_argument("--log.level", dest="log_level", default="info",
                          choices=("debug", "info", "warning", "error"))
    simulate.add_argument("--log.format", dest="log_format", default=None,
                          choices=("json", "console"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llm-probe-exporter` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0] not in COMMANDS
                         and args_list[0] not in ("-h", "--help", "--version")):
        args_list.insert(0, "serve")
    args = build_parser().parse_args(args_list)
    configure_logging(args.log_level,
                      args.log_format or ("json" if args.command == "serve" else "console"))
    handlers = {"serve": cmd_serve, "check": cmd_check, "probe": cmd_probe,
                "simulate": cmd_simulate}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        return 130


def _load(path: str) -> Config | None:
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the daemon."""
    from exporter.daemon import Daemon

    config = _load(args.config_file)
    if config is None:
        return 1
    daemon = Daemon(Path(args.config_file), args.listen, shutdown_grace=args.shutdown_grace)
    try:
        asyncio.run(daemon.run(config))
    except OSError as exc:
        get_logger().error("cannot start", error=str(exc))
        return 1
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the config and print the probe plan."""
    from rich.console import Console
    from rich.table import Table

    config = _load(args.config_file)
    if config is None:
        return 1
    table = Table(title=f"{len(config.series)} series in {args.config_file}")
    for column in ("target", "api", "model", "probe", "interval", "timeout", "key"):
        table.add_column(column)
    for s in config.series:
        table.add_row(s.target.name, s.target.api.value, s.model, s.probe_name,
                      format_duration(s.interval), format_duration(s.timeout),
                      s.target.key_source)
    console = Console(width=max(Console().width, 100))
    console.print(table)
    if config.simulator is not None:
        console.print(f"simulator: {config.simulator.listen} serving "
                      f"{', '.join(config.simulator.models)}")
    console.print("config OK")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    """Run the selected probes once; exit 1 unless all succeeded."""
    from exporter.oneshot import run_probe_command

    config = _load(args.config_file)
    if config is None:
        return 1
    return asyncio.run(run_probe_command(config, target=args.target, model=args.model,
                                         probe=args.probe_name, as_json=args.json))


def cmd_simulate(args: argparse.Namespace) -> int:
    """Serve the simulator until interrupted."""
    from exporter.config import SimulatorConfig
    from exporter.simulator import serve_forever

    simulator = SimulatorConfig()
    if args.config_file:
        config = _load(args.config_file)
        if config is None:
            return 1
        simulator = config.simulator or simulator
    if args.listen:
        simulator = simulator.model_copy(update={"listen": args.listen})
    try:
        asyncio.run(serve_forever(simulator))
    except KeyboardInterrupt:
        pass
    return 0
