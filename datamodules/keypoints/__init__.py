"""Keypoint sets: the built-in YAML files (``coco17``, ``coco_wholebody``, ``sapiens2_308``) and their reader
(``metainfo``)."""
