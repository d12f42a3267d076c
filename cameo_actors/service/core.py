"""What the service does, without HTTP and without Ray: tenancy, idempotent submit,
status with throughput, events in, outputs out, reconfiguration, graceful stop.

`ServiceCore` drives any `RuntimeAPI` (`cameo_actors.runtime.interface`): a `Runtime` in
`cameo serve`, an in-memory fake in unit tests. Every refusal is an `ApiError` raised
before anything changed. Who may call which method (a tenant, the admin) is the
operations table's to say (`operations.authorize`, before the call); the core keeps each
tenant to its own dataflows. It is made of one part per concern, each a module:

- `tenancy.py`: what the parts share (a tenant's view of its dataflows, the push order);
- `submission.py`: submit, check, update, cancel, and stopping every dataflow;
- `status.py`: the list, a dataflow's status, spec, exceptions, explanation, executors;
- `inputs.py`: pushes and closes, refused early when a dataflow cannot take them;
- `results.py`: results and the error output, read with cursors and committed;
- `reconfig.py`: live reconfiguration and self-scaling;
- `overview.py`: what the console shows: a dataflow's graph, checkpoints and time line,
  the pool's hotspots, the list's figures.
"""

from __future__ import annotations

from cameo_actors.service.inputs import Inputs
from cameo_actors.service.overview import Overview
from cameo_actors.service.reconfig import Reconfig
from cameo_actors.service.results import Results
from cameo_actors.service.submission import Submission


class ServiceCore(Submission, Overview, Inputs, Results, Reconfig):
    """Tenancy, idempotency and bookkeeping around a runtime; safe to call from many
    threads (`Tenancy` says what it takes)."""
