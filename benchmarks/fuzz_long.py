"""Long fuzz run: the properties of `tests/test_fuzz.py` with random seeds and many more examples.

The test suite runs each property 300 times with a fixed seed (deterministic CI). This runs every
one of them with fresh randomness, `--examples` times each (default 20,000), for as many
`--rounds` as asked, and prints each property's time and the first falsifying example it finds.
Properties marked xfail in the suite (open findings, if any) are run too and reported as
"known".

    python -m benchmarks.fuzz_long [--examples 20000] [--rounds 1] [--only anthropic]

Exit status 1 when a property not marked xfail failed. A failure prints hypothesis's falsifying
example (shrunk), ready to paste into the suite as an `@example(...)` regression.
Budget: 5,000 examples of every property took 2.5 minutes on one core here; 20,000 about 10.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any


def properties() -> list[tuple[str, Callable[..., Any], dict[str, Any], bool]]:
    """(name, hypothesis test, fixed arguments, known failure) for every fuzz property."""
    from tests import test_fuzz

    found = []
    for name in dir(test_fuzz):
        test = getattr(test_fuzz, name)
        if not name.startswith("test_") or not hasattr(test, "hypothesis"):
            continue
        marks = getattr(test, "pytestmark", [])
        known = any(m.name == "xfail" for m in marks)
        params = [m for m in marks if m.name == "parametrize"]
        if params:
            argname, values = params[0].args[0], params[0].args[1]
            for v in values:
                found.append((f"{name}[{v}]", test, {argname: v}, known))
        else:
            found.append((name, test, {}, known))
    return found


def main() -> int:
    """Run every property with fresh randomness; report failures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="", help="run properties whose name contains this")
    args = parser.parse_args()
    # Read by tests/test_fuzz.py at import: random seeds, this many examples per property.
    os.environ["LLM_PROBE_FUZZ_EXAMPLES"] = str(args.examples)
    unexpected = 0
    for round_ in range(args.rounds):
        for name, test, kwargs, known in properties():
            if args.only not in name:
                continue
            start = time.perf_counter()
            try:
                test(**kwargs)
                status = "ok"
            except Exception:
                status = "known finding" if known else "FAILED"
                unexpected += not known
                print(f"--- {name}: {status}")
                traceback.print_exc(limit=2, file=sys.stdout)
            print(f"round {round_ + 1} {name}: {status} "
                  f"({args.examples} examples, {time.perf_counter() - start:.1f}s)", flush=True)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
