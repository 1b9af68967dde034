"""The command line: ``python -m boxfall demo [options]`` and ``python -m boxfall bench [...]``."""

from __future__ import annotations

import argparse
import sys

from boxfall import demo


def plain_text(doc: str | None) -> str:
    """A docstring as ``--help`` shows it: without reST/Markdown markup (double and single
    backquotes), which a terminal prints as it is."""
    return (doc or "").replace("``", "").replace("`", "")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m boxfall`` with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="python -m boxfall",
        description="boxfall: an operator dispatcher with a boxed CPU fallback.",
        epilog="python -m boxfall COMMAND --help shows a command's options and their defaults.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="run a transformer block (or --workload array-api: k-means and a ridge fit) on a "
        "simulated device through the CPU fallback",
        description=plain_text(demo.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_arguments(demo_parser)
    # bench owns its options: everything after `bench` (--help included) goes to bench.main.
    commands.add_parser("bench", help="run the Python-side benchmarks", add_help=False)
    return parser


def _bench(argv: list[str]) -> int:
    """Run ``boxfall.bench.main`` with the arguments that follow ``bench``."""
    from boxfall import bench

    return bench.main(argv) or 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the subcommand; returns the exit code."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        return _bench(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return demo.run(args)


if __name__ == "__main__":
    sys.exit(main())
