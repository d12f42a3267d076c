"""What a failed Spark query's message means: whether it died for a transient reason (it
is started again), the useful part of the message, and the fix the error offers."""

from __future__ import annotations

import os

#: What Spark says when a query died for want of CPU or of a process, not of its input
#: or settings: a Python worker that did not start (or answer) in time on a loaded
#: machine, a worker or a pool that went away. Such a query is started again.
TRANSIENT = ("failed to connect back", "CANNOT_OPEN_SOCKET", "Python worker exited unexpectedly",
             "Connection reset", "Broken pipe", "RuntimeUnavailable", "the pool did not answer")


def transient(message: str) -> bool:
    """Whether Spark's message of a failed query says it died for a transient reason.

    >>> transient("Python worker failed to connect back.")
    True
    >>> transient("[PATH_NOT_FOUND] Path does not exist: /in")
    False
    """
    return any(mark in message for mark in TRANSIENT)


#: Where Spark's message of a failed query ends and its description of the query begins.
_PLAN_MARK = "=== Streaming Query ==="
#: The most characters of Spark's message a `SparkQueryFailed` carries.
MAX_MESSAGE_CHARS = 2000


def spark_message(text: str) -> str:
    """The useful part of a failed query's Spark message: without the query's description
    and plan, a Python worker's error by its last line (the exception raised), bounded.

    >>> spark_message("[X] Wrong basePath /a\\n=== Streaming Query ===\\nIdentifier: ...")
    '[X] Wrong basePath /a'
    """
    text = text.split(_PLAN_MARK, 1)[0].strip()
    if "Traceback (most recent call last)" in text:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        raised = [ln for ln in lines if not ln.startswith(("File ", "Traceback", "^", "~"))
                  and (": " in ln) and not ln.startswith(("at ", "org.", "java."))]
        head = lines[0] if lines else ""
        last = next((ln for ln in reversed(raised) if "Error" in ln.split(":")[0]
                     or "Exception" in ln.split(":")[0]), raised[-1] if raised else "")
        text = head if last in head else f"{head} ... {last}"
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " ..."


def failure_fix(message: str, dataflow: str, root: str, kind: str, step: str) -> str:
    """The fix a `SparkQueryFailed` offers for Spark's message."""
    resume = (f"`SparkTier.start({dataflow!r})` resumes the stopped queries from their "
              f"checkpoints (the dataflow still runs; `SparkTier.cancel({dataflow!r})` ends it)")
    if "FAILED_READ_FILE" in message or "exceeds the max length allowed" in message:
        # Spark names the file; the cause (in its log) may be binaryFile.maxLength.
        return ("Spark could not read the file it names. Where the writer reads an input's "
                "files (cameo.read, the default for Parquet and JSON), a file larger than "
                "`SparkConfig.max_file_bytes` is refused this way: read the input with "
                "Spark's reader (connector option cameo.read=spark), which splits a large "
                "file, or raise max_file_bytes; otherwise replace the file if it is "
                f"unreadable; then {resume}")
    if "basePath" in message or "checkpoint" in message.lower():
        where = os.path.join(root, dataflow, f"{kind}-{step}")
        return (f"the query's checkpoint (by default {where}) does not fit its connector (a "
                "name used before, with another input?): start it anew with "
                f"`SparkTier.start({dataflow!r}, fresh_checkpoints=True)`, which deletes the "
                "checkpoints the tier did not start itself (another query's, or unmarked "
                "ones), or delete that directory, or give the connector its own `checkpoint`")
    return f"fix what Spark's message says (a path, an option, the data); then {resume}"
