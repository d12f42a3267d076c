"""The control plane: the managers behind the controller (`../controller.py`), each
with one job, reaching the executors through one gateway (`gateway.py`)."""
