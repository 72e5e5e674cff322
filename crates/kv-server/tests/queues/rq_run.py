"""python-rq's kinds of work against the server at $PORT: `enqueue` queues
20 plain jobs, a failing job, and a job that depends on another (their ids
in $IDS); a burst worker runs them apart; `check` reads every result back
and prints one line per kind, then "rq ok" if all were right."""
import os
import sys

from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus

import rq_tasks

conn = Redis(port=int(os.environ["PORT"]))
queue = Queue("default", connection=conn)
ids_file = os.environ["IDS"]

if sys.argv[1] == "enqueue":
    plain = [queue.enqueue(rq_tasks.add, i, i).id for i in range(20)]
    failing = queue.enqueue(rq_tasks.fail).id
    parent = queue.enqueue(rq_tasks.add, 1, 2)
    child = queue.enqueue(rq_tasks.add, 10, 20, depends_on=parent).id
    with open(ids_file, "w") as f:
        f.write("\n".join(plain + [failing, parent.id, child]))
else:
    with open(ids_file) as f:
        lines = f.read().split()
    plain, failing, parent, child = lines[:20], lines[20], lines[21], lines[22]
    checks = []
    ok = sum(Job.fetch(j, connection=conn).return_value() == 2 * i for i, j in enumerate(plain))
    checks.append(("plain", ok == len(plain)))
    f = Job.fetch(failing, connection=conn)
    result = f.latest_result()
    checks.append(("failing", f.get_status() == JobStatus.FAILED and result is not None and "ValueError: boom" in (result.exc_string or "")))
    parent_job, child_job = Job.fetch(parent, connection=conn), Job.fetch(child, connection=conn)
    checks.append(("dependent", parent_job.return_value() == 3 and child_job.return_value() == 30))
    for name, good in checks:
        print(name, "ok" if good else "WRONG")
    if all(good for _, good in checks):
        print("rq ok")
