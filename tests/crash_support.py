"""Shared by the crash tests: start a writer process, let it work a random while, SIGKILL it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest


def run_and_kill(args: list[str], env: dict[str, str], rnd: random.Random, longest: float) -> tuple[str, str]:
    """Run ``args``, wait for its first line (``ready ...``), kill it after up to ``longest`` seconds.

    Returns the first line and everything the writer printed after it. The
    rest is read through the same buffered file as the first line:
    ``readline()`` may already hold the first acknowledgements, and
    ``communicate()`` would read the pipe underneath and lose them.
    """
    # The with block closes both pipes (an open pipe is a ResourceWarning, so an error here).
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True) as proc:
        try:
            first = proc.stdout.readline()
            if not first.startswith("ready"):  # the writer failed to start: show why
                proc.kill()
                _, err = proc.communicate(timeout=10)
                pytest.fail(f"writer did not start: {first!r} {err}")
            time.sleep(rnd.uniform(0.0, longest))
            os.kill(proc.pid, signal.SIGKILL)
            out = proc.stdout.read()
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return first, out
