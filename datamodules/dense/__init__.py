"""The dense tasks' data pieces, as ``transforms/`` is the pose side's: sample files (``files``), what a task hands
the data layer (``target_spec``: its ``TargetSpec``; ``maps``: how its maps move; ``readers``: the file readers its
loaders share), geometry and nearest warps (``geometry``), augmentation pipelines (``augment``, ``transforms``,
``photometric``, ``background``) and sample filters (``filters``). The data module and dataset are
``datamodules/dense_datamodule.py`` and ``dense_dataset.py``, beside the pose ones. No file here names a task: each
task's target spec lives in its folder (``sapiens2_ft/tasks/<task>/targets.py``) and is handed down."""
