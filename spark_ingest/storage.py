"""Where Spark keeps checkpoints and writes files: a local path, or a URL pyarrow.fs knows
(`s3://`, `gs://`, `hdfs://`), for the tier's own small reads and writes there.

>>> filesystem("file:/tmp/ck")[1], filesystem("/tmp/ck/")[1]
('/tmp/ck', '/tmp/ck')
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote


def filesystem(location: str) -> tuple[Any, str]:
    """(pyarrow file system, path in it) of a location; a plain path is local (made
    absolute); "file:/x" and "file:///x" are local too."""
    from pyarrow import fs

    if location.startswith("file:"):
        location = unquote(location[len("file:"):])
        location = "/" + location.lstrip("/")  # file:/x, file:///x
    if "://" in location:
        return fs.FileSystem.from_uri(location)
    return fs.LocalFileSystem(), os.path.abspath(location)


def entries(location: str) -> list[str]:
    """Base names in a directory; [] when it does not exist."""
    from pyarrow import fs

    filesystem_, path = filesystem(location)
    infos = filesystem_.get_file_info(fs.FileSelector(path, allow_not_found=True))
    return [os.path.basename(i.path) for i in infos]
