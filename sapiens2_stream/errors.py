"""The one exception type for errors a user can cause and fix, and the one rule that keeps passwords out of what
the tool says.

The CLI prints an error's message as a single line and exits non-zero; anything else is a bug and keeps its
traceback. Camera, re-stream and webhook URLs often carry `user:password@`; every line, file, payload and page
that names a URL shows it through `redact` (an error's message always does, and so does every line the package's
logger says, in any process: the CLI, a fleet worker, the Python API), so logs shipped to an aggregator never
hold a password.
"""

from __future__ import annotations

import logging
import re

# scheme://user:password@ : the password runs to the last "@" before the path (cameras' passwords are not always
# percent-encoded), never across a "/" or white space
CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):[^\s/]*@")


def redact(text: str) -> str:
    """`text` with the password of every URL in it shown as `***` (rtsp://admin:pw@host -> rtsp://admin:***@host)."""
    return CREDENTIALS.sub(r"\g<head>:***@", text)


class Sapiens2StreamError(Exception):
    """A user-facing error whose message names the problem and the fix in one line (passwords redacted)."""

    def __str__(self) -> str:
        return redact(super().__str__())


class Redacting(logging.Filter):
    """Every record of the package's logger with its message's passwords redacted, whoever handles it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        return True


logging.getLogger("sapiens2_stream").addFilter(Redacting())
