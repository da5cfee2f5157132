"""Head layouts of the released Sapiens2 task checkpoints, per backbone size (``Sapiens2HeadConfig`` kwargs).

A head built for a pretrain-only backbone takes the layout of its size, so it has the shape the released
fine-tuned models have. The task registry gives each task its table; tiny heads (``tiny``, ``mini``: CPU-sized)
upsample 4x, and the modules resize their outputs to the target bilinearly, so CPU demos stay fast.
"""

from __future__ import annotations

_LARGE = ("0.1b", "0.4b", "0.8b", "1b")
_POSE = dict(upsample_out_channels=[1024, 768], conv_out_channels=[512, 512, 256])
_DENSE_SHUFFLE = dict(use_pixel_shuffle=True, upsample_kernel_size=3, upsample_out_channels=[768, 512, 256, 128],
                      conv_kernel_size=3, conv_out_channels=[64, 32, 16])
_DENSE_SHUFFLE_5B = {**_DENSE_SHUFFLE, "upsample_out_channels": [1536, 768, 512, 256],
                     "conv_out_channels": [128, 64, 32]}
_TINY_SHUFFLE = dict(use_pixel_shuffle=True, upsample_kernel_size=3, upsample_out_channels=[64, 32],
                     conv_kernel_size=3, conv_out_channels=[32])
# Pointmap scale branch: stride-2 1x1 convs, then an MLP to one scalar (input size set from image_size).
_SCALE = dict(scale_conv_out_channels=[1536, 512, 128], scale_conv_kernel_size=1, scale_final_hidden_sizes=[512, 128])
_TINY_SCALE = dict(scale_conv_out_channels=[32, 16], scale_conv_kernel_size=1, scale_final_hidden_sizes=[32, 16])

POSE_HEADS = {
    **{size: dict(upsample_out_channels=[64, 64], conv_out_channels=[64]) for size in ("tiny", "mini")},
    "0.1b": _POSE, "0.4b": _POSE, "0.8b": _POSE, "5b": _POSE,
    "1b": dict(upsample_out_channels=[1536, 1024], conv_out_channels=[768, 512, 256]),
}
SEG_HEADS = {
    **{size: dict(upsample_out_channels=[64, 32], conv_out_channels=[32]) for size in ("tiny", "mini")},
    **{size: dict(upsample_out_channels=[512, 256, 128, 64], conv_out_channels=[64, 64]) for size in (*_LARGE, "5b")},
}
# Normal and matting heads.
PIXEL_SHUFFLE_HEADS = {"tiny": _TINY_SHUFFLE, "mini": _TINY_SHUFFLE, **{size: _DENSE_SHUFFLE for size in _LARGE},
                       "5b": _DENSE_SHUFFLE_5B}
POINTMAP_HEADS = {
    **{size: {**_TINY_SHUFFLE, **_TINY_SCALE} for size in ("tiny", "mini")},
    **{size: {**_DENSE_SHUFFLE, "upsample_out_channels": [1536, 768, 512, 256], **_SCALE} for size in _LARGE},
    "5b": {**_DENSE_SHUFFLE_5B, "upsample_out_channels": [1536, 768, 768, 768], **_SCALE},
}
