#!/usr/bin/env python3
"""Re-enacts a real vLLM out-of-memory failure through a real process: the startup lines and the
error text vLLM prints (vllm/v1/engine/core.py "EngineCore failed to start.", PyTorch's
OutOfMemoryError, vllm/v1/engine/utils.py "Engine core initialization failed", vLLM 0.32.0), then
exit code 1, as vLLM does."""
import sys
import time

print("INFO 11-30 02:00:00 [api_utils.py:347] vLLM API server version 0.32.0", flush=True)
time.sleep(0.5)
print("ERROR 11-30 02:00:01 [core.py:700] EngineCore failed to start.", flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
      "capacity of 79.15 GiB of which 1.06 GiB is free.", file=sys.stderr, flush=True)
print("RuntimeError: Engine core initialization failed. See root cause above.", file=sys.stderr)
sys.exit(1)
