"""The runtime on Ray: executors hosting activations, a controller, and the Python API.

`Runtime` is imported on first use, so the pure parts of this package (the
executor core, routing, egress) load without Ray.
"""

from typing import Any

__all__ = ["Runtime", "RuntimeConfig"]


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from cameo_actors.runtime.api import Runtime

        return Runtime
    if name == "RuntimeConfig":
        from cameo_actors.runtime.config import RuntimeConfig

        return RuntimeConfig
    raise AttributeError(name)
