"""Training with a teacher (``model.distill.*``): a trained model of the same task whose outputs the student matches.

The teacher is an export or a released hub model, loaded as predict loads one (``tasks.saved_model.load_inference``,
here with the task known) with the student's label set, so its rows are taken by name (pose: keypoint
names; seg: class names; a name it lacks is a ``BadConfig`` naming it). It is frozen, in eval mode, outside the
student's module tree (not in its state dict, optimiser or ``train()``), runs under ``torch.no_grad`` and, where the
device has native bf16 (a GPU that supports it; a CPU with ``avx512_bf16`` / AMX: ``models.cpu_bf16``), in bf16
autocast with bf16 weights. Under FSDP2 it is sharded over the same mesh as the student (``models.sharding``).

The terms (each task module's ``distill_loss``; DWPose-style logit distillation):

- pose: the teacher's heatmaps on the same crop, MSE over every keypoint (an MSE head), or, for heatmap
  cross-entropy heads, KL between the temperature-softened pixel distributions, times T^2;
- seg: KL between the teacher's and the student's class distributions at temperature T, times T^2 (Hinton et al.:
  the gradients keep their scale whatever T);
- the geometric tasks (normal, pointmap, matting, albedo): L1 to each of the teacher's maps, on the sample's mask
  where it has one (labelled images), on every pixel of an unlabelled image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from datamodules.boundary.files import read_json
from datamodules.boundary.folders import handed_file, links_under
from datamodules.errors import BadConfig, RefusedInput
from sapiens2_ft.models.cpu_bf16 import native_bf16
from sapiens2_ft.tasks.inference import Outputs, TaskInference


@dataclass(frozen=True)
class DistillOptions:
    """Training with a teacher (off while ``teacher`` is unset).

    Args:
        teacher: A trained model of this task: an exported directory or a hub id (``facebook/sapiens2-pose-5b``).
            Its output rows are taken by the student's label names; it may be larger or smaller.
        weight: Weight of the distillation term in the loss.
        label_weight: Weight of the labelled loss (0: the teacher is the only target).
        temperature: Softmax temperature of seg's class distributions and of heatmap cross-entropy heads' pixel
            distributions (the KL term is scaled by T^2).
        on_labeled: Also match the teacher on the labelled images (else only on ``data.unlabeled``'s).
    """

    teacher: str | None = None
    weight: float = 1.0
    label_weight: float = 1.0
    temperature: float = 1.0
    on_labeled: bool = True


def option_problems(options: DistillOptions, can_distill: bool) -> list[str]:
    """The problems of ``model.distill`` (none: [])."""
    problems = []
    if options.teacher is not None and not can_distill:
        problems.append("model.distill.teacher: this task does not train with a teacher")
    if not options.temperature > 0:
        problems.append(f"model.distill.temperature: {options.temperature} must be > 0")
    if options.weight < 0 or options.label_weight < 0:
        problems.append("model.distill.weight and model.distill.label_weight must be >= 0")
    return problems


def bf16_supported(device: torch.device, cpuinfo: str | None = None) -> bool:
    """Whether ``device`` runs bf16 natively (a CUDA GPU that supports it; a CPU with native bf16 flags)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and native_bf16(cpuinfo)


def check_teacher_folder(directory: Path) -> None:
    """A teacher folder handed by someone else: no symbolic link in it (one could lead to any file of this machine),
    its ``config.json`` a regular file within the JSON size limit (``RefusedInput`` / ``DataError`` otherwise)."""
    links = links_under(directory)
    if links:
        raise RefusedInput(f"model.distill.teacher: {directory} holds symbolic links {links[:5]}; links in a model "
                           "folder are not followed: replace them with the files themselves")
    read_json(handed_file(directory, "config.json"))


def load_teacher(teacher: str, inference_class: type[TaskInference], labels, input_size: Sequence[int]
                 ) -> TaskInference:
    """The teacher as an inference object of the student's task (``inference_class``) at the student's
    ``input_size``, for the student's ``labels`` (its rows taken by name), frozen, in eval mode on the CPU: what
    ``tasks.saved_model.load_inference`` does, the task known."""
    from transformers import Sapiens2Config

    from sapiens2_ft.models.factory import PretrainedNotFoundError, resolve_pretrained

    try:
        directory = Path(resolve_pretrained(teacher, "model.distill.teacher"))
    except PretrainedNotFoundError as err:
        raise BadConfig(str(err)) from None
    check_teacher_folder(directory)
    config = Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
    spec = inference_class.spec
    if not spec.holds(config):
        raise BadConfig(f"model.distill.teacher {teacher} holds a {(config.architectures or ['Sapiens2Model'])[0]}, "
                        f"not a {spec.name} model")
    try:
        inference = inference_class(input_size, **inference_class.options_from_model(directory, config, labels))
    except ValueError as err:
        raise BadConfig(f"model.distill.teacher {teacher}: {err}") from None
    inference.model, inference.load_report = inference.build(pretrained=str(directory))
    inference.model.requires_grad_(False)
    return inference.to("cpu")


class Teacher:
    """A loaded teacher (``load_teacher``): frozen, in eval mode, its outputs without gradients, in bf16 where the
    device runs it natively. Not an ``nn.Module``: the student's module holds it without owning its weights."""

    def __init__(self, inference: TaskInference, cpuinfo: str | None = None):
        self.inference, self.cpuinfo = inference, cpuinfo
        self.bf16 = False

    @property
    def model(self) -> torch.nn.Module:
        return self.inference.model

    def place(self, device: torch.device, mesh=None) -> "Teacher":
        """On ``device`` (sharded over ``mesh`` under FSDP2), with bf16 weights where the device runs bf16."""
        from sapiens2_ft.models.sharding import ScaleConfig, place_model

        self.bf16 = bf16_supported(device, self.cpuinfo)
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        self.model.to(dtype)
        if mesh is not None:  # every rank's shards of the same weights, in the same dtype
            model = self.model
            placed, _ = place_model(lambda: (model, None), lambda config: type(model)(config).to(dtype),
                                    ScaleConfig(), mesh, device)
            self.inference.model = placed.requires_grad_(False)
        self.inference.to(device)
        return self

    @torch.no_grad()
    def __call__(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> Outputs:
        """The teacher's outputs (its ``predict``: the student's loss inputs) on normalised images, as float32."""
        self.model.eval()  # whatever a trainer did to the modules it knows
        with torch.autocast(pixel_values.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            outputs = self.inference.predict(pixel_values, size)
        return {k: v.float() for k, v in outputs.items()}


def softened_kl(student: torch.Tensor, teacher: torch.Tensor, dim: int, temperature: float) -> torch.Tensor:
    """KL(teacher || student) of the softmaxes at ``temperature`` over ``dim``, times T^2, averaged over the
    other positions."""
    t = float(temperature)
    log_student = F.log_softmax(student.float() / t, dim=dim)
    log_teacher = F.log_softmax(teacher.float() / t, dim=dim)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(dim)
    return kl.mean() * t * t


def heatmap_distill(student: torch.Tensor, teacher: torch.Tensor, logits: bool, temperature: float) -> torch.Tensor:
    """Pose: MSE to the teacher's heatmaps (resized to the student's), every keypoint weighted 1; logits heads: the
    softened KL over each heatmap's pixels."""
    if teacher.shape[-2:] != student.shape[-2:]:
        teacher = F.interpolate(teacher, size=student.shape[-2:], mode="bilinear", align_corners=False)
    if logits:
        return softened_kl(student.flatten(-2), teacher.flatten(-2), -1, temperature)
    return (student.float() - teacher).pow(2).mean()


def map_distill(student: Outputs, teacher: Outputs, mask: torch.Tensor | None) -> torch.Tensor:
    """Geometric tasks: the mean over the teacher's outputs of the L1 to each, per map on ``mask`` (B, [1,] H, W)
    where given; per-image values (a pointmap's scale) in full."""
    terms = []
    for name, target in teacher.items():
        diff = (student[name].float() - target).abs()
        if diff.ndim == 4 and mask is not None:
            weights = mask.reshape(len(mask), 1, *mask.shape[-2:]).to(diff.dtype)
            if weights.shape[-2:] != diff.shape[-2:]:
                weights = F.interpolate(weights, size=diff.shape[-2:], mode="nearest")
            terms.append((diff * weights).sum() / (weights.sum() * diff.shape[1]).clamp_min(1.0))
        else:
            terms.append(diff.mean())
    return torch.stack(terms).mean()
