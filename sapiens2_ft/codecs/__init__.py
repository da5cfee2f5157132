"""Keypoint <-> heatmap codecs."""

from sapiens2_ft.codecs.udp_heatmap import (
    decode_heatmaps,
    encode_heatmaps,
    flip_heatmaps,
    heatmap_to_input_coords,
    input_to_heatmap_coords,
)

__all__ = [
    "decode_heatmaps",
    "encode_heatmaps",
    "flip_heatmaps",
    "heatmap_to_input_coords",
    "input_to_heatmap_coords",
]
