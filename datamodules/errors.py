"""The errors of every data problem: a dataset file or record that cannot be used, named in the message."""


class DataError(ValueError):
    """A dataset file or record is unusable; the message says which and why."""


class RefusedInput(DataError):
    """A file, folder or URL the boundary (``datamodules/boundary``) will not read or write: outside its folder
    (a ``..`` or a symbolic link leading out), a special file (FIFO, device), above a size or pixel limit, a URL
    scheme that would run a command. The message names the path and the rule."""
