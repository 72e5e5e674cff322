"""Sends 40 `add` jobs and one failing job to the Dramatiq actors of
dramatiq_tasks.py and waits for every result (the worker runs apart)."""
from dramatiq_tasks import add, fail

msgs = [add.send(i, i) for i in range(40)]
ok = 0
for i, m in enumerate(msgs):
    ok += m.get_result(block=True, timeout=20000) == 2 * i
fail.send()
print("results ok:", ok, "of", len(msgs))
