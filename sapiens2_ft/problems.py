"""Every problem at once: the commands (train's ``check_config``, predict, evaluate, export, convert, check_data,
memory) and the Python API collect what is wrong with their arguments and raise it as one error, each problem naming
its argument, instead of stopping at the first (in the spirit of litgpt's ``validate_args``). Imports nothing of this
project but its errors."""

from __future__ import annotations

from typing import Iterable

from datamodules.errors import BadConfig, BadInput


def problems_message(problems: Iterable[str], where: str) -> str:
    """``N problems in WHERE:`` and one problem a line."""
    problems = list(problems)
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    return f"{count} in {where}:\n" + "\n".join(f"  - {p}" for p in problems)


def report(problems: Iterable[str], where: str = "the arguments") -> str:
    """One problem as it is; several as ``problems_message``."""
    problems = list(problems)
    return problems[0] if len(problems) == 1 else problems_message(problems, where)


class ConfigProblems(BadConfig):
    """Every problem found in a config at once (``TaskModule.check_options``, train's ``check_config``), one per
    line; ``problems``: the list."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(problems_message(self.problems, "the config"))


class ArgumentProblems(BadInput):
    """Every problem of a command's (or an API call's) arguments at once: one problem as it is, several one per
    line (``report``); ``problems``: the list."""

    def __init__(self, problems: list[str], where: str = "the arguments"):
        self.problems = list(problems)
        super().__init__(report(self.problems, where))


def raise_problems(problems: Iterable[str], where: str = "the arguments") -> None:
    """``ArgumentProblems`` of every problem given (empty ones left out); no problem: nothing to do."""
    problems = [p for p in problems if p]
    if problems:
        raise ArgumentProblems(problems, where)


class Problems(list):
    """A command's problems, collected as its arguments are read: ``check(ok, problem)`` notes the problem unless
    ``ok``; ``raise_any()`` raises all of them as one ``ArgumentProblems``, if any."""

    def check(self, ok: bool, problem: str) -> bool:
        """Note ``problem`` unless ``ok``; returns ``ok``."""
        if not ok:
            self.append(problem)
        return ok

    def raise_any(self, where: str = "the arguments") -> None:
        raise_problems(self, where)
