"""The executor: a Ray actor (`actor.py`) hosting many activations, and its logic without
Ray (`core.py`), one part per concern on one message path.

Imported by the executor's own modules, the in-process test cluster and the Ray
gateway that starts executors (`controller/ray_gateway.py`); never by the controller's
managers or the client, which reach an executor through `executor_api.ExecutorAPI`.
"""
