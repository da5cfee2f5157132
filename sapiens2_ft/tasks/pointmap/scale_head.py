"""The pointmap scale branch and the input size: its MLP's first layer takes the flattened features of the last
stride-2 conv, so its size follows ``image_size`` (``TaskSpec.model.fit_model`` of the pointmap task)."""

from __future__ import annotations

from torch import nn

from sapiens2_ft.models.factory import LoadReport


def fit_scale_head(model: nn.Module, report: LoadReport) -> None:
    """Rebuild the scale MLP's first layer where the model's ``image_size`` changed its input size (noted in
    ``report``), then check that the branch can run at that size."""
    head = model.config.head_config
    if head.scale_conv_out_channels is None:
        return
    trained = head.scale_final_input_size
    head.scale_final_input_size = None
    head._init_scale_final_input_size(model.config.image_size, model.config.patch_size)
    if head.scale_final_input_size != trained:
        old = model.scale_head.predictor.block1.layers[0]
        model.scale_head.predictor.block1.layers[0] = nn.Linear(head.scale_final_input_size, old.out_features).to(
            device=old.weight.device, dtype=old.weight.dtype)
        report.notes.append(f"scale MLP input layer new: {trained} -> {head.scale_final_input_size} features "
                            f"for image_size {list(model.config.image_size)}")
    check_scale_branch(model.config)


def check_scale_branch(config) -> None:
    """The scale branch's instance norms need more than one feature pixel after its stride-2 convs."""
    head = config.head_config
    if head.scale_conv_out_channels and head.scale_final_input_size <= head.scale_conv_out_channels[-1]:
        raise ValueError(
            f"input size {list(config.image_size)} is too small for the pointmap scale branch "
            f"({len(head.scale_conv_out_channels)} stride-2 convs leave one feature pixel); use a larger "
            f"data.input_size or a head with fewer scale_conv_out_channels"
        )
