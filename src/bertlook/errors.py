"""Error type for bad input: the message always names the file and line, or the example id."""


class BertlookError(Exception):
    """A user-facing error (bad input, unreachable model or corpus, bad config).

    The CLI prints ``error: <message>`` and exits with status 2, without a traceback.
    """
