import datamodules.boundary  # noqa: F401  (sets OpenCV's pixel limit before any module loads OpenCV)
