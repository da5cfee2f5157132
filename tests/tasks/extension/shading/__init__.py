"""Shading (a toy task of tests/tasks/test_extension.py): the task module, an L1 + gradient loss, MAE / RMSE."""
