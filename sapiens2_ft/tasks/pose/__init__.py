"""Top-down pose: the task module, its heatmap losses, the UDP heatmap codec, COCO OKS AP and OKS-NMS."""
