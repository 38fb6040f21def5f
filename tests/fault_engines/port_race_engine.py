#!/usr/bin/env python3
"""Reproduces the port race: another process takes the port between the tuner's check and the
engine's bind. The first launch binds --port itself, then runs the real engine (which fails with
'Address already in use'); later launches run the engine untouched. Usage: port_race_engine.py
MARKER_FILE REAL_ENGINE [engine args...]"""
import os
import socket
import subprocess
import sys

marker, engine, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if os.path.exists(marker):
    os.execv(engine, [engine, *args])
open(marker, "w").close()
port = int(args[args.index("--port") + 1])
squatter = socket.socket()
squatter.bind(("127.0.0.1", port))
squatter.listen()
sys.exit(subprocess.call([engine, *args]))
