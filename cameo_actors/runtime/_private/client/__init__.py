"""What a `Runtime` handle does in the caller's process: its view of the pool's dataflows
(`dataflows.py`), the controller as it calls it (`controller.py`), the reliable push
(`push.py`), reading outputs (`outputs.py`), starting a pool (`pool.py`), and when a wait
is over (`settle.py`).

Imported by `cameo_actors.runtime.api` only; it reaches the controller through
`controller_api.ControllerAPI` and the executors through `executor_api.ExecutorAPI`,
never their packages (but the controller's actor class, to start a pool).
"""
