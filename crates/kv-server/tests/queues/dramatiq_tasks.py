"""Dramatiq actors on a Redis broker and result backend at 127.0.0.1:$PORT
(the queue-library test, crates/kv-server/tests/it/queues.rs)."""
import os, dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend
port = int(os.environ.get("PORT", "7998"))
broker = RedisBroker(host="127.0.0.1", port=port)
broker.add_middleware(Results(backend=RedisBackend(host="127.0.0.1", port=port)))
dramatiq.set_broker(broker)

@dramatiq.actor(store_results=True, max_retries=0)
def add(x, y):
    return x + y

@dramatiq.actor(max_retries=0)
def fail():
    raise ValueError("boom")
