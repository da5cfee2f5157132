"""Class sets of segmentation: the built-in YAML files (``sapiens2_29``, ``coarse``) and their reader
(``class_set``)."""
