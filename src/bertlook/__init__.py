"""bertlook: a reproducible re-run of "What Does BERT Look At?" (Clark et al., 2019)."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``bertlook.open_run`` / ``bertlook.Run`` / ``bertlook.open_atlas`` (the notebook API,
    :mod:`bertlook.reporting.api`, also as ``bertlook.api``), imported on first use so that ``import bertlook``
    (every CLI step) stays cheap."""
    if name == "api":
        from bertlook.reporting import api  # lazy: pandas and the reporting modules, only for notebooks

        return api
    if name in ("open_run", "Run", "open_atlas"):
        from bertlook.reporting import api  # lazy: pandas and the reporting modules, only for notebooks

        return getattr(api, name)
    raise AttributeError(f"module 'bertlook' has no attribute {name!r}")
