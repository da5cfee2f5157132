"""COCO keypoint AP (OKS-based) as a distributed-safe torchmetrics Metric."""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import rank_zero_warn

from datamodules.coco_keypoints import KeypointOrder
from sapiens2_ft.compat import SyncPreparation
from sapiens2_ft.tasks.diagnostics import Diagnostics, Table, keypoint_bar_chart, plain
from sapiens2_ft.tasks.pose.keypoint_accuracy import PCK_THRESHOLD, KeypointAccuracy, keypoint_accuracy
from sapiens2_ft.tasks.pose.oks_nms import keypoint_extent_area, oks_nms

STAT_NAMES = ("AP", "AP50", "AP75", "APM", "APL", "AR", "AR50", "AR75", "ARM", "ARL")


def rescore(keypoint_scores: np.ndarray, box_scores: np.ndarray, threshold: float) -> np.ndarray:
    """Instance score = box score x mean of the keypoint scores above ``threshold`` (0 if none).

    keypoint_scores (N, K), box_scores (N,) -> (N,) float64.
    """
    keypoint_scores = np.asarray(keypoint_scores, dtype=np.float64)
    mask = keypoint_scores > threshold
    n = mask.sum(axis=1)
    mean = np.where(n > 0, (keypoint_scores * mask).sum(axis=1) / np.maximum(n, 1), 0.0)
    return np.asarray(box_scores, dtype=np.float64) * mean


MISSED = -1e6  # px: where a non-finite predicted keypoint is placed; its OKS term there is 0


