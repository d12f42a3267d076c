"""What a `Runtime` handle does in the caller's process: the reliable push session, and
when a wait is over (`settle.py`).

Imported by `cameo_actors.runtime.api` only; it reaches executors through
`executor_api.ExecutorAPI`, never the executor package.
"""
