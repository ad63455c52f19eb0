"""Redaction cost: the redactor on single values, and the status page and /api/v1/results of many
series rendered with and without known keys.

    python -m benchmarks.redaction [--series 10000] [--keys 0,1,10] [--identity N] [--smoke]

Every value is redacted before it is escaped or serialised (whole keys, escaped forms, fragments
of 12+ characters); the finished document is searched once more for whole keys. "cold" is the
first render after the keys changed, "warm" a later one (values seen before are remembered).
CPU time of this process, best of `--repeat`, so other load on the machine matters less.
`--identity N`: N of the series are identity series (their state on both pages), and the
table gains a row without them for comparison.
"""

from __future__ import annotations

import argparse
import random
import string
import time
from collections.abc import Callable

from benchmarks.common import machine_line, table
from exporter.errors import Result
from exporter.identity.status import IdentityStatus
from exporter.identity.status import Phase as IdentityPhase
from exporter.log import REDACTOR
from exporter.result import Phase, ProbeResult, Timings, TokenSource, Usage
from exporter.serve.pages import render_status_page, results_document
from exporter.serve.results import Snapshot

KEY_CHARS = string.ascii_letters + string.digits + "_-"


def snapshot(series: int, rng: random.Random) -> Snapshot:
    """`series` results: every fifth failed with a reason, unique response ids."""
    latest = {}
    timings = Timings(0.3, 0.3, 0.02, 40.0, 1.5, (0.02,) * 20, {Phase.WAIT: 0.1})
    for i in range(series):
        ok = bool(i % 5)
        result = ProbeResult(
            target=f"target-{i % 50}", model=f"model-name-{i}", probe="short",
            result=Result.SUCCESS if ok else Result.HTTP_5XX,
            reason="" if ok else "HTTP 503: upstream overloaded, try again later please",
            timings=timings, usage=Usage(20, 64, 0, 0), output_tokens=64,
            token_source=TokenSource.USAGE, cost=0.00004, currency="USD",
            answer="answer old requests left over the previous days of work",
            finish_reason="stop", response_id=f"chatcmpl-{rng.getrandbits(120):030x}",
            finished_at=time.time())
        latest[result.key] = result
    return Snapshot(latest, tuple(r for r in latest.values() if not r.success)[:100])


def with_identity(snap: Snapshot, count: int) -> Snapshot:
    """The snapshot with `count` of its series shown as identity series in mid-test."""
    now = time.time()
    statuses = {key: IdentityStatus(IdentityPhase.TESTING, 400, 400, key, 37, 200, 0.01, 12, 3,
                                    3, 2e-5, 0.031, now - 60, now - 5400,
                                    f"/var/lib/llm-probe/identity/{i:032x}.json", 60.0, 60.0)
                for i, key in enumerate(list(snap.latest)[:count])}
    return Snapshot(snap.latest, snap.failures, snap.served, statuses)


def cpu_ms(work: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(first, best of the rest) CPU milliseconds of `work`."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        work()
        times.append((time.process_time() - start) * 1000)
    return times[0], min(times[1:] or times)


def per_call_us(values: list[str], keys: list[str], repeat: int) -> float:
    """CPU microseconds per `REDACTOR(value)` of values not seen before."""
    best = float("inf")
    for _ in range(repeat):
        REDACTOR.update(keys)  # a fresh index: nothing remembered
        best = min(best, cpu_ms(lambda: [REDACTOR(v) for v in values], 1)[0])
    return best * 1000 / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=10_000)
    parser.add_argument("--keys", default="0,1,10")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--identity", type=int, default=0, metavar="N",
                        help="N of the series are identity series (default 0)")
    parser.add_argument("--smoke", action="store_true", help="seconds: 300 series, 2 repeats")
    args = parser.parse_args()
    if args.smoke:
        args.series, args.repeat = 300, 2
    rng = random.Random(1)
    keys = ["sk-proj-" + "".join(rng.choices(KEY_CHARS, k=48)) for _ in range(10)]
    plain = snapshot(args.series, rng)
    snap = with_identity(plain, args.identity)
    info = {"version": "bench", "in_flight": 0}
    render_status_page(snap, info, time.time())  # the first render of all pays for warm-up
    results_document(snap, info)
    rows = []
    page_warm_0 = api_warm_0 = 0.0
    for count in map(int, args.keys.split(",")):
        REDACTOR.forget()
        REDACTOR.update(keys[:count])
        page_cold, page_warm = cpu_ms(lambda: render_status_page(snap, info, time.time()),
                                      args.repeat)
        api_cold, api_warm = cpu_ms(lambda: results_document(snap, info), args.repeat)
        ids = [r.response_id or "" for r in snap.latest.values() if r is not None]
        if count == 0:
            page_warm_0, api_warm_0 = page_warm, api_warm
        rows.append([count, f"{page_cold:.0f}", f"{page_warm:.0f}", f"{api_cold:.0f}",
                     f"{api_warm:.0f}", f"{per_call_us(ids, keys[:count], args.repeat):.2f}"])
    REDACTOR.forget()
    page = render_status_page(snap, info, time.time())
    document = results_document(snap, info).decode()
    REDACTOR.update(keys)
    net = cpu_ms(lambda: (REDACTOR.net(page), REDACTOR.net(document)), args.repeat)[1]
    full = cpu_ms(lambda: (REDACTOR(page), REDACTOR(document)), args.repeat)[1]
    size = (len(page) + len(document)) / 2**20
    print(f"Redaction, {args.series} series — {machine_line()}\n")
    print(table(["keys", "status page cold ms", "warm ms", "/api cold ms", "warm ms",
                 "µs per response id"], rows))
    if args.identity:
        REDACTOR.forget()
        page_plain = cpu_ms(lambda: render_status_page(plain, info, time.time()), args.repeat)
        api_plain = cpu_ms(lambda: results_document(plain, info), args.repeat)
        print(f"\n{args.identity} identity series, 0 keys, warm: status page "
              f"{page_warm_0:.1f} ms vs {page_plain[1]:.1f} ms without them; /api "
              f"{api_warm_0:.1f} ms vs {api_plain[1]:.1f} ms")
    print(f"\nSecond net over both documents ({size:.1f} MiB, 10 keys): whole keys only "
          f"{net:.0f} ms; with the fragment search {full:.0f} ms")


if __name__ == "__main__":
    main()
