#!/usr/bin/env python3
"""An engine that starts and never becomes ready (like vLLM with --tensor-parallel-size 2 and
in-process multiprocessing off), with a child process, so teardown must take the whole group."""
import subprocess
import sys
import time

print("INFO loading model...", flush=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
while True:
    time.sleep(1)
