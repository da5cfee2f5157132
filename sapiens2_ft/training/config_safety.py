"""What a recipe may import and call, checked before anything it names is imported.

A config is code-like: ``class_path`` entries (strategies, callbacks, loggers, optimisers) are imported
and called, and so are functions given to function-typed arguments (a ``LambdaCallback``'s hooks). A config
from someone else must not be able to run arbitrary code, so:

- classes: only under these module prefixes: ``sapiens2_ft.``, ``datamodules.`` (this project), ``lightning.``
  (Lightning's strategies, callbacks, loggers, plugins), ``torch.optim.``, ``torchmetrics.``;
- functions: only those of :data:`ALLOWED_FUNCTIONS`;
- data locations (``data.shards``): a folder, or a URL of a scheme the boundary reads (``https``, ``http``, ``s3``,
  ``gs``: ``datamodules/boundary/urls.py``); ``pipe:`` (a shell command) and any other scheme are refused.

Your own classes and functions (a callback in ``my_project.callbacks``) are allowed from the environment only,
never from a config file: ``SAPIENS2_FT_ALLOW_CLASSES=my_project.,other_pkg.``.

Three checks, each before anything runs: every config file is read (YAML, no tags) and its ``class_path`` values
and the function-typed values of its classes are checked as strings (:func:`check_recipe_files`); while the
parser resolves the recipe it imports nothing outside these modules and functions (``compat.only_imports_under``:
values of the command line, config files named inside others); and the parsed recipe is checked once more before
any class is built (:func:`check_parsed_recipe`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from pathlib import Path

import yaml

from datamodules.boundary.files import read_yaml
from datamodules.boundary.urls import scheme_of
from datamodules.errors import BadConfig, DataError, NotFound, Refused, RefusedInput

ALLOWED_PREFIXES = ("sapiens2_ft.", "datamodules.", "lightning.", "torch.optim.", "torchmetrics.")
ALLOWED_FUNCTIONS = (
    "lightning.pytorch.callbacks.finetuning.multiplicative",  # BackboneFinetuning's default lambda_func
)
ALLOW_ENV = "SAPIENS2_FT_ALLOW_CLASSES"


def own_prefixes() -> tuple[str, ...]:
    """The user's own modules, from the environment."""
    return tuple(p.strip() for p in os.environ.get(ALLOW_ENV, "").split(",") if p.strip())


def allowed_prefixes() -> tuple[str, ...]:
    return ALLOWED_PREFIXES + own_prefixes()


def allowed_function(path: str) -> bool:
    return path in ALLOWED_FUNCTIONS or path.startswith(own_prefixes())


def import_roots() -> list[str]:
    """The dot paths under which the parser may import (``compat.only_imports_under``)."""
    roots = [p.rstrip(".") for p in allowed_prefixes()]
    return [r for r in roots if r and all(part.isidentifier() for part in r.split("."))] + list(ALLOWED_FUNCTIONS)


def class_paths(value, where: str = "") -> list[tuple[str, str]]:
    """Every ``(key path, class_path)`` in a nested config (dicts and lists)."""
    return [(key, spec["class_path"]) for key, spec in class_specs(value, where)]


