"""Celery tasks on the server at $PORT: Redis as broker and as result
backend (results wait by pub/sub). Run by `celery -A celery_tasks worker`
and used by celery_run.py."""
import os

from celery import Celery

url = "redis://127.0.0.1:%s/0" % os.environ["PORT"]
app = Celery("celery_tasks", broker=url, backend=url)
app.conf.update(
    broker_connection_retry_on_startup=True,
    result_expires=3600,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
)


@app.task
def add(x, y):
    return x + y


@app.task
def total(values):
    return sum(values)


@app.task
def fail():
    raise ValueError("boom")
