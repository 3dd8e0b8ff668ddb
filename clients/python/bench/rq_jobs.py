"""The job RQ's workers run in python_bench.py: nothing, like the Sundial Worker's handler."""


def noop(payload):
    return None
