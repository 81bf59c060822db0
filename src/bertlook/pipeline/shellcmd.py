"""The one way a Snakemake rule builds its command line: every value is quoted for the shell.

Rules never paste config values into a ``shell:`` string. Each rule's only parameter is
``cmd``, built by :func:`command` (through ``bertlook_cmd`` in ``workflow/rules/rule_helpers.smk``),
and its shell line is always ``"{params.cmd} > {log:q} 2>&1"``. Every flag value, whatever the
schema allowed into it (a path with spaces, a ``$( )``, a backtick, a quote, a newline), reaches
``bertlook`` as one literal argument, because it went through :func:`shlex.quote`; the only
unquoted text is the fixed program prefix, a constant that reads the checkout's ``src/`` and the
Python running Snakemake from the environment (``BERTLOOK_SRC``, ``BERTLOOK_PYTHON``, set by
``rule_helpers.smk``), never from the config. ``tests/test_shell_injection.py`` runs the real Snakemake on a
config in which every string field of the schema holds a shell payload, and checks that none ran.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_FLAG_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_STEP_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def _text(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite number {value!r} on a command line")
        return repr(value)
    return str(value)


def flag_tokens(name: str, value: Any) -> list[str]:
    """Unquoted argv tokens of one flag: ``None``/``False`` -> none, ``True`` -> the bare flag,
    a list or tuple -> the flag once per item, anything else -> ``--name VALUE`` (``--name=VALUE``
    when the value starts with ``-``, so argparse does not take it for a flag)."""
    if not _FLAG_NAME.match(name):
        raise ValueError(f"bad flag name {name!r}")
    if value is None or value is False:
        return []
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if isinstance(value, (list, tuple)):
        return [tok for item in value for tok in flag_tokens(name, item)]
    text = _text(value)
    return [f"{flag}={text}"] if text.startswith("-") else [flag, text]


def command(prefix: str, step: str, flags: Mapping[str, Any], env: Mapping[str, Any] | None = None,
            args: Sequence[Any] = ()) -> str:
    """``[ENV=VALUE ...] PREFIX STEP [ARG ...] --flag VALUE ...`` with every env value, the step, every
    positional argument (``args``) and every flag token shell-quoted. ``prefix`` is the fixed program (a
    constant of the workflow), never a config value."""
    if not _STEP_NAME.match(step):
        raise ValueError(f"bad step name {step!r}")
    parts: list[str] = []
    for key, value in (env or {}).items():
        if not _ENV_NAME.match(key):
            raise ValueError(f"bad environment variable name {key!r}")
        parts.append(f"{key}={shlex.quote(_text(value))}")
    parts += [prefix, step]
    for arg in args:
        text = _text(arg)
        parts.append(shlex.quote(f"./{text}" if text.startswith("-") else text))  # never taken for a flag
    for name, value in flags.items():
        parts += [shlex.quote(tok) for tok in flag_tokens(name, value)]
    return " ".join(parts)
