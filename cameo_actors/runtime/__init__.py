"""The runtime on Ray: executors hosting activations, a controller, and the Python API."""

from cameo_actors.runtime.api import Runtime
from cameo_actors.runtime.config import RuntimeConfig

__all__ = ["Runtime", "RuntimeConfig"]
