"""Live reconfiguration and self-scaling as the API offers them: a tenant reconfigures
its own dataflows, the pool (rebalance, executors, nodes) is the admin's
(`operations.authorize` refuses a tenant first); the runtime's refusals become 404, 409
and 422."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from cameo_actors.errors import ReconfigError, UserError
from cameo_actors.runtime.boundary import (
    LIVE_STATES,
    ExecutorRemoval,
    MigrationInfo,
    NodeDrained,
)
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
    DataflowNotFound,
)
from cameo_actors.service import scaling as scaling_view
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    ended,
    not_found,
    reconfig_refused,
)
from cameo_actors.service.tenancy import Tenancy


class Reconfig(Tenancy):
    """The core's part that reconfigures dataflows and the pool (`core.ServiceCore`)."""

    # -- live reconfiguration: asynchronous, each answers with the migration(s) started ------
    # A tenant reconfigures its own dataflows; the pool (rebalance, executors) is the admin's:
    # `operations.authorize` refuses a tenant before these are called.
    def scale(self, principal: Principal, name: str, step: str, parallelism: int, *,
              strategy: str = "batched", batch_bins: int | None = None) -> MigrationInfo:
        """Change the parallelism of a keyed step while it runs; its key bins move to the
        new instances epoch by epoch. Returns the migration, running."""
        self._refuse_while_stopping()
        self._entry(principal, name)
        with self._reconfiguring(name):
            return self.rt.scale(name, step, parallelism, strategy=strategy,
                                 batch_bins=batch_bins)

    def migrate(self, principal: Principal, name: str, step: str, *,
                bins: Sequence[int] | None = None, to_instance: int | None = None,
                instance: int | None = None, to_executor: int | None = None,
                strategy: str = "batched", batch_bins: int | None = None) -> MigrationInfo:
        """Move key bins of a keyed step to another instance, or one of its instances to
        another executor. Returns the migration, running."""
        self._refuse_while_stopping()
        self._entry(principal, name)
        with self._reconfiguring(name):
            return self.rt.migrate(name, step, bins=bins, to_instance=to_instance,
                                   instance=instance, to_executor=to_executor,
                                   strategy=strategy, batch_bins=batch_bins)

    def migrations(self, principal: Principal, name: str | None = None
                   ) -> builtins.list[MigrationInfo]:
        """Reconfigurations (running and recent): of one dataflow, or of every dataflow this
        caller may see (the admin: all of them)."""
        if name is not None:
            self._entry(principal, name)
            try:
                return builtins.list(self.rt.migrations(name))
            except DataflowNotFound:  # gone meanwhile
                raise not_found(name) from None
            except DataflowEnded:  # its parts were freed, and its migrations with them
                return []
        every = builtins.list(self.rt.migrations())
        if principal.admin:
            return every
        mine = {d["name"] for d in self.rt.list() if principal.can_access(d["tenant"])}
        return [m for m in every if m["dataflow"] in mine]

    def rebalance(self, principal: Principal, *, strategy: str = "batched"
                  ) -> builtins.list[MigrationInfo]:
        """Even out the pool: instances and bins move to the executors with the least load."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return builtins.list(self.rt.rebalance(strategy=strategy))

    def add_executors(self, principal: Principal, count: int = 1) -> builtins.list[int]:
        """Start `count` executors; returns their indices (nothing moves to them until a
        rebalance, a migrate or a new dataflow)."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return builtins.list(self.rt.add_executors(count))

    def remove_executor(self, principal: Principal, index: int, *, strategy: str = "batched"
                        ) -> ExecutorRemoval:
        """Drain an executor: its instances move elsewhere, then it stops. Returns
        {"executor", "moving": [instances], "state": "draining"}."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return self.rt.remove_executor(index, strategy=strategy)

    def drain_node(self, principal: Principal, node: str) -> NodeDrained:
        """Take a node's executors out of the pool before it goes: its dataflows are
        checkpointed and restored on the executors left. Returns {"node", "executors",
        "dataflows", "ray_refused", "seconds"} once done."""
        self._refuse_while_stopping()
        with self._reconfiguring(None):
            return self.rt.drain_node(node)

    # -- self-scaling: the controller's view, and a dataflow's own settings and pins ---------
    def scaling(self, principal: Principal, name: str | None = None) -> dict[str, Any]:
        """The scaling controller's status: of one dataflow, or pool-wide. The admin sees
        it all; a tenant its own dataflows (their steps, decisions, misses, failed actions),
        and not the pool's executors."""
        if name is not None:
            self._entry(principal, name)
        with self._scaling_call(name):
            status = self.rt.scaling(name)
        if principal.admin:
            return scaling_view.visible(status, None)
        own = {name} if name is not None else \
            {d["name"] for d in self.rt.list() if principal.can_access(d["tenant"])}
        return scaling_view.visible(status, own)

    def set_scaling(self, principal: Principal, name: str, settings: dict[str, Any] | None,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        """Give a dataflow its own scaling settings (over the pool's; None: the pool's
        again) and pin steps to a parallelism (None unpins). Returns its scaling status.
        A setting or pin the runtime refuses is 422 with its subject, expected, got, fix."""
        self._refuse_while_stopping()
        entry = self._entry(principal, name)
        if entry["state"] not in LIVE_STATES:  # its scaling ended with it
            raise ended(DataflowEnded(name, entry["state"], None))
        with self._scaling_call(name):
            status = self.rt.set_scaling(name, settings, pin=pin or None)
        return scaling_view.visible(status, None if principal.admin else {name})

    @contextlib.contextmanager
    def _scaling_call(self, name: str | None) -> Iterator[None]:
        """The runtime's refusals of a scaling call, as the API says them: 422 (a setting
        or pin it cannot take: ScalingConfigError), 404 (gone), 409 (ended)."""
        try:
            yield
        except UserError as e:
            raise ApiError.from_user_error(e, 422, "invalid_scaling") from None
        except DataflowNotFound as e:
            raise not_found(name or e.name) from None
        except DataflowEnded as e:
            raise ended(e) from None

    @contextlib.contextmanager
    def _reconfiguring(self, name: str | None) -> Iterator[None]:
        """The runtime's refusals of a reconfiguration, as the API says them: 404 (gone),
        409 (ended, or a conflict), 422 (cannot be done as asked)."""
        try:
            yield
        except ReconfigError as e:  # ReconfigConflict is one: 409
            raise reconfig_refused(e) from None
        except DataflowNotFound as e:
            raise not_found(name or e.name) from None
        except DataflowEnded as e:
            raise ended(e) from None
