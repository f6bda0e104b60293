"""The CLI's bootstrap: the `tocsin` command (pyproject's console script). Each command
starts what it needs through this module: the database for most, the broker and the
after-commit effects for those that enqueue (scan, sweep), the whole web or clock process
for `tocsin web` and `tocsin clock`."""

from __future__ import annotations

from collections.abc import Sequence

from tocsin import boot
from tocsin.core.settings import Settings
from tocsin.shell import cli

__all__ = ["CliBootstrap", "main"]


class CliBootstrap:
    def start(self, settings: Settings) -> Settings:
        return boot.start(settings)

    def start_messaging(self, settings: Settings) -> None:
        boot.start_messaging(settings)

    def run_web(self) -> None:
        from tocsin.boot.web import run_web

        run_web()

    def run_clock(self) -> None:
        from tocsin.boot.clock import run_clock

        run_clock()


def main(argv: Sequence[str] | None = None) -> None:
    cli.main(argv, CliBootstrap())


if __name__ == "__main__":
    main()
