"""``python -m sapiens2_ft.predict --model DIR_OR_CKPT --input IMAGES --out OUT``: batched inference over an image
folder (or one image) with a fine-tuned model. The options and what is written: ``cli.py``; docs/runs.md.

Apps layer: ``cli`` (arguments), ``options`` (the run options' checks, shared with the Python API), ``loading``
(model directories and checkpoints), ``inputs`` (image lists), ``boxes`` (where pose's person boxes come from: a
file, a detector, a seg model or the whole image), ``run`` (every model on each chunk of images: one ``Result`` per
image and model, ``result.py``), ``sheet`` (the multi-task sheet), ``video`` and ``smoothing`` (videos, tracks).
"""

from sapiens2_ft.predict.cli import main

__all__ = ["main"]
