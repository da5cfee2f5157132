"""The errors of sapiens2-ft: one small hierarchy, here at the bottom of the layers so that every layer raises it.

The library raises them; only the console entry points (``sapiens2_ft/exits.py``) turn one into its message and an
exit status. Each message names what is wrong: the argument, the file, the record, the key.

- ``Sapiens2FTError``: the base (``except sapiens2_ft.Sapiens2FTError`` catches every one);
- ``BadInput`` (a ``ValueError``): a value the caller gave cannot be used: an argument, an image, a box, a file's
  content (``DataError``: a dataset file or record);
- ``BadConfig`` (a ``ValueError``): a recipe's keys and values;
- ``NotFound`` (a ``FileNotFoundError``): a path, a model, a checkpoint, an optional package that is not there;
- ``Refused``: a rule declines it: a boundary rule (``RefusedInput``), a folder that holds other files, a finished
  run, the Hub.
"""


class Sapiens2FTError(Exception):
    """An error of sapiens2-ft; the message says what and where. ``exit_code``: the status a console entry point
    ends with (1; another, such as a preempted run's 75, ends it with that status alone, its message printed
    where it happened)."""

    exit_code: int = 1

    def with_message(self, message: str) -> "Sapiens2FTError":
        """This error, of the same type, saying ``message`` (the argument or step it came from added)."""
        self.args = (message,)
        return self


class BadInput(Sapiens2FTError, ValueError):
    """A value the caller gave cannot be used (an argument, an image, a box, a file's content)."""


class BadConfig(Sapiens2FTError, ValueError):
    """A recipe's key or value cannot be used."""


class NotFound(Sapiens2FTError, FileNotFoundError):
    """A path, model, checkpoint or optional package is not there."""


class Refused(Sapiens2FTError):
    """A rule declines the request: the message names the rule and the way around it."""


class DataError(BadInput):
    """A dataset file or record is unusable; the message says which and why."""


def restated(err: Exception, message: str, kind: type[Sapiens2FTError] = BadInput) -> Sapiens2FTError:
    """``err`` saying ``message``: the same error when it is one of these, else a new ``kind``."""
    return err.with_message(message) if isinstance(err, Sapiens2FTError) else kind(message)


class RefusedInput(DataError, Refused):
    """A file, folder or URL the boundary (``datamodules/boundary``) will not read or write: outside its folder
    (a ``..`` or a symbolic link leading out), a special file (FIFO, device), above a size or pixel limit, a URL
    scheme that would run a command. The message names the path and the rule."""
