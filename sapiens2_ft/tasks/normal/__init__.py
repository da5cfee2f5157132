"""Surface normals: the task module, cosine + L1 + gradient loss, angular-error metrics."""
