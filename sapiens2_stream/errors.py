"""The one exception type for errors a user can cause and fix.

The CLI prints its message as a single line and exits non-zero; anything else is a bug and keeps its traceback.
"""


class Sapiens2StreamError(Exception):
    """A user-facing error whose message names the problem and the fix in one line."""
