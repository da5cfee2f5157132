"""Models layer: Sapiens2 task models over transformers (factory, presets, sharding, init_from), their optimiser,
checkpoint records and input normalisation. Knows no task names: the task registry passes them in."""
