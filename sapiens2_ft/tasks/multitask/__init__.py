"""Multi-task pretraining of the demo backbone: one shared backbone, each task module's own head, loss and metric."""