def class_specs(value, where: str = "") -> list[tuple[str, dict]]:
    """Every ``(key path, {"class_path": ..., "init_args": ...})`` in a nested config (dicts and lists)."""
    found = []
    if isinstance(value, dict):
        if isinstance(value.get("class_path"), str):
            found.append((where or "<root>", value))
        for key, item in value.items():
            found += class_specs(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += class_specs(item, f"{where}[{i}]")
    return found


def _import(path: str):
    """The object at dot path ``path`` (a module under the allowed prefixes: importing it runs no recipe code),
    or None."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None


def function_arguments(class_path: str) -> set[str]:
    """The arguments of an allowed class that take a function (annotated ``Callable``)."""
    cls = _import(class_path)
    if not inspect.isclass(cls):
        return set()
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if "Callable" in str(p.annotation)}


LOCATION_KEYS = ("shards",)  # keys whose value is a folder or URL data is read from


def location_problems(value, where: str = "") -> list[str]:
    """Data locations (:data:`LOCATION_KEYS`) of a scheme the boundary does not read, named by key."""
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if key in LOCATION_KEYS and isinstance(item, str):
                try:
                    scheme_of(item)
                except RefusedInput as err:
                    found.append(f"{path}: {err}")
            else:
                found += location_problems(item, path)
        return found
    if isinstance(value, (list, tuple)):
        return [p for i, item in enumerate(value) for p in location_problems(item, f"{where}[{i}]")]
    return []


def recipe_problems(config) -> list[str]:
    """Classes outside the allowed modules, functions off the list and data locations that would run a command,
    named by key, in a config as written."""
    prefixes = allowed_prefixes()
    problems = location_problems(config)
    for key, spec in class_specs(config):
        path = spec["class_path"]
        if not path.startswith(prefixes):
            problems.append(f"{key}: {path} (a class outside the allowed modules {', '.join(prefixes)})")
            continue
        init_args = spec.get("init_args") if isinstance(spec.get("init_args"), dict) else {}
        arguments = {**{k: v for k, v in spec.items() if k not in ("class_path", "init_args")}, **init_args}
        for name in sorted(function_arguments(path) & set(arguments)):
            value = arguments[name]
            if value is not None and not (isinstance(value, str) and allowed_function(value)):
                problems.append(f"{key}.init_args.{name}: {value} (a function; allowed: "
                                f"{', '.join(ALLOWED_FUNCTIONS)})")
    return problems


def refuse(problems: list[str], source: str) -> None:
    if problems:
        raise Refused(f"{source} names code it may not run: " + "; ".join(problems)
                      + f". Only classes of the allowed modules and the listed functions are; to allow your own "
                           f"module, set {ALLOW_ENV}=your_module. in the environment (docs/reliability.md).")


def load_recipe(path: str | Path) -> dict:
    """A config file as plain YAML data (no tags); a BadConfig (NotFound, RefusedInput) naming the file otherwise."""
    try:
        data = read_yaml(path)
    except yaml.YAMLError as err:
        raise BadConfig(f"{path}: not a plain YAML recipe ({' '.join(str(err).split())})") from None
    except OSError as err:
        kind = NotFound if isinstance(err, FileNotFoundError) else BadConfig
        raise kind(f"{path}: cannot read the config ({err.strerror})") from None
    except DataError as err:  # a FIFO, a file above the size limit, a YAML bomb
        raise err.with_message(f"config {err}") from None
    if data is not None and not isinstance(data, dict):
        raise BadConfig(f"{path}: a recipe is a YAML mapping of keys, got a {type(data).__name__}")
    return data or {}


def config_files(argv: list[str]) -> list[str]:
    """The ``--config`` files of a command line."""
    files = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


def check_recipe_files(argv: list[str]) -> None:
    """Refuse a ``--config`` file that is not plain YAML or names classes or functions it may not, before the
    parser imports anything it names."""
    for path in config_files(argv):
        refuse(recipe_problems(load_recipe(path)), f"config {path}")


def check_class_paths(config: dict) -> None:
    """Refuse classes outside the allowed prefixes, naming the key and the way to allow one's own."""
    prefixes = allowed_prefixes()
    refused = [(key, path) for key, path in class_paths(config) if not path.startswith(prefixes)]
    if refused:
        listing = "; ".join(f"{key}: {path}" for key, path in refused)
        raise Refused(f"config refers to classes outside the allowed modules ({', '.join(prefixes)}): {listing}. "
                      f"To allow your own module, set {ALLOW_ENV}=your_module. in the environment.")


def function_values(value, where: str = "") -> list[tuple[str, str]]:
    """Every ``(key path, dotted name)`` of a function (or method) in a parsed config."""
    if isinstance(value, dict):
        return [f for key, item in value.items() for f in function_values(item, f"{where}.{key}" if where else key)]
    if isinstance(value, (list, tuple)):
        return [f for i, item in enumerate(value) for f in function_values(item, f"{where}[{i}]")]
    if inspect.isroutine(value) or isinstance(value, functools.partial):
        function = value.func if isinstance(value, functools.partial) else value
        return [(where, f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}")]
    return []


def check_parsed_recipe(config: dict) -> None:
    """The parsed recipe, before any class is built or function called: its data locations, classes and
    functions."""
    refuse(location_problems(config), "the recipe")
    check_class_paths(config)
    refused = [f"{key}: {name}" for key, name in function_values(config) if not allowed_function(name)]
    if refused:
        raise Refused(f"config gives functions off the allowed list ({', '.join(ALLOWED_FUNCTIONS)}): "
                      + "; ".join(refused) + f". To allow your own module, set {ALLOW_ENV}=your_module. in the "
                        "environment.")
