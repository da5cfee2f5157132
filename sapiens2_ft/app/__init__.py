"""``sapiens2-ft app --model M [--model M2 ...] [--port P]``: a web demo of fine-tuned models (Gradio), and
``--write_space DIR``: a Hugging Face Space serving it. ``cli`` (arguments, loading), ``service`` (the work: photos and
videos through ``predict``'s code), ``page`` (the Gradio page), ``space`` (the Space folder); docs/share.md."""

from sapiens2_ft.app.cli import main

__all__ = ["main"]
