"""The cameo service: `cameo serve` (Ray + executor pool + RPC API + /metrics), its
Python client and the `cameo` command.

`Client` is imported on first use, so `import cameo_actors.service` stays light.
"""

from typing import Any

__all__ = ["Client", "ServiceError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cameo_actors.service import client

        return getattr(client, name)
    raise AttributeError(name)
