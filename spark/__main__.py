"""``python -m spark <job> [args]``: run one job's ``main`` with the remaining arguments."""

from __future__ import annotations

import importlib
import sys

JOBS = ("usage_report", "archive")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in JOBS:
        print(f"usage: python -m spark {{{','.join(JOBS)}}} [args]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"spark.jobs.{args[0]}")
    code: int = module.main(args[1:])
    return code


if __name__ == "__main__":
    raise SystemExit(main())
