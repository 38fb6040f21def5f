"""Processes and containers: start an engine, watch it become ready, tear down its whole process group
(or container), and reap what a dead tuner left behind."""
