"""Callbacks every training run gets (see ``training/cli.py``)."""
