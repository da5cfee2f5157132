from sapiens2_ft.losses.heatmap import heatmap_cross_entropy, weighted_heatmap_mse

__all__ = ["heatmap_cross_entropy", "weighted_heatmap_mse"]
