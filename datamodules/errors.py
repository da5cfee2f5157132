"""The error of every data problem: a dataset file or record that cannot be used, named in the message."""


class DataError(ValueError):
    """A dataset file or record is unusable; the message says which and why."""
