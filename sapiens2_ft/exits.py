"""The edge: where the library's errors become a message and an exit status. Only the console entry points use it
(``tests/test_exits.py`` holds every other module to raising exceptions): each ``main`` a command runs is wrapped
by :func:`console_command`, so ``python -m sapiens2_ft.predict ...`` prints a ``Sapiens2FTError``'s message and
exits with status 1, as ``raise SystemExit(message)`` did, while the library and the Python API raise it."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

from datamodules.errors import Sapiens2FTError

F = TypeVar("F", bound=Callable)


def exit_of(err: Sapiens2FTError) -> SystemExit:
    """The ``SystemExit`` of an error: its message (status 1), or its own ``exit_code`` alone."""
    return SystemExit(str(err) if err.exit_code == 1 else err.exit_code)


def console_command(main: F) -> F:
    """``main(argv)`` of a console entry point, ending on a ``Sapiens2FTError`` with its message and status."""

    @functools.wraps(main)
    def entry(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except Sapiens2FTError as err:
            raise exit_of(err) from None

    return entry  # type: ignore[return-value]
