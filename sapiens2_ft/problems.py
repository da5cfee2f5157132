"""Every problem at once: the commands (train's ``check_config``, predict, evaluate, export, convert, check_data,
memory) collect what is wrong with their arguments and report it in one message, each problem naming its argument,
instead of stopping at the first (in the spirit of litgpt's ``validate_args``). Imports nothing of this project."""

from __future__ import annotations

from typing import Iterable


def problems_message(problems: Iterable[str], where: str) -> str:
    """``N problems in WHERE:`` and one problem a line."""
    problems = list(problems)
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    return f"{count} in {where}:\n" + "\n".join(f"  - {p}" for p in problems)


class ConfigProblems(ValueError):
    """Every problem found in a module's options at once (``TaskModule.check_options``), one per line."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(problems_message(self.problems, "the config"))


def report(problems: Iterable[str], where: str = "the arguments") -> str:
    """One problem as it is; several as ``problems_message``."""
    problems = list(problems)
    return problems[0] if len(problems) == 1 else problems_message(problems, where)


def exit_on_problems(problems: Iterable[str], where: str = "the arguments") -> None:
    """End the command with every problem (``SystemExit``, the ``report``); no problem: nothing to do."""
    problems = [p for p in problems if p]
    if problems:
        raise SystemExit(report(problems, where))


class Problems(list):
    """A command's problems, collected as its arguments are read: ``check(ok, problem)`` notes the problem unless
    ``ok``; ``exit()`` ends the command with all of them, if any."""

    def check(self, ok: bool, problem: str) -> bool:
        """Note ``problem`` unless ``ok``; returns ``ok``."""
        if not ok:
            self.append(problem)
        return ok

    def exit(self, where: str = "the arguments") -> None:
        exit_on_problems(self, where)
