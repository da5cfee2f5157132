from sapiens2_ft.losses.heatmap import heatmap_cross_entropy, weighted_heatmap_mse
from sapiens2_ft.losses.matting import matting_loss
from sapiens2_ft.losses.normal import normal_loss
from sapiens2_ft.losses.pointmap import pointmap_loss
from sapiens2_ft.losses.segmentation import segmentation_loss

__all__ = [
    "heatmap_cross_entropy",
    "matting_loss",
    "normal_loss",
    "pointmap_loss",
    "segmentation_loss",
    "weighted_heatmap_mse",
]
