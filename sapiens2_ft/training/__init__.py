"""Training layer: the command line, run directories, checkpoint files, callbacks, tracking, strategies."""
