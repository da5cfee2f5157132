"""The dense tasks' data pieces, as ``transforms/`` is the pose side's: sample files (``files``), target specs
(``targets/``), geometry and nearest warps (``geometry``), augmentation pipelines (``augment``, ``transforms``,
``photometric``, ``background``) and sample filters (``filters``). The data module and dataset are
``datamodules/dense_datamodule.py`` and ``dense_dataset.py``, beside the pose ones."""
