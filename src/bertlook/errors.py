"""Error type for bad input: the message always names the file and line, or the example id."""


class BertlookError(Exception):
    """A user-facing error (bad input, unreachable model or corpus, bad config).

    The CLI prints ``error: <message>`` and exits with status 2, without a traceback.
    """


def check_choice(name: str, value, choices) -> None:
    """A :class:`BertlookError` ``unknown NAME VALUE (use one of ...)`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise BertlookError(f"unknown {name} {value!r} (use one of {', '.join(choices)})")


def check_at_least(name: str, value, low, *, optional: bool = False) -> None:
    """A :class:`BertlookError` ``NAME must be >= LOW, got VALUE`` unless ``value >= low`` (or, ``optional``, None)."""
    if not (optional and value is None) and value < low:
        raise BertlookError(f"{name} must be >= {low}, got {value}")
