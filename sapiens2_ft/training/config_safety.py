"""What a config file may instantiate.

A config is code-like: ``class_path`` entries (strategies, callbacks, loggers, optimisers) are imported
and called. A config from someone else must not be able to run arbitrary code, so only classes under
these module prefixes are allowed:

- ``sapiens2_ft.``, ``datamodules.`` (this project), ``lightning.`` / ``lightning.pytorch.`` (Lightning's
  strategies, callbacks, loggers, plugins), ``torch.optim.``, ``torchmetrics.``.

Your own classes (a callback in ``my_project.callbacks``) are allowed from the command line or the
environment only, never from a config file: ``SAPIENS2_FT_ALLOW_CLASSES=my_project.,other_pkg.``.
"""

from __future__ import annotations

import os

ALLOWED_PREFIXES = ("sapiens2_ft.", "datamodules.", "lightning.", "torch.optim.", "torchmetrics.")
ALLOW_ENV = "SAPIENS2_FT_ALLOW_CLASSES"


def allowed_prefixes() -> tuple[str, ...]:
    extra = [p.strip() for p in os.environ.get(ALLOW_ENV, "").split(",") if p.strip()]
    return ALLOWED_PREFIXES + tuple(extra)


def class_paths(value, where: str = "") -> list[tuple[str, str]]:
    """Every ``(key path, class_path)`` in a nested config (dicts and lists)."""
    found = []
    if isinstance(value, dict):
        if isinstance(value.get("class_path"), str):
            found.append((where or "<root>", value["class_path"]))
        for key, item in value.items():
            found += class_paths(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += class_paths(item, f"{where}[{i}]")
    return found


def check_class_paths(config: dict) -> None:
    """Refuse classes outside the allowed prefixes, naming the key and the way to allow one's own."""
    prefixes = allowed_prefixes()
    refused = [(key, path) for key, path in class_paths(config) if not path.startswith(prefixes)]
    if refused:
        listing = "; ".join(f"{key}: {path}" for key, path in refused)
        raise SystemExit(f"config refers to classes outside the allowed modules ({', '.join(prefixes)}): {listing}. "
                         f"To allow your own module, set {ALLOW_ENV}=your_module. in the environment.")
