"""Task layer: the task registry, the task-module base, and one folder per task (module, loss, metric)."""
