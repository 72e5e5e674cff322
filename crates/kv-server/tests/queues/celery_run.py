"""Runs Celery's kinds of work against the worker of celery_tasks.py and
checks every result: plain tasks, a failing task (its exception comes back),
a delayed task (countdown), a group and a chord. Prints one line per kind
and "celery ok" if all were right."""
import time

from celery import chord, group

from celery_tasks import add, fail, total

checks = []

plain = [add.delay(i, i) for i in range(20)]
checks.append(("plain", [r.get(timeout=30) for r in plain] == [2 * i for i in range(20)]))

failed = fail.delay()
try:
    failed.get(timeout=30)
    checks.append(("failing", False))
except ValueError as e:
    checks.append(("failing", str(e) == "boom" and failed.state == "FAILURE"))

sent = time.monotonic()
delayed = add.apply_async((40, 2), countdown=1)
value = delayed.get(timeout=30)
checks.append(("delayed", value == 42 and time.monotonic() - sent >= 0.9))

g = group(add.s(i, 1) for i in range(10))().get(timeout=30)
checks.append(("group", g == [i + 1 for i in range(10)]))

c = chord((add.s(i, i) for i in range(10)), total.s())().get(timeout=30)
checks.append(("chord", c == sum(2 * i for i in range(10))))

for name, ok in checks:
    print(name, "ok" if ok else "WRONG")
if all(ok for _, ok in checks):
    print("celery ok")
