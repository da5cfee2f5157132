"""One person instance -> one top-down training or validation sample."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.boundary.images import read_image
from datamodules.keypoints.metainfo import KeypointMetainfo
from datamodules.loaders import is_padding, replace_bad_samples, sample_rng
from datamodules.pose_instances import PoseInstance, PoseInstances, as_instances
from datamodules.shards.index import ShardFiles
from datamodules.transforms import affine
from datamodules.transforms.photometric import pose_photometric_pipeline
from datamodules.transforms.topdown import TopdownAugment, half_body_box, random_box


class TopdownPoseDataset(Dataset):
    """Crops each instance to ``input_size`` (H, W) with the UDP affine; augments when ``augment`` is set.

    Items: ``image`` uint8 (3, H, W); ``keypoints`` (K, 2) crop pixels; ``keypoint_weights`` (K,): labelled
    and inside the crop (0 <= x < W, 0 <= y < H, upstream's rule); ``inverse_affine`` (2, 3) crop -> image
    pixels; ``image_id``; ``box_score``; ``area``; ``index``. The crop is bilinear when it shrinks the image,
    bicubic when it enlarges it (upstream's ``INTER_AREA`` / ``INTER_CUBIC``).

    ``instances``: ``PoseInstances`` (a list of ``PoseInstance`` is turned into them: columns that the loader
    workers share). ``image_files``: where each image lies in the shards (``datamodules.shards``; None: read the
    image files).
    """

    def __init__(self, instances: PoseInstances | list[PoseInstance], metainfo: KeypointMetainfo,
                 input_size: tuple[int, int], augment: TopdownAugment | None = None, box_padding: float = 1.25,
                 on_bad_sample: Literal["error", "skip"] = "error", image_files: ShardFiles | None = None):
        self.instances = as_instances(instances, metainfo.num_keypoints)
        self.image_files = image_files
        self.metainfo = metainfo
        self.input_size = tuple(input_size)
        self.aspect_ratio = input_size[1] / input_size[0]
        self.augment = augment
        self.box_padding = box_padding
        self.on_bad_sample = on_bad_sample
        self._rng: np.random.Generator | None = None
        self.photometric = None
        if augment:
            self.photometric = pose_photometric_pipeline(
                augment.photometric_prob, augment.blur_prob, augment.median_blur_prob, augment.dropout_prob,
                augment.dropout_holes, augment.dropout_size)
        self.flip_indices = np.asarray(metainfo.flip_indices)

    def __len__(self) -> int:
        return len(self.instances)

    def groups(self, epoch_seed: int) -> np.ndarray | None:
        """The shard of each sample (read in blocks by the training sampler); None when read from files."""
        return None if self.image_files is None else self.image_files.shard[self.instances.image_index]

    def rng(self) -> np.random.Generator:
        """Fallback for plain integer keys: one generator per worker process, seeded from torch and
        advancing across epochs. The training sampler gives each sample its own (``loaders.sample_rng``)."""
        if self._rng is None:
            seed = torch.initial_seed()
            self._rng = np.random.default_rng(seed)
            if self.photometric is not None:
                self.photometric.set_random_seed(seed % 2**32)
        return self._rng

    def _crop(self, inst: PoseInstance, visible: np.ndarray, rng) -> tuple[np.ndarray, bool]:
        """Upstream's order: padded box, half-body, shift / scale / rotation, then the aspect fix."""
        center, scale = affine.box_to_center_scale(inst.bbox, None, self.box_padding)
        rotation, flip = 0.0, False
        aug = self.augment
        if aug is not None:
            half = half_body_box(inst.keypoints, visible, self.metainfo.upper_body_ids,
                                 self.metainfo.lower_body_ids, aug, rng)
            if half is not None:
                center, scale = half
            center, scale, rotation = random_box(center, scale, aug, rng)
            flip = rng.random() < aug.flip_prob
        scale = affine.fix_aspect(scale, self.aspect_ratio)
        matrix = affine.crop_matrix(center, scale, rotation, self.input_size)
        if flip:
            matrix = affine.compose(affine.hflip_matrix(self.input_size[1]), matrix)
        return matrix, flip

    def __getitem__(self, key) -> dict:
        """``key``: an index, ``(index, epoch_seed)`` from the training sampler, or a validation
        :class:`~datamodules.loaders.PaddingKey` (the item says ``padding: True``; metrics skip it). Under
        ``on_bad_sample="skip"`` an unreadable sample is replaced by the next one (``bad_samples_replaced``)."""
        index, rng = sample_rng(key)
        if rng is None and self.augment:
            rng = self.rng()
        item = replace_bad_samples(lambda i: self.item(i, rng), index, len(self), self.on_bad_sample)
        return {**item, "padding": is_padding(key)}

    def item(self, index: int, rng: np.random.Generator | None) -> dict:
        inst = self.instances[index]
        visible = inst.visibility > 0
        matrix, flip = self._crop(inst, visible, rng)
        source = inst.image_path if self.image_files is None else self.image_files.member(
            int(self.instances.image_index[index]), inst.image_path)
        image = affine.warp_image(read_image(source), matrix, self.input_size,
                                  affine.crop_interpolation(matrix))
        keypoints = affine.transform_points(inst.keypoints.astype(np.float64), matrix)
        weights = visible.astype(np.float32)
        if flip:
            keypoints, weights = keypoints[self.flip_indices], weights[self.flip_indices]
        # As upstream: a keypoint that lands outside the crop trains with weight 0.
        weights = weights * affine.inside_crop(keypoints, self.input_size)
        if self.photometric is not None:
            self.photometric.set_random_seed(int(rng.integers(2**31)))
            image = self.photometric(image=image)["image"]
        x, y, w, h = inst.bbox
        return {
            "image": torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))),
            "keypoints": torch.from_numpy(keypoints.astype(np.float32)),
            "keypoint_weights": torch.from_numpy(weights),
            "inverse_affine": torch.from_numpy(affine.invert(matrix).astype(np.float32)),
            "image_id": inst.image_id,
            "box_score": inst.box_score,
            "area": float(w * h),
            "index": index,
        }
