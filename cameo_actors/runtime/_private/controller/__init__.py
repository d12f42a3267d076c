"""The control plane: the controller actor (`actor.py`) and the managers behind it, each
with one job, reaching the executors through one gateway (`gateway.py`).

Only `actor.py` and `ray_gateway.py` import Ray; the managers run in-process in unit
tests. Imported by the runtime's API (to start the controller) and the tests.
"""
