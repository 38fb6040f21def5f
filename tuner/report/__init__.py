"""Reports of a study: what to run, how much it gains per workload, and why other configs lost.

``data`` computes the tables once; ``html`` and ``markdown`` only lay them out; ``command`` is
``tune report``.
"""