def as_misses(keypoints: np.ndarray, keypoint_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-finite predicted keypoints scored as misses: pycocotools would match a NaN OKS at every threshold (a
    diverged model would score AP 1.0), so they are moved to ``MISSED`` and their scores set to 0."""
    bad = ~np.isfinite(keypoints).all(-1)
    if bad.any():
        rank_zero_warn(f"CocoKeypointAP: {int(bad.any(-1).sum())} of {len(bad)} predictions have non-finite "
                       f"keypoints ({int(bad.sum())} in all); they count as misses", UserWarning)
        keypoints = np.where(bad[..., None], MISSED, keypoints)
    return keypoints, np.where(np.isfinite(keypoint_scores), keypoint_scores, 0.0)


@contextlib.contextmanager
def _captured_stdout():
    """Swallow pycocotools' prints; yields the buffer."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


class CocoKeypointAP(SyncPreparation, Metric):
    """COCO keypoint AP/AR (pycocotools ``COCOeval`` with the keypoint set's sigmas).

    Call ``update`` once per batch with predictions in ORIGINAL image pixels;
    ``compute`` gathers them from every process (list states, ``cat`` reduction),
    then, as MMPose's ``CocoMetric`` does:

    1. drops exact duplicate rows (a sample scored twice, e.g. by a caller that does not leave out the
       validation repeats of ``ValShardSampler``) and sorts rows canonically, so the result does not depend on the
       number of processes or the gather order;
    2. rescores each instance: ``box_score * mean(keypoint scores > keypoint_score_threshold)``
       (0 when no keypoint score is above the threshold);
    3. applies greedy OKS-NMS per image at ``nms_threshold`` when ``use_oks_nms``, the OKS scale of each
       instance being the area of its predicted keypoints' extent (``nms_area="keypoints"``, as the upstream
       Sapiens2 evaluator ``keypoints308_evaluator.py`` does) or the box area given to ``update``
       (``nms_area="box"``, as MMPose's ``CocoMetric``);
    4. evaluates with ``COCOeval(gt, dt, "keypoints")`` over all keypoints, and, for each of ``groups``,
       again over that group's keypoints and sigmas alone (``AP_<group>``), as the upstream evaluator and
       COCO-WholeBody's do: a person whose group has no labelled keypoint is ignored for that group, the
       instance score and the ground-truth area are the whole person's.

    Only the images that received at least one prediction are evaluated
    (``params.imgIds`` = their ids), so a partial validation pass (e.g.
    ``limit_val_batches``) is not penalised for images it never saw. On a full
    pass this equals the standard evaluation whenever every image with a
    person annotation gets at least one prediction (always the case with
    ground-truth boxes).

    After ``compute``: ``results`` holds the COCO-format results that were
    evaluated (dump it as ``predictions.json``), ``summary_text`` holds the
    pycocotools summary (nothing is printed) and ``keypoint_accuracy`` the
    per-keypoint OKS term and PCK of those results (``pose/keypoint_accuracy.py``),
    which ``diagnostics()`` tabulates and draws. Empty predictions give 0.0
    everywhere with a warning. Call ``update``, not ``forward``: with
    ``full_state_update=False`` a ``forward`` call runs a full COCO evaluation
    on the batch.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    image_ids: list[Tensor] | Tensor
    keypoints: list[Tensor] | Tensor
    keypoint_scores: list[Tensor] | Tensor
    box_scores: list[Tensor] | Tensor
    areas: list[Tensor] | Tensor

    def __init__(
        self,
        ann_file: str | Path,
        sigmas: Sequence[float],
        use_oks_nms: bool = True,
        nms_threshold: float = 0.9,
        keypoint_score_threshold: float = 0.2,
        category_id: int = 1,
        groups: Mapping[str, Sequence[int]] | None = None,
        nms_area: Literal["keypoints", "box"] = "keypoints",
        keypoint_names: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """``groups``: group name -> keypoint indices (``KeypointMetainfo.group_ids``), each reported as
        ``AP_<group>``. ``nms_area``: the instance area OKS-NMS uses, see the class docstring.
        ``keypoint_names``: names in the diagnostics (default: the annotation file's)."""
        super().__init__(**kwargs)
        self.ann_file = Path(ann_file)
        self.sigmas = np.asarray(sigmas, dtype=np.float64).reshape(-1)
        if self.sigmas.size == 0:
            raise ValueError("CocoKeypointAP: sigmas must not be empty")
        self.num_keypoints = int(self.sigmas.size)
        self.use_oks_nms = bool(use_oks_nms)
        self.nms_threshold = float(nms_threshold)
        self.keypoint_score_threshold = float(keypoint_score_threshold)
        self.category_id = int(category_id)
        if nms_area not in ("keypoints", "box"):
            raise ValueError(f"CocoKeypointAP: nms_area must be 'keypoints' or 'box', got {nms_area!r}")
        self.nms_area = nms_area
        self.groups = {str(name): [int(i) for i in ids] for name, ids in (groups or {}).items()}
        for name, ids in self.groups.items():
            if not ids or min(ids) < 0 or max(ids) >= self.num_keypoints:
                raise ValueError(f"CocoKeypointAP: group '{name}' needs keypoint indices in [0, "
                                 f"{self.num_keypoints}), got {ids}")
        if keypoint_names is not None and len(keypoint_names) != self.num_keypoints:
            raise ValueError(f"CocoKeypointAP: {len(keypoint_names)} keypoint names for {self.num_keypoints} sigmas")
        self.keypoint_names = list(keypoint_names) if keypoint_names is not None else None
        self._coco_gt: COCO | None = None
        self._group_gt: dict[str, COCO] = {}
        self.results: list[dict] = []
        self.summary_text: str = ""
        self.keypoint_accuracy = KeypointAccuracy.empty(self.num_keypoints)
        for name in self._state_shapes():
            self.add_state(name, default=[], dist_reduce_fx="cat")

    # ------------------------------------------------------------------ states
    def _state_shapes(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Trailing shape and dtype of each list state."""
        k = self.num_keypoints
        return {
            "image_ids": ((), torch.int64),
            "keypoints": ((k, 2), torch.float64),
            "keypoint_scores": ((k,), torch.float64),
            "box_scores": ((), torch.float64),
            "areas": ((), torch.float64),
        }

    def update(
        self, image_ids: Tensor, keypoints: Tensor, keypoint_scores: Tensor, box_scores: Tensor, areas: Tensor
    ) -> None:
        """Add a batch.

        image_ids (N,) int64; keypoints (N, K, 2) xy in ORIGINAL image pixels; keypoint_scores (N, K);
        box_scores (N,) (1.0 for ground-truth boxes); areas (N,) box area in px^2 (the OKS-NMS scale when
        ``nms_area="box"``).
        """
        image_ids = torch.as_tensor(image_ids).reshape(-1)
        if image_ids.is_floating_point() or image_ids.is_complex():
            raise TypeError(f"CocoKeypointAP: image_ids must be an integer tensor, got {image_ids.dtype}")
        keypoints = torch.as_tensor(keypoints)
        keypoint_scores = torch.as_tensor(keypoint_scores)
        box_scores = torch.as_tensor(box_scores).reshape(-1)
        areas = torch.as_tensor(areas).reshape(-1)
        n, k = image_ids.shape[0], self.num_keypoints
        if keypoints.ndim != 3 or keypoints.shape[-1] != 2 or keypoint_scores.ndim != 2:
            raise ValueError(
                f"CocoKeypointAP: expected keypoints (N, K, 2) and keypoint_scores (N, K), "
                f"got {tuple(keypoints.shape)} and {tuple(keypoint_scores.shape)}"
            )
        if keypoints.shape[1] != k or keypoint_scores.shape[1] != k:
            raise ValueError(
                f"CocoKeypointAP({self.ann_file}): predictions have {keypoints.shape[1]} keypoints "
                f"(scores: {keypoint_scores.shape[1]}) but {k} sigmas were given"
            )
        sizes = {
            "image_ids": n,
            "keypoints": keypoints.shape[0],
            "keypoint_scores": keypoint_scores.shape[0],
            "box_scores": box_scores.shape[0],
            "areas": areas.shape[0],
        }
        if len(set(sizes.values())) != 1:
            raise ValueError(f"CocoKeypointAP: inconsistent batch sizes {sizes}")
        values = {
            "image_ids": image_ids,
            "keypoints": keypoints,
            "keypoint_scores": keypoint_scores,
            "box_scores": box_scores,
            "areas": areas,
        }
        for name, (_, dtype) in self._state_shapes().items():
            getattr(self, name).append(values[name].detach().to(device=self.device, dtype=dtype))

    def before_sync(self) -> None:
        """Give empty list states a correctly shaped/typed placeholder before gathering.

        torchmetrics pads an empty rank with a 1-D tensor of ``self.dtype``, which
        breaks the gather against (N, K, 2) float64 / int64 states on other ranks.
        ``sync`` caches the local states before this, so ``unsync`` restores them.
        """
        for name, (trailing, dtype) in self._state_shapes().items():
            value = getattr(self, name)
            if isinstance(value, list) and len(value) == 0:
                setattr(self, name, [torch.zeros((0, *trailing), dtype=dtype, device=self.device)])

    def _gathered(self, name: str) -> np.ndarray:
        """A state as one numpy array, whatever form sync left it in."""
        trailing, dtype = self._state_shapes()[name]
        value = getattr(self, name)
        if isinstance(value, list):
            value = torch.cat(value) if value else torch.zeros((0, *trailing), dtype=dtype)
        if value.numel() == 0:
            value = value.reshape(0, *trailing)
        return value.detach().to(dtype).cpu().numpy()

    # ---------------------------------------------------------------- gt data
    @property
    def coco_gt(self) -> COCO:
        """Ground truth, loaded once (quietly) and validated against the sigmas."""
        if self._coco_gt is None:
            if not self.ann_file.is_file():
                raise FileNotFoundError(f"CocoKeypointAP: annotation file not found: {self.ann_file}")
            with _captured_stdout():
                coco = COCO(str(self.ann_file))
            if self.keypoint_names is not None:  # a json listing the set's names in another order: by name
                order = KeypointOrder(coco.dataset.get("categories"), self.keypoint_names, "of the run", self.ann_file)
                if order.remapped:
                    order.apply(coco.dataset)
                    with _captured_stdout():
                        coco.createIndex()
            cat = coco.cats.get(self.category_id)
            if cat is None:
                raise ValueError(
                    f"CocoKeypointAP({self.ann_file}): category_id {self.category_id} not in the annotation file "
                    f"(categories: {sorted(coco.cats)})"
                )
            n_gt = len(cat.get("keypoints", []))
            if n_gt != self.num_keypoints:
                raise ValueError(
                    f"CocoKeypointAP({self.ann_file}): category {self.category_id} defines {n_gt} keypoints "
                    f"but {self.num_keypoints} sigmas were given"
                )
            self._coco_gt = coco
        return self._coco_gt

    def _group_coco(self, name: str) -> COCO:
        """The ground truth restricted to one group's keypoints (``num_keypoints`` recounted), built once."""
        if name not in self._group_gt:
            ids = self.groups[name]
            data = copy.deepcopy(self.coco_gt.dataset)
            for ann in data.get("annotations", []):
                if "keypoints" in ann:
                    triplets = np.asarray(ann["keypoints"], dtype=np.float64).reshape(-1, 3)[ids]
                    ann["keypoints"] = triplets.reshape(-1).tolist()
                    ann["num_keypoints"] = int((triplets[:, 2] > 0).sum())
            for cat in data.get("categories", []):
                if cat.get("id") == self.category_id:
                    cat["keypoints"] = [cat["keypoints"][i] for i in ids]
                    cat["skeleton"] = []
            with _captured_stdout():
                coco = COCO()
                coco.dataset = data
                coco.createIndex()
            self._group_gt[name] = coco
        return self._group_gt[name]

    # ---------------------------------------------------------------- compute
    def compute(self) -> dict[str, Tensor]:
        """keys: AP, AP50, AP75, APM, APL, AR, AR50, AR75, ARM, ARL, then AP_<group> for each group
        (floats in [0,1], -1 where undefined, e.g. a group with no labelled keypoint in the evaluated images)."""
        ids = self._gathered("image_ids")
        kpts = self._gathered("keypoints")
        kscores = self._gathered("keypoint_scores")
        boxes = self._gathered("box_scores")
        areas = self._gathered("areas")
        k = self.num_keypoints

        if ids.shape[0] == 0:
            rank_zero_warn("CocoKeypointAP: no predictions to evaluate; every metric is 0.0.", UserWarning)
            self.results, self.summary_text = [], ""
            self.keypoint_accuracy = KeypointAccuracy.empty(k)
            return self._to_output(np.zeros(len(STAT_NAMES)), {name: 0.0 for name in self.groups})

        coco = self.coco_gt
        unknown = np.setdiff1d(np.unique(ids), np.asarray(coco.getImgIds(), dtype=np.int64))
        if unknown.size:
            raise ValueError(
                f"CocoKeypointAP({self.ann_file}): {unknown.size} predicted image id(s) are not in the "
                f"annotation file, e.g. {unknown[:5].tolist()}"
            )

        kpts, kscores = as_misses(kpts, kscores)
        # Canonical order + exact-duplicate removal (layout: id, box, area, xy..., scores...).
        rows = np.concatenate(
            [ids[:, None].astype(np.float64), boxes[:, None], areas[:, None], kpts.reshape(-1, 2 * k), kscores], axis=1
        )
        rows = np.unique(rows, axis=0)
        ids = rows[:, 0].astype(np.int64)
        boxes, areas = rows[:, 1], rows[:, 2]
        kpts = rows[:, 3 : 3 + 2 * k].reshape(-1, k, 2)
        kscores = rows[:, 3 + 2 * k :]
        scores = rescore(kscores, boxes, self.keypoint_score_threshold)
        if self.nms_area == "keypoints":
            areas = keypoint_extent_area(np.where(kpts == MISSED, np.nan, kpts))

        results: list[dict] = []
        img_ids, starts = np.unique(ids, return_index=True)  # rows are sorted by image id
        for img_id, lo, hi in zip(img_ids, starts, [*starts[1:], len(ids)]):
            idx = np.arange(lo, hi)
            if self.use_oks_nms:
                keep = idx[oks_nms(kpts[idx], scores[idx], areas[idx], self.sigmas, self.nms_threshold)]
            else:
                keep = idx[np.argsort(-scores[idx], kind="stable")]
            for i in keep:
                triplets = np.concatenate([kpts[i], kscores[i][:, None]], axis=1)
                results.append(
                    {
                        "image_id": int(img_id),
                        "category_id": self.category_id,
                        "keypoints": triplets.reshape(-1).tolist(),
                        "score": float(scores[i]),
                    }
                )

        stats, self.summary_text = self._evaluate(coco, results, img_ids.tolist(), self.sigmas)
        group_ap = {}
        for name, group in self.groups.items():
            subset = [{**r, "keypoints": np.asarray(r["keypoints"]).reshape(-1, 3)[group].reshape(-1).tolist()}
                      for r in results]
            stats_group, _ = self._evaluate(self._group_coco(name), subset, img_ids.tolist(), self.sigmas[group])
            group_ap[name] = stats_group[0]
        self.results = results
        self.keypoint_accuracy = keypoint_accuracy(coco, results, img_ids.tolist(), self.sigmas, self.category_id)
        return self._to_output(stats, group_ap)

    def diagnostics(self) -> Diagnostics:
        """``keypoints``: per keypoint its ``visible`` count, mean ``oks`` term and ``pck`` (of the latest
        ``compute``), as a table and a bar chart."""
        acc = self.keypoint_accuracy
        names = self.keypoint_names
        if names is None:
            names = self.coco_gt.cats[self.category_id]["keypoints"] if self.ann_file.is_file() else \
                [f"keypoint_{i}" for i in range(self.num_keypoints)]
        rows = [[i, str(names[i]), int(acc.visible[i]), plain(acc.oks[i]), plain(acc.pck[i])]
                for i in range(self.num_keypoints)]
        title = (f"{acc.matched} matched persons ({acc.unmatched} without a prediction)\n"
                 f"mean OKS term; PCK: error < {PCK_THRESHOLD:g} x max(box w, h)")
        return Diagnostics({"keypoints": Table(["keypoint_id", "keypoint", "visible", "oks", "pck"], rows)},
                           {"keypoints": keypoint_bar_chart(names, acc.oks, acc.pck, title)})

    def _evaluate(self, coco: COCO, results: list[dict], img_ids: list[int],
                  sigmas: np.ndarray) -> tuple[np.ndarray, str]:
        """Run pycocotools quietly; returns (stats, summary text)."""
        with _captured_stdout():
            dt = coco.loadRes([dict(r) for r in results])  # loadRes adds keys in place; keep ours clean
            ev = COCOeval(coco, dt, "keypoints")
            ev.params.kpt_oks_sigmas = np.array(sigmas, dtype=np.float64)
            ev.params.imgIds = img_ids
            ev.params.catIds = [self.category_id]
            ev.evaluate()
            ev.accumulate()
        with _captured_stdout() as buf:
            ev.summarize()
        return np.asarray(ev.stats, dtype=np.float64), buf.getvalue()

    def _to_output(self, stats: np.ndarray, group_ap: dict[str, float]) -> dict[str, Tensor]:
        values = {**dict(zip(STAT_NAMES, stats)), **{f"AP_{name}": ap for name, ap in group_ap.items()}}
        return {name: torch.tensor(float(v), dtype=torch.float64, device=self.device) for name, v in values.items()}

    # ----------------------------------------------------------------- misc
    def reset(self) -> None:
        """Clear states, results and summary (the cached ground truth is kept)."""
        super().reset()
        self.results = []
        self.summary_text = ""
        self.keypoint_accuracy = KeypointAccuracy.empty(self.num_keypoints)

    def __getstate__(self) -> dict[str, Any]:
        """Do not pickle/deepcopy the cached ground truth; it reloads lazily."""
        state = super().__getstate__()
        state["_coco_gt"] = None
        state["_group_gt"] = {}
        return state
