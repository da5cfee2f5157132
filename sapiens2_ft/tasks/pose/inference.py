"""Top-down pose with a trained model: heatmaps of person crops, flip test, DARK-UDP decode, keypoints back in image
pixels through the inverse crop affine; the crops of several images batched together (``estimate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence, TypedDict

import numpy as np
import torch

from datamodules.boundary.files import read_json
from datamodules.keypoints.metainfo import SET_FILE, MetainfoError, builtin_set_with, load_metainfo
from datamodules.transforms import affine
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.inference import Batch, TaskInference
from sapiens2_ft.tasks.pose import draw
from sapiens2_ft.tasks.pose.codec import (
    decode_heatmaps,
    flip_heatmaps,
    heatmap_probabilities,
    heatmap_to_input_coords,
    keypoint_scores,
)
from sapiens2_ft.tasks.pose.oks_nms import rescore
from sapiens2_ft.tasks.pose.results import PoseResults
from sapiens2_ft.tasks.pose.spec import POSE
from sapiens2_ft.tasks.sample_pictures import SheetLabels

# A heatmap cross-entropy head outputs logits: its config's ``heatmap_output`` says so to exported models' users.
LOGITS_OUTPUT = "logits"
KEYPOINT_SCORE_THRESHOLD = 0.2  # instance rescoring, as in validation
SCORE_DECIMALS = 4  # scores as every output gives them (API arrays, keypoints.json, videos' json, the app)
SIGMA_KEY = "keypoint_heatmap_sigma"  # an export's preprocessor_config.json: the targets' sigma (the score radius)


class PoseBatch(Batch):
    """A batch of person crops (``datamodules/pose_dataset.py``)."""

    keypoints: torch.Tensor  # (B, K, 2) float, crop pixels
    keypoint_weights: torch.Tensor  # (B, K) float: visible and inside the crop
    inverse_affine: torch.Tensor  # (B, 2, 3): crop pixels -> image pixels
    image_id: torch.Tensor  # (B,) the COCO image id
    box_score: torch.Tensor  # (B,) the person box's score (detections; 1 for ground-truth boxes)
    area: torch.Tensor  # (B,) the person's area in image pixels (OKS scale)


class PoseOutputs(TypedDict, total=False):
    heatmaps: torch.Tensor  # (B, K, h, w): heatmaps, or log-probabilities of a logits head after ``infer``
    coords: torch.Tensor  # (B, K, 2) crop pixels (``infer``)
    scores: torch.Tensor  # (B, K) keypoint scores (``infer``)


class Person(TypedDict):
    """One person a pose model found in an image. Scores are in [0, 1] (``codec.keypoint_scores``), to
    ``SCORE_DECIMALS`` decimals: the same numbers in every output."""

    points: np.ndarray  # (K, 2) image pixels
    scores: np.ndarray  # (K,)
    score: float  # the instance score: box score x mean of the keypoint scores above 0.2
    bbox: np.ndarray  # [x, y, w, h] of the box it was cropped from


def score_radius(sigma: float) -> int:
    """Heatmap px: a CE keypoint's score is its probability mass within 2 sigma (x, y) of it, ~0.95 for a model
    that predicts its target exactly (bench/pose_scores.py chose 2 sigma on the demo's checkpoint)."""
    return max(1, round(2 * sigma))


class PoseInference(TaskInference):
    """A pose model on a keypoint set.

    Args:
        input_size: The crop size (H, W).
        keypoints: Keypoint set, built-in name or YAML path (names, flip pairs, skeleton).
        flip_test: Average with the flipped-back heatmaps of the mirrored crop.
        heatmap_output: ``heatmaps`` (an MSE head's Gaussians) or ``logits`` (a heatmap cross-entropy head's).
        sigma: Gaussian sigma of the training targets in heatmap pixels (a logits head's score radius).
        model: The ``Sapiens2ForPoseEstimation`` (or a stand-in).
    """

    spec = POSE
    takes_person_boxes = True
    pseudo_labels = "keypoints"  # COCO keypoints of the people found

    def __init__(self, input_size: Sequence[int] = (256, 192), keypoints: str = "coco17", flip_test: bool = True,
                 heatmap_output: Literal["heatmaps", "logits"] = "heatmaps", sigma: float = 2.0, model=None):
        super().__init__(input_size, model)
        self.metainfo = load_metainfo(keypoints)
        self.labels = list(self.metainfo.keypoint_names)
        self.flip_test, self.heatmap_output, self.sigma = flip_test, heatmap_output, sigma
        self.flip_indices = torch.tensor(self.metainfo.flip_indices)

    @property
    def outputs_logits(self) -> bool:
        return self.heatmap_output == LOGITS_OUTPUT

    def model_options(self) -> dict:
        return {"flip_pairs": self.metainfo.flip_pairs}

    def build(self, init_from: str | None = None, pretraining_head: bool = False, **source):
        model, report = super().build(init_from, pretraining_head, **source)
        if self.outputs_logits:
            model.config.heatmap_output = LOGITS_OUTPUT
        return model, report

    def checkpoint_record(self) -> dict:
        return {"keypoints": self.metainfo.to_dict()}

    @classmethod
    def options_from_model(cls, directory: Path, config, labels: str | None = None) -> dict:
        """The keypoint set: ``labels`` (a set name or YAML; its keypoints are the model's rows of the same names),
        else the export's ``keypoints.yaml``, else the built-in set of the model's rows (a released 308-keypoint
        model: ``sapiens2_308``); ``heatmap_output: logits`` for a head that outputs logits (its config's); the
        targets' ``sigma`` where the export's ``preprocessor_config.json`` records it (a logits head's score radius,
        as in its run's validation)."""
        logits = getattr(config, "heatmap_output", None) == LOGITS_OUTPUT  # a config field: absent in older exports
        options = {"heatmap_output": LOGITS_OUTPUT} if logits else {}
        processor = Path(directory) / "preprocessor_config.json"
        sigma = read_json(processor).get(SIGMA_KEY) if processor.is_file() else None
        if isinstance(sigma, (int, float)) and sigma > 0:
            options["sigma"] = float(sigma)
        if labels is None:
            exported = Path(directory) / SET_FILE
            labels = str(exported) if exported.is_file() else builtin_set_with(cls.row_names(directory, config))
        if labels is None:
            raise ValueError(f"{directory} has no {SET_FILE} and its {config.num_labels} keypoints are no built-in "
                             f"set; give the keypoint set (a built-in name or a YAML file)")
        try:
            metainfo = load_metainfo(labels)
        except MetainfoError as err:
            raise ValueError(str(err)) from None
        cls.check_rows(directory, config, list(metainfo.keypoint_names))
        return {"keypoints": labels, **options}

    # -- the forward pass -----------------------------------------------------------------------

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> PoseOutputs:
        """``heatmaps`` (B, K, h, w) of the crops (``size`` is not used: heatmaps keep their resolution)."""
        return {"heatmaps": self.model(pixel_values).heatmaps}

    def infer(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> PoseOutputs:
        """``heatmaps`` (flip-tested when enabled) and the decoded keypoints: ``coords`` (B, K, 2) in crop pixels
        and ``scores`` (B, K) in [0, 1] (``codec.keypoint_scores``). MSE heads: a score is the heatmap's peak, clipped
        to [0, 1]. Cross-entropy heads: each map's softmax (flip test averages these distributions) is decoded, a
        score is its probability mass within ``score_radius(sigma)`` px of the most probable pixel, and ``heatmaps``
        are the log-probabilities (logits of the same distribution, for the loss)."""
        def maps(x: torch.Tensor) -> torch.Tensor:
            out = self.predict(x)["heatmaps"]
            return heatmap_probabilities(out) if self.outputs_logits else out

        heatmaps = maps(pixel_values)
        if self.flip_test:
            heatmaps = (heatmaps + flip_heatmaps(maps(pixel_values.flip(-1)), self.flip_indices)) / 2
        coords, _ = decode_heatmaps(heatmaps.float())
        scores = keypoint_scores(heatmaps, self.outputs_logits, score_radius(self.sigma))
        if self.outputs_logits:
            heatmaps = heatmaps.clamp_min(torch.finfo(torch.float32).tiny).log()
        coords = heatmap_to_input_coords(coords, self.input_size, tuple(heatmaps.shape[-2:]))
        return {"heatmaps": heatmaps, "coords": coords, "scores": scores}

    @torch.no_grad()
    def estimate(self, images: list[np.ndarray], boxes: list[np.ndarray], batch_size: int) -> list[list[Person]]:
        """Per image, per person box (``[x, y, w, h, score]`` rows): the ``Person`` found in its crop. The crops of
        all images go through the model in batches of ``batch_size``."""
        owners = [(i, box) for i, image_boxes in enumerate(boxes) for box in image_boxes]
        people: list[list[Person]] = [[] for _ in images]
        aspect = self.input_size[1] / self.input_size[0]
        for start in range(0, len(owners), batch_size):
            chunk = owners[start:start + batch_size]
            matrices = [affine.crop_matrix(*affine.box_to_center_scale(box[:4], aspect), 0.0, self.input_size)
                        for _, box in chunk]
            crops = np.stack([affine.warp_image(images[i], m, self.input_size, affine.crop_interpolation(m))
                              for (i, _), m in zip(chunk, matrices)])
            outputs = self.infer(normalize_images(torch.from_numpy(crops).permute(0, 3, 1, 2).to(self.device)))
            coords, scores = outputs["coords"].cpu().double().numpy(), outputs["scores"].cpu().double().numpy()
            instance_scores = rescore(scores, np.array([box[4] for _, box in chunk]), KEYPOINT_SCORE_THRESHOLD)
            scores, instance_scores = scores.round(SCORE_DECIMALS), instance_scores.round(SCORE_DECIMALS)
            for k, ((i, box), matrix) in enumerate(zip(chunk, matrices)):
                people[i].append({"points": affine.transform_points(coords[k], affine.invert(matrix)),
                                  "scores": scores[k], "score": float(instance_scores[k]), "bbox": box[:4]})
        return people

    def writer(self, out: Path) -> PoseResults:
        return PoseResults(out, self.metainfo)

    # -- what predict draws and reports ----------------------------------------------------------

    def picture(self, result: list[Person], image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return f"pose ({len(result)} people)", draw.draw_people(image, result, self.metainfo.skeleton)

    def sheet_labels(self) -> SheetLabels:
        return SheetLabels(metainfo=self.metainfo)

    def findings(self, result: list[Person]) -> dict:
        """Each person's box ``[x, y, w, h]`` and score, and per keypoint name ``[x, y, score]`` in image pixels."""
        names = self.metainfo.keypoint_names
        return {"people": [{"bbox": [round(float(v), 2) for v in person["bbox"][:4]],
                            "score": round(float(person["score"]), 4),
                            "keypoints": {name: [round(float(x), 2), round(float(y), 2), round(float(s), 4)]
                                          for name, (x, y), s in zip(names, person["points"], person["scores"])}}
                           for person in result]}
