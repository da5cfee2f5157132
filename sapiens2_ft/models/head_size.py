"""How large a Sapiens2 task model's outputs are against its input: its head run on the meta device (transformers'
own ``Sapiens2Head``: no weights, no arithmetic), so the answer follows the head layout whatever it is."""

from __future__ import annotations

import torch

TOKENS = 4  # a patch grid of 4 x 4 tokens: enough for every upsampling and convolution of a head


def output_scale(config) -> float:
    """Output pixels per input pixel of the head of a task model's ``config`` (``Sapiens2Config`` with a head
    config): 1.0 for the released seg, normal, pointmap and matting heads, 0.25 for the pose heads and the CPU-sized
    (``tiny``, ``mini``) dense heads of ``tasks/heads.py``."""
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2Head

    patch = config.patch_size if isinstance(config.patch_size, int) else config.patch_size[0]
    with torch.device("meta"):
        out = Sapiens2Head(config)(torch.empty(1, config.hidden_size, TOKENS, TOKENS))
    return out.shape[-1] / (TOKENS * patch)
