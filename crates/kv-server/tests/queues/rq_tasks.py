"""python-rq jobs (their module must be importable by the worker)."""


def add(x, y):
    return x + y


def fail():
    raise ValueError("boom")
