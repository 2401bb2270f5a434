"""Freezing a serving process's startup heap: in a fresh interpreter, since it changes
the process for good."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc
import harbor_ray.capture.proxy.app  # a serving process's imports
from harbor_ray.capture.proxy.heap import freeze_startup_heap

before = len(gc.get_objects())
freeze_startup_heap()
after = len(gc.get_objects())

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # cyclic garbage made after the freeze is still collected
del a, b
print(before, after, gc.collect())
"""


def test_the_startup_heap_is_frozen_and_new_garbage_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    before, after, collected = map(int, done.stdout.split())
    assert before > 10_000  # what a full collection would otherwise walk every time
    assert after < 100
    assert collected >= 2
