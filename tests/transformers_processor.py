"""transformers' own ``Sapiens2ImageProcessor``, for tests that hold this project's outputs against it.

transformers' processor imports torchvision, which cannot be installed beside this CPU torch: it is loaded with
stand-in torchvision modules. Only its resizing, padding and Gaussian blur call torchvision; the map
post-processing (``post_process_semantic_segmentation``, ``post_process_normal_estimation``,
``post_process_pointmap_estimation``, ``post_process_image_matting`` without backgrounds) calls none, so it runs as
it is. Its preprocessing is re-derived by ``preprocess`` from its code (``_preprocess``, ``TorchvisionBackend.resize``
and ``center_crop``)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers.image_utils import get_image_size_for_max_height_width

STUBS = ("torchvision", "torchvision.transforms", "torchvision.transforms.v2", "torchvision.transforms.v2.functional")


def processor_class():
    """``Sapiens2ImageProcessor``, loaded with stand-ins for torchvision (which nothing used here calls)."""
    import transformers.models.sapiens2 as package

    name = "transformers.models.sapiens2._image_processing_for_tests"
    saved = {n: sys.modules.get(n) for n in STUBS}
    try:
        for n in STUBS:
            sys.modules[n] = types.ModuleType(n)
        sys.modules["torchvision.transforms.v2"].functional = sys.modules["torchvision.transforms.v2.functional"]
        spec = importlib.util.spec_from_file_location(name, Path(package.__file__).with_name(
            "image_processing_sapiens2.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module.Sapiens2ImageProcessor
    finally:
        sys.modules.pop(name, None)
        for n, value in saved.items():
            if value is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = value


def processor(settings: dict):
    """The processor of an export's ``preprocessor_config.json`` settings."""
    return processor_class()(**{k: v for k, v in settings.items() if k != "image_processor_type"})


def preprocess(image: np.ndarray, settings: dict) -> torch.Tensor:
    """``pixel_values`` (1, 3, H, W) of an RGB uint8 image as the processor of ``settings`` makes them: ``do_pad``
    resizes to the largest size of the image's aspect inside the input (``get_image_size_for_max_height_width``: the
    sizes floored), bilinear with antialiasing, then pads it centred (``center_crop``: (size - new) // 2 before, the
    rest after, zeros); otherwise it stretches. Then ``x / 255``, minus the mean, over the std. (torchvision resizes
    uint8 images in integers: rounding here stands for it.)"""
    height, width = settings["size"]["height"], settings["size"]["width"]
    pixels = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
    size = (get_image_size_for_max_height_width(image.shape[:2], height, width) if settings["do_pad"]
            else (height, width))
    pixels = F.interpolate(pixels, size=size, mode="bilinear", align_corners=False, antialias=True)
    pixels = pixels.round().clamp(0, 255)
    top, left = (height - size[0]) // 2, (width - size[1]) // 2
    pixels = F.pad(pixels, (left, width - size[1] - left, top, height - size[0] - top))
    mean = torch.tensor(settings["image_mean"])[:, None, None]
    std = torch.tensor(settings["image_std"])[:, None, None]
    return (pixels * settings["rescale_factor"] - mean) / std
